"""The pre-flight: a family's own mistakes found in seconds, before a run is written (`evo search`, `evo check`).

In the driver: the seed genomes meet the constraints and the space holds a genome. In a process of its own
(a seed kernel that crashes takes that process, never evo): at the family's smallest shape the reference runs
and gives the output's shape, the seed genome's build loads, and one launch of it into a poisoned output
returns. Each mistake is one line naming the family's file (``PreflightFailed``, a ValueError). Whether the
seed's result is right is not the pre-flight's business: a wrong kernel is a genome's failure, stored and
told while the search goes on.

    python -m evo._preflight REFERENCE CACHE_DIR     # the child: one JSON line, {"error": ...} or {"ok": ...}
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import traceback
from pathlib import Path

PREFLIGHT_TIMEOUT_S = 120.0  # the child's limit: a seed that hangs is a mistake too


class PreflightFailed(ValueError):
    """A family mistake found before any run is written; one line."""


def where(family) -> str:
    """The family's name and the file that defines it, as messages name it."""
    from evo.seeds import family_file

    file = family_file(family)
    return f"family {family.name} ({file})" if file else f"family {family.name}"


def check_space(family) -> None:
    """Every seed genome meets the constraints, and some genome does."""
    from evo.kernel_genome import NoValidGenome, sample

    for seed in family.seed_genomes:
        broken = family.space.violations(seed)
        if broken:
            raise PreflightFailed(f"{where(family)}: its seed genome {seed.id} breaks a constraint: {broken[0]} "
                                  f"(fix the seed or the constraint)")
    try:
        sample(family.space, random.Random(0))
    except NoValidGenome:
        names = ", ".join(c.message() for c in family.space.constraints) or "-"
        raise PreflightFailed(f"{where(family)}: no genome of its space meets the constraints ({names})") from None


def is_builtin(family) -> bool:
    """One of evo's own families (seeds/): tested with evo, so its launch is not tried again before each run."""
    from evo.seeds import family_names

    return family.reference_key.partition("@")[0] in family_names()


def check_in_a_process_of_its_own(family, cache_dir: Path) -> None:
    """The reference, the seed's load and one launch, in a child process (see the module)."""
    command = [sys.executable, "-m", "evo._preflight", family.reference_key, str(cache_dir)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PREFLIGHT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise PreflightFailed(f"{where(family)}: the pre-flight (the reference and one launch of the seed genome at "
                              f"{family.smallest_shape.name}) did not end within {PREFLIGHT_TIMEOUT_S:g} s") from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        raise PreflightFailed(f"{where(family)}: one launch of its seed genome at {family.smallest_shape.name} crashed the "
                              f"process ({name}): look for an out-of-bounds access in the kernel")
    if not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise PreflightFailed(f"{where(family)}: the pre-flight ended without a word (exit {done.returncode}: {tail})")
    answer = json.loads(lines[-1])
    if answer.get("error"):
        raise PreflightFailed(f"{where(family)}: {answer['error']}")


def _line_in(exc: BaseException, file: str | None) -> str:
    """" (line N)" of the family's file where ``exc`` was raised, or ""."""
    if not file:
        return ""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == file]
    return f" (line {lines[-1]})" if lines else ""


def _said(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _child(reference: str, cache_dir: str) -> str | None:
    """What the pre-flight finds wrong in the family ``reference``, or None."""
    import torch

    from evo.fitness import BuildConfig, Builder, Status
    from evo.seeds import get_family
    from evo.seeds import family_file

    family = get_family(reference)
    file = family_file(family)
    file = str(file) if file else None
    if family.device == "cuda" and not torch.cuda.is_available():
        return None  # nothing of it can run here: the evaluator finds it (evo check builds and screens)
    shape = family.smallest_shape
    generator = torch.Generator(device="cuda" if family.device == "cuda" else "cpu").manual_seed(0)
    try:
        inputs = family.make_inputs(shape, generator)
        expected = family.reference(shape, inputs)
    except Exception as exc:  # noqa: BLE001 - the family's code failing is what is looked for
        return f"its reference raised at {shape.name}: {_said(exc)}{_line_in(exc, file)}"
    try:
        output = family.make_output(shape)
    except Exception as exc:  # noqa: BLE001
        return f"making the output at {shape.name} raised {_said(exc)}{_line_in(exc, file)}"
    if tuple(getattr(expected, "shape", ())) != tuple(getattr(output, "shape", ())):
        return (f"at {shape.name} the output is made {tuple(output.shape)} but the reference gives "
                f"{tuple(expected.shape)}: the output's dimensions or the reference are wrong")
    seed = family.seed_genomes[0]
    build = Builder(BuildConfig(Path(cache_dir))).build(seed.id, family.build_recipe(seed))
    if build.status is not Status.OK:
        return f"its seed genome does not build: {build.message}"
    artifact = Path(cache_dir) / f"preflight-{build.artifact_key}{'.cubin' if family.device == 'cuda' else '.so'}"
    artifact.write_bytes(build.artifact)
    try:
        kernel = family.load(artifact, seed)
    except Exception as exc:  # noqa: BLE001
        return f"its seed genome's build does not load: {_said(exc)}{_line_in(exc, file)}"
    finally:
        artifact.unlink(missing_ok=True)
    if output.is_floating_point():
        output.fill_(float("nan"))
    try:
        family.launch(kernel, shape, inputs, output)
        if family.device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        return f"one launch of its seed genome at {shape.name} raised {_said(exc)}{_line_in(exc, file)}"
    return None


def main(argv: list[str]) -> int:
    reference, cache_dir = argv
    try:
        error = _child(reference, cache_dir)
    except Exception as exc:  # noqa: BLE001 - whatever it is, the parent says it in one line
        error = f"the pre-flight raised {_said(exc)}"
    print(json.dumps({"error": error} if error else {"ok": True}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
