"""evo as a library: what the CLI does, from Python (a notebook, a build script). The CLI is a face
over these functions; every bad argument is a ``ValueError`` naming it, raised before anything is written.

    import evo

    result = evo.tune("./demo", budget=40, target="0.8x")         # or family=a KernelFamily loaded from a file
    print(result.run_id, result.status, result.best_fitness_s, result.best_genome)
    evo.export_run(result.run_id, "demo_op")                       # the package, with its self-check
    more = evo.resume(result.run_id, budget=80)                    # the same run, further

``tune`` and ``resume`` return a ``SearchOutcome`` (run id, status, best genome and time, the anchor's
time, a workload run's dispatch table); ``export_run`` an ``ExportResult`` (the files, the module's name).
(``evo.search`` and ``evo.export`` are the modules of the loop and of the export.)
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from evo.db import Database, RunStatus, SchemaError, Store, resolve_url
from evo._config import SearchConfig
from evo.experiment import parse_duration


def database_at(db: str | Path | None, *, must_exist: bool) -> Database:
    """The database ``db`` names (a path or a SQLAlchemy URL; None: $EVO_DB or ./evo.db); one that is
    another application's is refused untouched."""
    try:
        database = Database(resolve_url(None if db is None else str(db)))
        database.refuse_a_database_not_evos()  # before anything, even a compile, is written
    except SchemaError as exc:
        raise ValueError(str(exc)) from None
    if must_exist and not database.exists():
        raise ValueError(f"no database at {database.description} (run `evo search` first or pass --db)")
    return database


def open_store(database: Database, *, create: bool = True, writes: bool = True) -> Store:
    """The store; a SQLite file evo cannot write is opened read-only for what only reads (``writes``
    False), and refused by what writes."""
    if database.cannot_write():
        if writes:
            raise ValueError(f"database {database.description} cannot be written here (a read-only file or folder): "
                             f"give --db a writable place")
        database.read_only = True
    try:
        database.open(create=create)
    except SchemaError as exc:
        raise ValueError(str(exc)) from None
    return Store(database)


def new_search(family, *, workload=None, workload_where: str = "the workload", db=None,
               ray_address: str | None = None, reporter=None, **settings):
    """A ``Search`` ready to ``start()``: ``family`` a reference (name, path, ``module:ATTRIBUTE``) or a
    family object loaded from one; ``workload`` a name, a TOML file, a ``[workload]`` table (its errors
    say it is ``workload_where``'s) or a Workload; ``settings`` the fields of ``SearchConfig``
    (``time_budget`` may be a duration such as "10m")."""
    from evo.search import Search
    from evo.strategies import make_strategy
    from evo.seeds import KernelFamily, Workload, get_family, parse_workload, resolve_workload

    if isinstance(family, KernelFamily):
        if not family.lookup_name:  # Ray's workers load the family by its reference
            raise ValueError(f"family {family.name!r} was made here, not loaded: put it in a spec.py and pass its "
                             f"path (or load it with evo.seeds.get_family) so that evo's workers can load it too")
        family = family.reference_key
    if not isinstance(family, str):
        raise ValueError(f"family must be a reference (name, path, module:ATTRIBUTE) or a family, got {family!r}")
    known = {f.name for f in dataclasses.fields(SearchConfig)} - {"family", "workload"}
    unknown = sorted(set(settings) - known - {"time_budget"})
    if unknown:
        raise ValueError(f"unknown search setting(s) {unknown}; known: {sorted(known)}")
    if "time_budget" in settings:
        settings["time_budget_s"] = _seconds(settings.pop("time_budget"))
    config = SearchConfig(family=family, **settings)
    family = get_family(config.family_reference)
    config = config.with_strategy_of(family)
    if workload is not None:
        if isinstance(workload, str):
            workload = resolve_workload(family, workload)
        elif not isinstance(workload, Workload):
            workload = parse_workload(family, workload, workload_where)
        config = dataclasses.replace(config, workload=workload.to_dict())
    make_strategy(config.strategy, family.space, seed=config.seed, population=config.population,
                  options=config.strategy_options)
    database = database_at(db, must_exist=False)
    if ray_address is not None:  # before anything is written
        from evo.fitness import check_ray_address

        check_ray_address(ray_address)
    if family.device == "cuda" and ray_address is None:
        _refuse_a_gpu_family_without_a_gpu(family)
    preflight(family, config, workload)
    return Search(config, open_store(database), reporter or SilentReporter(), ray_address=ray_address)


def resumed_search(run_id: int, *, db=None, ray_address: str | None = None, reporter=None, budget: int | None = None,
                   time_budget: float | str | None = None):
    """A ``Search`` ready to ``resume(run_id)``; only its budgets may change."""
    from evo.search import Search
    from evo.seeds import get_family

    database = database_at(db, must_exist=True)
    store = open_store(database, create=False)
    run = store.get_run(run_id)
    if run is None:
        raise ValueError(f"run {run_id} does not exist in {database.description}")
    limits: dict[str, Any] = {}
    if budget is not None:
        limits["budget"] = budget
    if time_budget is not None:
        limits["time_budget_s"] = _seconds(time_budget)
    refuse_a_run_that_cannot_go_on(run, limits)
    try:
        config = SearchConfig.from_dict({**dict(run.config), **limits})
        get_family(config.family_reference)
    except ValueError as exc:
        raise ValueError(f"run {run_id} cannot resume: {exc}") from None
    return Search(config, store, reporter or SilentReporter(), ray_address=ray_address)


def tune(family, **arguments):
    """Start a search and run it to its end (see ``new_search``); its ``SearchOutcome``."""
    return new_search(family, **arguments).start()


def resume(run_id: int, **arguments):
    """Continue a stopped, killed or spent run (see ``resumed_search``); its ``SearchOutcome``."""
    return resumed_search(run_id, **arguments).resume(run_id)


def export_run(run_id: int, out: str | Path, *, individual: int | None = None, db=None):
    """The run's best kernel (a workload run: its op), or ``individual``, as a package in ``out``."""
    from evo.export import export_run as export_stored_run

    store = open_store(database_at(db, must_exist=True), create=False, writes=False)
    return export_stored_run(store, run_id, individual, Path(out))


def _seconds(duration: float | str) -> float:
    """A time budget: seconds, or a duration such as "10m"."""
    return parse_duration(duration, "time_budget") if isinstance(duration, str) else duration


class SilentReporter:
    """A search's progress, unsaid (a library call reads the outcome instead)."""

    def started(self, *args) -> None: ...

    def evaluated(self, *args) -> None: ...

    def message(self, text: str) -> None: ...

    def finished(self, outcome) -> None: ...

    def close(self) -> None: ...


def refuse_a_run_that_cannot_go_on(run, limits: dict) -> None:
    """A run whose driver is alive elsewhere, that reached its target or ran out of new genomes, that
    ended at its limits without new ones, or with a budget it has already spent: one line each."""
    if run.status == RunStatus.RUNNING and not run.driver_died():
        raise ValueError(f"run {run.id} is running in process {run.pid} on {run.host} (heard from {run.heard_s():.0f} s "
                         f"ago): stop it there first (Ctrl-C), or wait for it")
    if run.status == RunStatus.ALL_FAILED:
        raise ValueError(f"run {run.id} stopped because its first evaluations all failed the same way (`evo show "
                         f"{run.id}` says how): fix the family and start a new search")
    if run.status in (RunStatus.TARGET_REACHED, RunStatus.SPACE_EXHAUSTED):
        raise ValueError(f"run {run.id} ended with {run.status.replace('_', ' ')}: there is nothing left to resume "
                         f"(start a new search)")
    budget = limits.get("budget")
    if budget is not None and budget <= run.evaluations:
        raise ValueError(f"run {run.id} already has {run.evaluations} evaluations: --budget {budget} leaves it none "
                         f"(give more than {run.evaluations})")
    if run.status == RunStatus.BUDGET_EXHAUSTED and budget is None:
        raise ValueError(f"run {run.id} spent its budget ({run.evaluations} evaluations): give a larger --budget to "
                         f"go on")
    if run.status == RunStatus.TIME_EXHAUSTED and budget is None and "time_budget_s" not in limits:
        raise ValueError(f"run {run.id} ran out of time after {run.evaluations} evaluations: give a --time-budget (or "
                         f"a larger --budget) to go on")


def refuse_a_family_that_does_not_compile(family, config: SearchConfig) -> None:
    """Build the seed genomes here (cached: the search's own builds of them are then cache hits); when
    none compiles, the family's source is broken and no run is started. Skipped where this machine
    lacks the family's compiler (a Ray cluster's workers build)."""
    from evo.fitness import BuildConfig, Builder, Status, default_cache_dir
    from evo.fitness.build import compiler_command

    builder = Builder(BuildConfig(Path(config.cache_dir) if config.cache_dir else default_cache_dir(),
                                  config.build_timeout_s))
    failures = []
    for seed in family.seed_genomes:
        try:
            recipe = family.build_recipe(seed)
        except Exception as exc:  # noqa: BLE001 - the family's own code failing is the user's input failing
            failures.append(f"rendering its source raised {type(exc).__name__}: {exc}")
            continue
        if shutil.which(compiler_command(recipe.compiler)) is None:
            return
        build = builder.build(seed.id, recipe)
        if build.status not in (Status.COMPILE_ERROR, Status.COMPILE_TIMEOUT):
            return
        failures.append(build.message)
    raise ValueError(f"family {family.name} does not build: its seed genome fails ({failures[0]})")


def preflight(family, config: SearchConfig, workload=None) -> None:
    """A family's own mistakes, each one line (a ValueError), before a run is written (evo/_preflight.py): seeds
    that break the constraints or an empty space; seeds that do not compile; a family of the user's own: a
    reference that raises, an output of the wrong shape, a build that does not load, a launch that raises or
    crashes; an anchor that disagrees with the reference."""
    from evo._preflight import check_in_a_process_of_its_own, check_space, is_builtin
    from evo.fitness import default_cache_dir

    check_space(family)
    refuse_a_family_that_does_not_compile(family, config)
    if not is_builtin(family):
        check_in_a_process_of_its_own(family, Path(config.cache_dir) if config.cache_dir else default_cache_dir())
    refuse_a_wrong_anchor(family, workload)


def refuse_a_wrong_anchor(family, workload=None) -> None:
    """PyTorch's side of every claim checked before a run is written: the anchor against the reference at the
    family's smallest shape (a workload's fallback at each of its shapes), where it can run here (a CUDA family's
    evaluator checks it again on its GPU before timing it)."""
    import tempfile

    import torch

    from evo.fitness import EvalConfig, Evaluator

    if family.device == "cuda" and not torch.cuda.is_available():
        return
    with tempfile.TemporaryDirectory(prefix="evo-anchor-") as folder:
        wrong = Evaluator(family, EvalConfig(trials=1, workload=workload), Path(folder)).anchor_mismatch()
    if wrong is not None:
        from evo._preflight import where

        raise ValueError(f"{where(family)}: {wrong}")


def _refuse_a_gpu_family_without_a_gpu(family) -> None:
    import torch

    if not torch.cuda.is_available():
        raise ValueError(f"family {family.name} runs on a CUDA GPU and this machine has none "
                         f"(use --ray-address for a cluster with GPUs, or a CPU family such as --family cpu_gemm)")
    runs, why = family.runs_here()
    if not runs:
        raise ValueError(f"family {family.name} is built but unverified on this machine: {why} "
                         f"(its kernels still compile and pass the ptxas screen here; see `evo families`)")
