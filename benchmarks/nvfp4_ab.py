"""nvfp4_gemm genomes side by side, timed in turns with both anchors in one process (GPU).

    python benchmarks/nvfp4_ab.py 'base=CLUSTER' 'tma=CLUSTER{"loads": "tma"}' --rounds 5

A variant is LABEL=POINT[CHANGES]: POINT names a design point of tests/test_nvfp4_gemm.py, CHANGES
(optional) is a JSON object of knob values that replace its own. Each variant is built, screened,
verified and timed on every shape as in a search (fresh inputs, output poisoned, float64 reference);
then, for --rounds rounds, every shape is timed once per variant, with bf16 cuBLAS on operands
dequantised beforehand (and, in the first two rounds, torch dequantise + matmul) timed the same way
between them. Prints the medians over the rounds as a Markdown table, then each variant's ratio to
bf16 cuBLAS. Differences under about 2 % between processes are noise on the H100. With --workload
(a built-in workload's name or a TOML file) the rounds time that workload's shapes instead, and a third
table gives each variant's bytes a second against the GPU's read bandwidth (evo.runtime.bandwidth).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import evo.seeds.nvfp4_gemm.designs as design  # noqa: E402
from _reporting import evaluated  # noqa: E402
from evo.fitness import BuildConfig, Builder, EvalConfig, Evaluator  # noqa: E402
from evo.runtime.bandwidth import measured  # noqa: E402
from evo.seeds import get_family, resolve_workload  # noqa: E402


def parse_variant(text: str, family):
    """(label, genome) of LABEL=POINT[CHANGES]; ValueError naming what is wrong."""
    label, sep, rest = text.partition("=")
    if not sep or not label:
        raise ValueError(f"{text!r}: expected LABEL=POINT[JSON changes]")
    point, brace, changes = rest.partition("{")
    if not point.isidentifier() or not hasattr(design, point):
        raise ValueError(f"{text!r}: {point!r} is not a design point of tests/test_nvfp4_gemm.py")
    try:
        knobs = json.loads(brace + changes) if brace else {}
    except json.JSONDecodeError as error:
        raise ValueError(f"{text!r}: the changes are not JSON: {error}") from None
    if not isinstance(knobs, dict):
        raise ValueError(f"{text!r}: the changes are not a JSON object")
    return label, family.space.check(family.space.genome({**getattr(design, point).as_dict(), **knobs}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", nargs="+", help="LABEL=POINT[JSON changes]")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of timing in turns (default 5)")
    parser.add_argument("--cold-cache", action="store_true",
                        help="time every run after flushing the L2 cache by reads (operands from HBM)")
    parser.add_argument("--workload", help="time this workload's shapes (a built-in name or a TOML file)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    family = get_family("nvfp4_gemm")
    try:
        variants = dict(parse_variant(text, family) for text in args.variant)
        shapes = resolve_workload(family, args.workload).shapes if args.workload else family.shapes
    except ValueError as error:
        parser.error(str(error))

    work = Path(tempfile.mkdtemp())
    builder = Builder(BuildConfig(work / "cache"))
    evaluator = Evaluator(family, EvalConfig(trials=1, cold_cache=args.cold_cache), work / "loaded")
    kernels = {}
    for label, genome in variants.items():
        done = evaluated(family, genome, builder, evaluator)
        if done is not None:
            print(f"{label}: {genome} correct on every shape, {done[1].usage}")
            kernels[label] = evaluator.load(genome, done[0])
    (_, bf16), = family.secondary_anchors().items()
    times: dict[tuple[str, str], list[float]] = {}
    for round_ in range(args.rounds):
        for shape in shapes:
            if round_ < 2:
                times.setdefault(("torch", shape.name), []).append(evaluator.time_anchor(family.anchor, shape).median_s)
            times.setdefault(("bf16", shape.name), []).append(evaluator.time_anchor(bf16, shape).median_s)
            for label, kernel in kernels.items():
                times.setdefault((label, shape.name), []).append(evaluator.time_shape(kernel, shape).median_s)
    labels = ["torch", "bf16", *kernels]
    median = {key: statistics.median(samples) for key, samples in times.items()}
    print("| shape | torch dequantise + matmul | bf16 cuBLAS | " + " | ".join(kernels) + " |")
    print("|---" * (len(labels) + 1) + "|")
    for shape in shapes:
        print(f"| {shape.name} | " + " | ".join(f"{median[(label, shape.name)] * 1e6:.1f} us" for label in labels) + " |")
    print("time over bf16 cuBLAS's:")
    for shape in shapes:
        anchor = median[("bf16", shape.name)]
        print(f"  {shape.name:20s} " + "  ".join(f"{label} {median[(label, shape.name)] / anchor:.3f}"
                                                for label in kernels))
    if args.workload:
        read, method = measured()
        print(f"share of read bandwidth ({read / 1e12:.2f} TB/s, {method}): each one's bytes (bf16 reads its "
              "operands at 2 bytes a value) over its time")
        for shape in shapes:
            l, m, n, k = shape["l"], shape["m"], shape["n"], shape["k"]
            moved = {"bf16": l * (2 * (m + n) * k + 2 * m * n), **{label: family.bytes_moved(shape) for label in kernels}}
            print(f"  {shape.name:20s} " + "  ".join(f"{label} {moved[label] / median[(label, shape.name)] / read:.0%}"
                                                    for label in moved))


if __name__ == "__main__":
    main()
