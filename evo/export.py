"""`evo export`: one stored individual as a standalone, reproducible kernel package.

The package needs torch (and, for CUDA kernels, cuda.bindings), never evo:
    kernel.<cu|cpp>   the family's source with the genome's knobs baked in as #defines, and a
                      header giving the genome, family, verified shapes and measured times
    kernel.<cubin|so> the artifact built from it (build.sh rebuilds it with the same flags)
    <name>.py         the kernel as a Python function on torch tensors, registered as a torch
                      custom op (torch.library) so that it works inside torch.compile
    metadata.json     genome, family, run, GPU, compiler and torch versions, errors, timings,
                      anchor timings, date
    selfcheck.py      re-verifies against the reference on every shape and re-times against the anchor
                      (and the family's other anchors, where the module names them)
    evo_flush.py      the cache flush evo's --cold-cache timing uses (fitness/_flush.py), for selfcheck.py
The family supplies the module (its ``export_template``, with the ``export_files`` it imports, copied
beside it); this file fills it in.
"""

from __future__ import annotations

import json
import shlex
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from db import Store
from fitness import BuildConfig, Builder, Status, _flush, format_seconds
from fitness.build import ARTIFACT_SUFFIX, compiler_version, default_cache_dir

SELFCHECK = Path(__file__).with_name("_selfcheck.py")
FLUSH = Path(_flush.__file__)  # shipped as evo_flush.py: the self-check flushes as the evaluator does


@dataclass(frozen=True)
class ExportResult:
    individual_id: int
    genome_id: str
    module_name: str
    files: tuple[Path, ...]


def _baked_source(recipe, header: str) -> tuple[str, list[str]]:
    """The source with every -D macro written out as a #define; the remaining flags."""
    defines, flags = [], []
    for flag in recipe.flags:
        if flag.startswith("-D"):
            name, _, value = flag[2:].partition("=")
            defines.append(f"#define {name} {value or 1}")
        else:
            flags.append(flag)
    return header + "\n".join(defines) + "\n\n" + recipe.source, flags


def export_individual(store: Store, run_id: int, individual_id: int | None, out: Path) -> ExportResult:
    """Write the package for ``individual_id`` (default: the run's best verified kernel) into ``out``.

    Raises ValueError for a run or individual that does not exist, one that never passed
    verification, a family without an export template, or an ``out`` that is a non-empty directory.
    """
    import torch

    from seeds import get_family

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
    if family.export_template is None:
        raise ValueError(f"family {family.name} has no export template")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {out} exists and is not an empty directory")
    genome = family.space.genome(individual.genome)
    recipe = family.build_recipe(genome)
    build = Builder(BuildConfig(default_cache_dir())).build(genome.id, recipe)
    if build.status is not Status.OK:
        raise ValueError(f"individual {individual.id} no longer builds here: {build.message}")

    module_name = f"{family.name}_{genome.id}"
    source_name = "kernel" + Path(recipe.source_name).suffix
    artifact_name = "kernel" + ARTIFACT_SUFFIX[recipe.output]
    verified = ", ".join(s.label() for s in family.shapes)
    timings = {t["shape"]: t["median_s"] for t in evaluation.timings}
    anchors = {t["shape"]: t["median_s"] for t in evaluation.anchor}
    header = (f"// evo export: family {family.name}, run {run.id}, individual {individual.id}, genome {genome.id}\n"
              f"// genome: {json.dumps(genome.as_dict(), sort_keys=True)}\n"
              f"// verified on every shape of the family: {verified}\n"
              + "".join(f"// {shape}: {format_seconds(seconds)} (anchor {format_seconds(anchors.get(shape))})\n"
                        for shape, seconds in timings.items())
              + f"// measured on: {(run.hardware or {}).get('device', 'unknown')}\n\n")
    source, flags = _baked_source(recipe, header)
    out.mkdir(parents=True, exist_ok=True)
    files = []

    def write(name: str, text: str | bytes) -> None:
        path = out / name
        path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
        files.append(path)

    write(source_name, source)
    write(artifact_name, build.artifact)
    command = [recipe.compiler, *flags, "-o", artifact_name, source_name]  # nvcc / c++ from PATH
    if recipe.output == "cubin":
        command.insert(1, "-cubin")
    write("build.sh", "#!/bin/sh\n# rebuilds the artifact from the baked source, as evo built it\ncd \"$(dirname \"$0\")\"\n"
          + shlex.join(command) + "\n")
    (out / "build.sh").chmod(0o755)
    template = family.export_template.read_text()
    write(f"{module_name}.py", template.replace("__GENOME_JSON__", json.dumps(genome.as_dict(), sort_keys=True))
          .replace("__GENOME_ID__", genome.id).replace("__ARTIFACT__", artifact_name))
    metadata = dict(
        family=family.name, description=family.description, run=run.id, individual=individual.id,
        genome_id=genome.id, genome=genome.as_dict(), module=module_name, source=source_name, artifact=artifact_name,
        build_command=command, compiler=compiler_version(recipe.compiler) or "unknown", torch=torch.__version__,
        hardware=run.hardware, shapes=[dict(s.dims, name=s.name, mission=s.mission) for s in family.shapes],
        tolerance=dict(max_abs=family.tolerance.max_abs, max_rel_l2=family.tolerance.max_rel_l2,
                       rtol=family.tolerance.rtol),
        anchor_name=family.anchor_name, errors=evaluation.checks, timings=evaluation.timings,
        anchor_timings=evaluation.anchor, cold_cache=run.cold_cache,
        exported_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    for name, path in family.export_files:
        write(name, path.read_text())
    write("metadata.json", json.dumps(metadata, indent=1, default=str))
    write("evo_flush.py", FLUSH.read_text())
    shutil.copyfile(SELFCHECK, out / "selfcheck.py")
    files.append(out / "selfcheck.py")
    return ExportResult(individual.id, genome.id, module_name, tuple(files))
