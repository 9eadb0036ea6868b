"""The ``evo`` subcommands. Every input is validated before anything is written."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy.exc import SQLAlchemyError

from evo.db import Database, RunLost, RunStatus, SchemaError, Store
from evo.api import database_at, open_store
from evo._ends import BadInput, Failed, Interrupted
from evo._causes import Causes
from evo._config import DEFAULT_FAMILY, SETTINGS, SearchConfig
from evo._views import gate_line, mission_anchor, run_dispatch_table, unsteady_at_fitness_shape
from evo.experiment import load_experiment, parse_duration
from evo.fitness import format_seconds


def dispatch(args: argparse.Namespace, console: Console) -> int:
    from evo._check import cmd_check
    from evo._doctor import cmd_doctor

    handlers = {"search": cmd_search, "runs": cmd_runs, "show": cmd_show, "lineage": cmd_lineage,
                "export": cmd_export, "families": cmd_families, "doctor": cmd_doctor, "db": cmd_db,
                "new-family": cmd_new_family, "replay": cmd_replay, "check": cmd_check}
    return handlers[args.command](args, console)


# -- helpers ----------------------------------------------------------------------------------
def _database(args, *, must_exist: bool) -> Database:
    try:
        return database_at(getattr(args, "db", None), must_exist=must_exist)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def _open(database: Database, *, create: bool = True, writes: bool = True) -> Store:
    """The store (see evo.api.open_store), or one line and exit 2."""
    try:
        return open_store(database, create=create, writes=writes)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


# -- search -------------------------------------------------------------------------------------
FLAG_FIELDS = {s.option[2:].replace("-", "_"): s.field for s in SETTINGS if s.flag and not s.duration}  # dest -> field
RESUMABLE_OVERRIDES = {"budget", "time_budget"}
WORKLOAD_FLAG = "workload"  # resolved once the family is known (a built-in workload's name or a TOML file)


def _search_settings(args) -> tuple[dict[str, Any], dict[str, Any]]:
    """SearchConfig fields and strategy options from the experiment file, then the flags."""
    settings, options = ({}, {})
    if args.experiment:
        try:
            settings, options = load_experiment(args.experiment)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
    for flag, name in FLAG_FIELDS.items():
        value = getattr(args, flag)
        if value is not None:
            settings[name] = value
    for setting in SETTINGS:
        value = getattr(args, setting.option[2:].replace("-", "_"), None) if setting.flag == "duration" else None
        if value is not None:
            try:
                settings[setting.field] = parse_duration(value, setting.option)
            except ValueError as exc:
                raise BadInput(str(exc)) from None
    if args.sampler is not None:
        options["sampler"] = args.sampler
    settings.setdefault("family", DEFAULT_FAMILY)
    return settings, options


def cmd_search(args, console: Console) -> int:
    if args.ray_address:
        from evo.fitness import prepare_to_join

        prepare_to_join()  # before anything imports Ray: it reads its settings then
    from evo.api import new_search, resumed_search
    from evo.progress import ConsoleReporter

    settings, options = _search_settings(args)
    reporter = ConsoleReporter(console)
    if args.resume is not None:
        fixed = (set(FLAG_FIELDS) - RESUMABLE_OVERRIDES) | {"sampler", "experiment", WORKLOAD_FLAG}
        explicit = {f for f in fixed if getattr(args, f) is not None}
        if explicit:
            raise BadInput(f"--resume continues a run with its own settings; only --budget and --time-budget "
                           f"may change (got --{sorted(explicit)[0].replace('_', '-')})")
        try:
            search = resumed_search(args.resume, db=args.db, ray_address=args.ray_address, reporter=reporter,
                                    budget=settings.get("budget"), time_budget=settings.get("time_budget_s"))
        except ValueError as exc:
            raise BadInput(str(exc)) from None
        reporter.budget = search.config.budget
        return _run(search, lambda: search.resume(args.resume))
    settings["strategy_options"] = options
    settings.setdefault("strategy", SearchConfig.strategy)
    if "sampler" in options and settings["strategy"] != "optuna":
        raise BadInput("--sampler applies to --strategy optuna only")
    table = settings.pop("workload", None)  # the experiment file's [workload]; --workload (a name or a file) wins
    workload = args.workload if args.workload is not None else table
    try:
        search = new_search(settings.pop("family"), workload=workload, workload_where=f"experiment file "
                            f"{args.experiment!r}", db=args.db, ray_address=args.ray_address, reporter=reporter,
                            **settings)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    reporter.budget = search.config.budget
    return _run(search, search.start)


def _run(search, go) -> int:
    """Run a search to its exit code; a Ray address that cannot be joined is bad input (nothing written);
    an interrupt (Ctrl-C, SIGTERM) closes the live line and names the run to resume (exit 130)."""
    from evo.fitness import RayUnavailable

    try:
        return go().exit_code
    except RayUnavailable as exc:
        raise BadInput(str(exc)) from None
    except KeyboardInterrupt:
        search.reporter.close()
        status = search.mark_interrupted()
        if status is None:
            raise Interrupted("interrupted before a run was written: nothing to resume") from None
        if status != RunStatus.INTERRUPTED:  # it had ended (or another driver owns it) before the interrupt came
            raise Interrupted(f"interrupted: run {search.run_id} is {status.replace('_', ' ')}") from None
        raise Interrupted(f"interrupted: run {search.run_id} is marked interrupted; continue it with "
                          f"`evo search --resume {search.run_id}`") from None
    except RunLost as exc:
        search.reporter.close()
        raise Failed(str(exc)) from None
    except SQLAlchemyError as exc:
        search.reporter.close()
        where = f"; run {search.run_id} is marked failed where it could still be written" if search.run_id else ""
        raise Failed(f"the database failed: {_first_line(exc)}{where}") from None


def _first_line(exc: BaseException) -> str:
    """A database error's own words, without the SQL and the links SQLAlchemy appends."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:300]


# -- reading the store ------------------------------------------------------------------------
def cmd_runs(args, console: Console) -> int:
    database = _database(args, must_exist=False)
    if not database.exists():
        console.print(f"no runs yet: {database.description} does not exist", highlight=False)
        return 0
    runs = _open(database, create=False, writes=False).list_runs()
    table = Table(title=f"runs in {database.description}")
    for column in ("run", "family", "strategy", "status", "evaluations", "best", "target", "started"):
        table.add_column(column)
    for r in runs:
        workload = (r.config or {}).get("workload")
        family = f"{r.family} (workload {workload.get('name')})" if isinstance(workload, dict) else r.family
        status = f"{r.status} (driver died; resume it)" if r.driver_died() else r.status
        table.add_row(str(r.id), family, r.strategy, status, str(r.evaluations), format_seconds(r.best_fitness_s),
                      r.target or "-", r.created_at.strftime("%Y-%m-%d %H:%M"))
    console.print(table)
    return 0


def cmd_show(args, console: Console) -> int:
    database = _database(args, must_exist=True)
    store = _open(database, create=False, writes=False)
    run = store.get_run(args.run)
    if run is None:
        raise BadInput(f"run {args.run} does not exist in {database.description}")
    anchor = mission_anchor(run.anchor, run)
    status = (f"{run.status} (its driver, process {run.pid} on {run.host}, died: `evo search --resume {run.id}` "
              f"takes it over)" if run.driver_died() else run.status)
    console.print(f"[bold]run {run.id}[/]: family {run.family}, strategy {run.strategy}, status {status}, "
                  f"{run.evaluations} evaluations; target {run.target or '-'} "
                  f"({format_seconds(run.target_seconds)}); anchor {format_seconds(anchor)}"
                  + ("; timed with cold caches" if run.cold_cache else ""), highlight=False)
    hardware = dict(run.hardware or {})
    secondary = hardware.pop("secondary_anchors", None) or {}
    refused = hardware.pop("secondary_anchors_refused", None) or {}
    if hardware:
        console.print("hardware: " + ", ".join(f"{k}={v}" for k, v in hardware.items()), highlight=False)
    for name, timings in secondary.items():
        console.print(f"also timed in the evaluator: {name}: "
                      f"{format_seconds(mission_anchor(timings, run))} at the mission shape", highlight=False)
    for name, why in refused.items():
        console.print(f"not timed: {name}: {why}", highlight=False)
    table = Table(title="best individuals")
    for column in ("rank", "individual", "genome id", "gen", "origin", "time", "speedup vs anchor"):
        table.add_column(column)
    best = store.best(run.id, args.top)
    for rank, (individual, evaluation) in enumerate(best, 1):
        # the anchor timed in the same process as this kernel
        own_anchor = mission_anchor(evaluation.anchor, run) or anchor
        speedup = f"{own_anchor / evaluation.fitness_s:.2f}x" if own_anchor else "-"
        if unsteady_at_fitness_shape(evaluation, run):
            speedup = "unsteady timing"  # no ratio is printed on timings that would not hold still
        table.add_row(str(rank), str(individual.id), individual.genome_id, str(individual.generation),
                      individual.origin, format_seconds(evaluation.fitness_s), speedup)
    console.print(table)
    for rank, (individual, _) in enumerate(best, 1):
        genome = " ".join(f"{k}={v}" for k, v in sorted(individual.genome.items()))
        console.print(f"#{rank} genome {individual.genome_id}: {genome}", highlight=False, soft_wrap=True)
    for gate, individual in store.gates(run.id):
        console.print(gate_line(gate, individual), highlight=False)
    counts = store.failure_counts(run.id)
    console.print("statuses: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none yet"),
                  highlight=False)
    causes = Causes()
    for row in store.evaluations(run.id):
        causes.add(row.status, row.message, row.genome_id)
    for cause in causes.first():
        console.print(f"failed: {cause.text()}", highlight=False, soft_wrap=True)
    table = run_dispatch_table(store, run)
    if table is not None:
        from evo.progress import dispatch_table_view

        console.print(dispatch_table_view(table))
        console.print(table.summary(), highlight=False)
    return 0


def cmd_lineage(args, console: Console) -> int:

    from evo.report import FORMATS, build_report, write_report

    if args.format not in FORMATS:
        raise BadInput(f"--format must be one of {', '.join(FORMATS)}, not {args.format!r}")
    database = _database(args, must_exist=True)
    store = _open(database, create=False, writes=False)
    run = store.get_run(args.run)
    if run is None:
        raise BadInput(f"run {args.run} does not exist in {database.description}")
    out = Path(args.out or f"run-{run.id}-lineage.{args.format}")
    if out.is_dir():
        raise BadInput(f"--out {out} is a directory; give a file name")
    if not out.resolve().parent.is_dir():
        raise BadInput(f"--out {out}: the directory {out.resolve().parent} does not exist")
    report = build_report(store, run.id, mission_anchor(run.anchor, run))
    try:
        written = write_report(report, args.format, out)
    except OSError as exc:
        raise BadInput(f"cannot write the report {out}: {exc.strerror or exc}") from None
    console.print(f"run {run.id}: lineage of individual {report.best_id} ({len(report.steps)} steps), "
                  f"{sum(report.failures.values())} evaluations -> " + ", ".join(str(p) for p in written),
                  highlight=False, soft_wrap=True)
    return 0


def cmd_export(args, console: Console) -> int:

    from evo.export import export_run

    database = _database(args, must_exist=True)
    store = _open(database, create=False, writes=False)
    try:
        result = export_run(store, args.run, args.individual, Path(args.out))
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    what = (f"the workload's op {result.module_name} ({result.table.summary()})" if result.table is not None
            else f"individual {result.individual_id} (genome {result.genome_id})")
    console.print(f"exported {what} to {args.out}: " + ", ".join(p.name for p in result.files),
                  highlight=False, soft_wrap=True)
    console.print(f"check it: python {Path(args.out) / 'selfcheck.py'}", highlight=False)
    return 0


def cmd_families(args, console: Console) -> int:
    from evo.seeds import family_names, get_family
    from evo.seeds import family_folders, installed_families

    found = [(name, "built-in") for name in family_names()]
    found += [(target, f"installed as {key}") for key, target in sorted(installed_families().items())]
    found += [(f"./{folder.name}", "folder here") for folder in family_folders(Path.cwd())]
    for name, kind in found:
        try:
            family = get_family(name)
        except ValueError as exc:  # a broken family here is reported, and the others still listed
            console.print(f"{name} ({kind}): cannot be loaded: {exc}", highlight=False, markup=False)
            continue
        shown = family.name if kind != "folder here" else name  # an installed one by its own name, as search takes it
        table = Table(title=f"{shown} ({kind}, {family.device}): {family.description}; anchor {family.anchor_name}")
        table.add_column("knob")
        table.add_column("domain")
        table.add_column("meaning")
        for knob in family.space.knobs:
            table.add_row(knob.name, knob.describe(), knob.description)
        console.print(table)
        console.print("constraints: " + "; ".join(f"{c.name}: {c.description}" for c in family.space.constraints),
                      highlight=False, markup=False)
        console.print("shapes: " + ", ".join(s.label() + (" [mission]" if s.mission else "") for s in family.shapes),
                      highlight=False, markup=False)
        for w in family.workloads:
            console.print(f"workload {w.describe()}: " + ", ".join(s.label() for s in w.shapes),
                          highlight=False, markup=False)
        if family.compute_capability is not None:
            runs, why = family.runs_here()
            console.print("runs on GPUs of compute capability {}.{}".format(*family.compute_capability)
                          + ("" if runs else f"; built but unverified on this machine ({why})"),
                          highlight=False, markup=False)
    return 0


def cmd_new_family(args, console: Console) -> int:
    from evo._new_family import new_family

    try:
        written = new_family(args.name, args.device, Path.cwd())
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    console.print(f"wrote {', '.join(str(p.relative_to(Path.cwd())) for p in written)}; try: evo search --family "
                  f"./{args.name} --budget 8", highlight=False, soft_wrap=True)
    return 0


def cmd_replay(args, console: Console) -> int:
    from evo.replay import MODES, kernel_tuner_space, store_space, summarize, table_rows
    from evo.strategies import STRATEGIES
    from evo.seeds import get_family

    if (args.source is None) == (args.run is None):
        raise BadInput("replay needs a Kernel Tuner cache file or --run N (one of the two)")
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = sorted(set(strategies) - set(STRATEGIES))
    if not strategies or unknown:
        raise BadInput(f"--strategies: unknown {unknown or 'none given'}; choose from {sorted(STRATEGIES)}")
    if args.mode not in MODES:
        raise BadInput(f"--mode {args.mode!r}: one of {list(MODES)}")
    try:
        if args.run is not None:
            store = _open(_database(args, must_exist=True), create=False, writes=False)
            run = store.get_run(args.run)
            if run is None:
                raise ValueError(f"run {args.run} does not exist")
            recorded = store_space(store, args.run, get_family(run.family))
        else:
            recorded = kernel_tuner_space(args.source)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    summaries = [summarize(recorded, name, seeds=range(args.seeds), budget=args.budget, population=args.population,
                           mode=args.mode) for name in strategies]
    header, rows = table_rows(summaries)
    table = Table(title=f"replay on {recorded.name}: {len(recorded.times)} recorded configurations, best "
                        f"{format_seconds(recorded.best_s) if args.run else f'{recorded.best_s:.4g}'}")
    for column in header:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    return 0


def cmd_db(args, console: Console) -> int:
    database = _database(args, must_exist=args.db_command == "current")
    if database.cannot_write():
        if args.db_command == "upgrade":
            raise BadInput(f"database {database.description} cannot be written here (a read-only file or folder)")
        database.read_only = True
    try:
        if args.db_command == "current":
            revision = None if database.is_empty_file() else database.current_revision()  # reading writes nothing
            console.print(f"{database.description}: schema revision {revision or 'none'} "
                          f"(this evo: {database.head_revision()})", highlight=False)
            return 0
        before, after = database.upgrade()
    except SchemaError as exc:
        raise BadInput(str(exc)) from None
    console.print(f"{database.description}: schema {before or 'empty'} -> {after}", highlight=False)
    return 0
