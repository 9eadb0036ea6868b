"""`evo export`: a stored kernel, or a workload run's dispatching op, as a standalone package.

The package needs torch (and, for CUDA kernels, cuda.bindings), never evo:
    kernel.<cu|cpp>   the family's source with the genome's knobs baked in as #defines, and a header
                      giving the genome, family, verified shapes and measured times (a workload op:
                      kernel_<genome id>.<cu|cpp>, one for each kernel the op runs)
    kernel.<cubin|so> the artifact built from it (build.sh rebuilds every artifact with evo's flags)
    <name>.py         a Python function on torch tensors, backed by a torch custom op (torch.library)
                      so that it works inside torch.compile; each call shape runs the kernel measured
                      fastest there on this GPU, or PyTorch's own computation where none beats it (evo_op.py)
    metadata.json     kernels, dispatch table (shape, choice, kernel time, anchor time), family, run,
                      GPU, compiler and torch versions, errors, timings, anchor timings, date
    selfcheck.py      re-verifies against the reference on every shape and re-times against the anchor
                      (a workload op: every workload shape against PyTorch's computation, failing where
                      the op is slower beyond timing noise)
    evo_runtime/      evo's runtime package (evo/runtime/), copied whole; it imports torch and cuda.bindings only:
                      op.py (the torch custom op, its backward, the kernels loaded once per device, each shape's
                      choice measured at its first call), decisions.py (where those choices are kept, how a call
                      is timed as a caller sees it), dispatch.py (the workload's dispatch table), cuda.py (cubins
                      loaded and launched), flush.py and queued.py (the cache flush and the samples queued
                      behind a spin kernel that evo's timing uses, for selfcheck.py), spec.py (a short spec's
                      runtime), protocol.py (what a family's runtime module defines)
    prepare.py        makes the choices ahead of time for a range of shapes
    evo_family.py     the family's own runtime module (its inputs, reference, anchor, load and launch, and
                      the public function), with the ``export_files`` it imports: the code evo's evaluators
                      ran the kernels with (evo/runtime/protocol.py)
<name>.py is one generic module for every family (evo/_templates/op.py.in): this file fills in the kernel
table, the dispatch table, the op's name and the family's public function.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from evo import runtime
from evo.db import Store
from evo.fitness import BuildConfig, Builder, Status, format_seconds
from evo.fitness.build import ARTIFACT_SUFFIX, compiler_version, default_cache_dir, expand_macros_in_pragmas
from evo.seeds import shape as make_shape

SELFCHECK = Path(__file__).with_name("_selfcheck.py")
OP_TEMPLATE = Path(__file__).with_name("_templates") / "op.py.in"  # one op module for every family
RUNTIME = Path(runtime.__file__).parent  # evo.runtime, shipped whole as evo_runtime/
RUNTIME_NAME = "evo_runtime"


PREPARE = ('"""Decide this op\'s kernels ahead of time for a range of shapes on this machine\'s GPU:\n\n'
           '    python prepare.py s=1:8192 b=1 h=32 h_kv=8 d=128 causal=1 bf16=1\n\n'
           'NAME=VALUE or NAME=LOW:HIGH[:STEP] for every dimension (metadata.json\'s shapes name them); each shape\n'
           'bucket not yet decided is verified and timed once, and kept where evo_runtime/decisions.py says."""\n\n'
           'import sys\nfrom pathlib import Path\n\nHERE = Path(__file__).resolve().parent\nsys.path.insert(0, str(HERE))\n\n'
           'from evo_runtime.decisions import prepare_main  # noqa: E402\n\nif __name__ == "__main__":\n'
           '    sys.exit(prepare_main(sys.argv[1:], HERE))\n')


@dataclass(frozen=True)
class ExportResult:
    module_name: str
    files: tuple[Path, ...]
    individual_id: int | None = None  # a single kernel's export
    genome_id: str | None = None
    table: object | None = None  # a workload run's DispatchReport (evo/dispatch.py)


@dataclass(frozen=True)
class _Kernel:
    genome: object
    individual_id: int
    source_name: str
    artifact_name: str
    header: str


def export_run(store: Store, run_id: int, individual_id: int | None, out: Path) -> ExportResult:
    """A workload run (no ``individual_id``): its dispatching op; otherwise the individual's (default: the
    run's best) kernel. ValueError for a run or individual that does not exist, one that never passed
    verification, a family without a runtime module to export, or an ``out`` that is a non-empty directory."""
    from evo.seeds import get_family, parse_workload

    run = store.get_run(run_id)
    if run is None:
        raise ValueError(f"run {run_id} does not exist")
    family = get_family(run.family)
    workload = (run.config or {}).get("workload")
    if workload and individual_id is None:
        _check_target(family, out)
        return _export_workload(store, run, family, parse_workload(family, workload, f"run {run.id}'s workload"), out)
    return export_individual(store, run_id, individual_id, out)


def _check_target(family, out: Path) -> None:
    problem = family.export_problem()
    if problem:
        raise ValueError(f"family {family.name} cannot be exported: {problem}; see docs/FAMILIES.md")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {out} exists and is not an empty directory")
    if not out.exists() and not out.resolve().parent.is_dir():
        raise ValueError(f"--out {out}: the directory {out.resolve().parent} does not exist")


def export_individual(store: Store, run_id: int, individual_id: int | None, out: Path) -> ExportResult:
    """The package of one kernel, ``individual_id`` (default: the run's best verified kernel)."""
    from evo.seeds import DispatchTable, get_family

    run = store.get_run(run_id)
    if run is None:
        raise ValueError(f"run {run_id} does not exist")
    chosen = store.individual(run_id, individual_id) if individual_id is not None else None
    if individual_id is not None and chosen is None:
        raise ValueError(f"individual {individual_id} is not part of run {run_id}")
    if chosen is None:
        best = store.best(run_id, limit=1)
        if not best:
            raise ValueError(f"run {run_id} has no kernel that passed verification: nothing to export")
        chosen = best[0]
    individual, evaluation = chosen
    if evaluation is None or evaluation.status != Status.OK.value:
        status = evaluation.status if evaluation is not None else "not evaluated"
        raise ValueError(f"individual {individual.id} never passed verification ({status}); "
                         f"only verified kernels are exported")
    family = get_family(run.family)
    _check_target(family, out)
    genome = family.space.genome(individual.genome)
    suffix = Path(family.build_recipe(genome).source_name).suffix
    kernel = _Kernel(genome, individual.id, "kernel" + suffix, "kernel" + ARTIFACT_SUFFIX[_output(family)],
                     _header(family, run, individual.id, genome, evaluation.timings, evaluation.anchor,
                             [c["shape"] for c in evaluation.checks if c.get("passed")]))
    table = DispatchTable([], family.flag_dims + family.categorical_dims, default=genome.id)
    metadata = dict(individual=individual.id, genome_id=genome.id, genome=genome.as_dict(),
                    shapes=[dict(s.dims, name=s.name, mission=s.mission) for s in family.shapes],
                    anchor_name=family.anchor_name, compare_with="anchor", errors=evaluation.checks,
                    timings=evaluation.timings, anchor_timings=evaluation.anchor)
    files = _write_package(family, run, f"{family.name}_{genome.id}", [kernel], table.to_dict(), metadata, out)
    return ExportResult(f"{family.name}_{genome.id}", files, individual.id, genome.id)


def _export_workload(store: Store, run, family, workload, out: Path) -> ExportResult:
    from evo.dispatch import dispatch_table
    from evo.seeds import DispatchTable

    table = dispatch_table(store, run.id, family, workload)
    kernels, ids = [], {}  # ids: a stored genome's id -> its id now (knobs added since default in)
    for genome_id, genome_dict in table.kernels.items():
        genome = family.space.genome(genome_dict)
        ids[genome_id] = genome.id
        rows = [r for r in table.rows if r.genome_id == genome_id]
        suffix = Path(family.build_recipe(genome).source_name).suffix
        timings = [{"shape": r.shape, "median_s": r.kernel_s} for r in rows]
        anchors = [{"shape": r.shape, "median_s": r.anchor_s} for r in rows]
        kernels.append(_Kernel(genome, rows[0].individual_id, f"kernel_{genome.id}{suffix}",
                               f"kernel_{genome.id}{ARTIFACT_SUFFIX[_output(family)]}",
                               _header(family, run, rows[0].individual_id, genome, timings, anchors,
                                       [s.name for s in family.shapes] + [r.shape for r in rows])))
    entries = [{"shape": r.shape, "dims": r.dims, "weight": r.weight, "choice": ids[r.genome_id] if r.chosen else None}
               for r in table.rows]
    dispatch = DispatchTable(entries, family.flag_dims + family.categorical_dims, default=None)
    name = f"{family.name}_{re.sub(r'[^0-9A-Za-z_]', '_', workload.name)}"
    metadata = dict(workload=dict(name=workload.name, description=workload.description),
                    shapes=[dict(s.dims, name=s.name) for s in workload.shapes],
                    anchor_name=family.fallback_label, compare_with="fallback",
                    table=[dict(shape=r.shape, dims=r.dims, weight=r.weight,
                                choice=ids[r.genome_id] if r.chosen else "pytorch", individual=r.individual_id,
                                best_kernel=ids.get(r.genome_id, r.genome_id), kernel_s=r.kernel_s, anchor_s=r.anchor_s,
                                confirmed=r.confirmed) for r in table.rows],
                    geomean_speedup=dict(op=table.op_geomean, kernels=table.kernel_geomean))
    files = _write_package(family, run, name, kernels, dispatch.to_dict(), metadata, out)
    return ExportResult(name, files, table=table)


def _output(family) -> str:
    return "cubin" if family.device == "cuda" else "shared_library"


def _header(family, run, individual_id: int, genome, timings, anchors, verified) -> str:
    anchor_of = {t["shape"]: t["median_s"] for t in anchors}
    return (f"// evo export: family {family.name}, run {run.id}, individual {individual_id}, genome {genome.id}\n"
            f"// genome: {json.dumps(genome.as_dict(), sort_keys=True)}\n"
            f"// verified at: {', '.join(dict.fromkeys(verified))}\n"
            + "".join(f"// {t['shape']}: {format_seconds(t['median_s'])} (anchor "
                      f"{format_seconds(anchor_of.get(t['shape']))})\n" for t in timings)
            + f"// measured on: {(run.hardware or {}).get('device', 'unknown')}\n\n")


def _baked_source(recipe, header: str) -> tuple[str, list[str]]:
    """The source with every -D macro written out as a #define; the remaining flags."""
    defines, flags = [], []
    for flag in recipe.flags:
        if flag.startswith("-D"):
            name, _, value = flag[2:].partition("=")
            defines.append(f"#define {name} {value or 1}")
        else:
            flags.append(flag)
    # the build wrote the macros out in #pragma lines (compilers leave them unexpanded there): so does the package
    return header + "\n".join(defines) + "\n\n" + expand_macros_in_pragmas(recipe.source, recipe.flags), flags


def _write_package(family, run, module_name: str, kernels: list[_Kernel], dispatch: dict, metadata: dict,
                   out: Path) -> tuple[Path, ...]:
    built = []
    for kernel in kernels:  # every build first: nothing is written for a kernel that no longer builds
        recipe = family.build_recipe(kernel.genome)
        build = Builder(BuildConfig(default_cache_dir())).build(kernel.genome.id, recipe)
        if build.status is not Status.OK:
            raise ValueError(f"individual {kernel.individual_id} no longer builds here: {build.message}")
        built.append((kernel, recipe, build))
    created = not out.exists()
    try:
        return _write_files(family, run, module_name, built, kernels, dispatch, metadata, out)
    except OSError as exc:  # a read-only or full file system: nothing half-written is left behind
        with contextlib.suppress(OSError):
            if created:
                shutil.rmtree(out, ignore_errors=True)
            else:
                for path in out.iterdir():
                    shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        raise ValueError(f"cannot write the package to {out}: {exc.strerror or exc}") from None


def _write_files(family, run, module_name: str, built, kernels: list[_Kernel], dispatch: dict, metadata: dict,
                 out: Path) -> tuple[Path, ...]:
    import torch

    out.mkdir(exist_ok=True)
    files: list[Path] = []

    def write(name: str, text: str | bytes) -> None:
        path = out / name
        path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
        files.append(path)

    commands = []
    for kernel, recipe, build in built:
        source, flags = _baked_source(recipe, kernel.header)
        write(kernel.source_name, source)
        write(kernel.artifact_name, build.artifact)
        command = [recipe.compiler, *flags, "-o", kernel.artifact_name, kernel.source_name]  # nvcc / c++ from PATH
        if recipe.output == "cubin":
            command.insert(1, "-cubin")
        commands.append(command)
    write("build.sh", "#!/bin/sh\n# rebuilds the artifacts from the baked sources, as evo built them\n"
          "set -e\ncd \"$(dirname \"$0\")\"\n" + "".join(shlex.join(c) + "\n" for c in commands))
    (out / "build.sh").chmod(0o755)
    kernel_table = {k.genome.id: {"genome": k.genome.as_dict(), "artifact": k.artifact_name} for k, _, _ in built}
    module = _op_module(family, module_name, kernel_table, dispatch, _tolerance(family))
    write(f"{module_name}.py", module)
    write("evo_family.py", family.export_runtime())
    compiler = recipe.compiler if built else ("nvcc" if family.device == "cuda" else "c++")
    metadata = dict(
        family=family.name, description=family.description, run=run.id, module=module_name,
        kernels={k.genome.id: dict(genome=k.genome.as_dict(), individual=k.individual_id, source=k.source_name,
                                   artifact=k.artifact_name) for k in kernels},
        dispatch=dispatch, build_commands=commands, compiler=compiler_version(compiler) or "unknown",
        torch=torch.__version__, hardware=run.hardware,
        tolerance=_tolerance(family),
        cold_cache=run.cold_cache, exported_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), **metadata)
    if family.memory_bound:  # the self-check sets the kernel's bytes a second against this machine's read bandwidth
        metadata["bytes_moved"] = {s["name"]: family.bytes_moved(make_shape(s["name"], **{
            k: v for k, v in s.items() if k not in ("name", "mission")})) for s in metadata["shapes"]}
    for name, path in family.export_files:
        write(name, path.read_text())
    write("metadata.json", json.dumps(metadata, indent=1, default=str))
    (out / RUNTIME_NAME).mkdir(exist_ok=True)
    for path in sorted(RUNTIME.glob("*.py")):
        write(f"{RUNTIME_NAME}/{path.name}", path.read_text())
    write("prepare.py", PREPARE)
    shutil.copyfile(SELFCHECK, out / "selfcheck.py")
    files.append(out / "selfcheck.py")
    write("README.md", package_readme(family, run, module_name, module, metadata, commands))
    return tuple(files)


def _tolerance(family) -> dict:
    return dict(max_abs=family.tolerance.max_abs, max_rel_l2=family.tolerance.max_rel_l2, rtol=family.tolerance.rtol)


def _op_module(family, module_name: str, kernel_table: dict, dispatch: dict, tolerance: dict) -> str:
    """The op's module: the generic template with this package's kernels, dispatch table, name and the
    family's public function and its usage."""
    needs = "torch (and cuda.bindings, NVIDIA's driver-API bindings)" if family.device == "cuda" else "torch"
    title = f"Op {module_name}, exported by evo from a search of family {family.name}."
    return (OP_TEMPLATE.read_text().replace("__TITLE__", title).replace("__USAGE__", family.export_usage())
            .replace("__FALLBACK__", family.fallback_label).replace("__NEEDS__", needs)
            .replace("__PUBLIC__", family.runtime.PUBLIC)
            .replace("__KERNELS_JSON__", repr(json.dumps(kernel_table, sort_keys=True)))
            .replace("__DISPATCH_JSON__", repr(json.dumps(dispatch))).replace("__OP_NAME__", module_name)
            .replace("__TOLERANCE_JSON__", repr(json.dumps(tolerance))))


def package_readme(family, run, module_name: str, module: str, metadata: dict, commands: list) -> str:
    """What the package is, how to call it (the module's own docstring), what it needs, and how it was
    measured (the dispatch table of a workload's op)."""
    usage = module.split('"""')[1].strip() if module.count('"""') >= 2 else ""
    device = (run.hardware or {}).get("device", "unknown")
    workload = metadata.get("workload")
    what = (f"The op of workload `{workload['name']}` ({len(metadata['shapes'])} shapes) of family `{family.name}`, "
            f"from evo run {run.id}: each shape runs its fastest verified kernel ({len(metadata['kernels'])} of "
            f"them ship here), or PyTorch's own computation ({metadata['anchor_name']}) where none is faster."
            if workload else f"Kernel `{metadata['genome_id']}` of family `{family.name}` (evo run {run.id}, "
            f"individual {metadata['individual']}).")
    needs = ["torch (the package imports nothing of evo)"]
    if family.device == "cuda":
        needs.append("cuda.bindings (NVIDIA's driver-API bindings) and a GPU the cubins were built for "
                     "(`build.sh` names the target; sm_90a: an H100 or H200)")
    if any("-march=native" in c for c in commands):
        needs.append(f"a CPU with the instruction set of the machine it was built on ({device}): the library "
                     f"was compiled with `-march=native`; elsewhere run `sh build.sh` first (a C++ compiler with "
                     f"OpenMP)")
    timing = ("each call timed alone after the cache was flushed by reads" if metadata.get("cold_cache")
              else "CUDA-graph replays of back-to-back calls" if family.device == "cuda"
              else "single calls timed with perf_counter")
    lines = [f"# {module_name}", "", what, "", f"{family.description}.", "", "## Calling it", "", usage, "",
             "## What it needs", "", *[f"- {n}" for n in needs], "", "## How it was measured", "",
             f"On {device}, {timing}; the anchor ({metadata['anchor_name']}) timed in the same process. "
             "`python selfcheck.py` re-verifies every shape on fresh inputs and re-times it here "
             "(`--cold-cache` / `--no-cold-cache`); `metadata.json` holds every figure."]
    if workload:
        lines += ["", "| shape | runs | kernel | anchor |", "|---|---|---|---|"]
        lines += [f"| {r['shape']} | {'PyTorch' if r['choice'] == 'pytorch' else '`' + r['choice'] + '`'} | "
                  f"{format_seconds(r['kernel_s'])} | {format_seconds(r['anchor_s'])} |" for r in metadata["table"]]
    return "\n".join(lines) + "\n"
