"""A family's workload on the GPU: PyTorch's computation verified at every shape, and named genomes
evaluated as a workload search evaluates them (every family shape verified, every workload shape timed,
cut short at 4x the anchor, and verified where timed in full), all in one evaluator process.

    python benchmarks/workload_check.py --family vit_gemm --workload encoders \\
        --genomes tests.test_vit_gemm:PINGPONG,FOLDED,CLUSTERED

Prints one row a shape: the anchor (the family's fallback), each genome's time over it ("cut" where the
first sample was above the cutoff, "wrong" where it failed verification), and the best. With ``--against
NAME`` (one of the family's other anchors, e.g. nvfp4_gemm's "bf16 cuBLAS matmul on operands dequantised
beforehand"), a second table gives each genome's time over that one, timed in the same process.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evo.fitness import BuildConfig, Builder, EvalConfig, Evaluator, Status, screen  # noqa: E402
from evo.seeds import get_family, resolve_workload  # noqa: E402


def named_genomes(spec: str) -> list:
    """``module:NAME,NAME`` -> those genomes (e.g. tests.test_vit_gemm:PINGPONG,FOLDED)."""
    module, _, names = spec.partition(":")
    loaded = importlib.import_module(module)
    return [(name, getattr(loaded, name)) for name in names.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", required=True)
    parser.add_argument("--workload", required=True, help="a built-in workload's name or a TOML file")
    parser.add_argument("--genomes", action="append", default=[], help="module:NAME,NAME (repeatable)")
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--cache", default="/tmp/evo-workload-check")
    parser.add_argument("--against", help="one of the family's other anchors, timed too: a second table")
    args = parser.parse_args()
    family = get_family(args.family)
    workload = resolve_workload(family, args.workload)
    evaluator = Evaluator(family, EvalConfig(trials=args.trials, workload=workload), Path(args.cache) / "loaded")
    started = time.perf_counter()
    anchors = {t.shape: t.median_s for t in evaluator.anchor_timings()}
    print(f"{family.fallback_label}: verified at all {len(workload.shapes)} shapes of {workload.name} and timed "
          f"({time.perf_counter() - started:.1f} s)", flush=True)
    genomes = [g for spec in args.genomes for g in named_genomes(spec)]
    builder = Builder(BuildConfig(Path(args.cache)))
    results = {}
    for name, genome in genomes:
        started = time.perf_counter()
        recipe = family.build_recipe(genome)
        build = builder.build(genome.id, recipe)
        result = evaluator.evaluate(genome, build, screen(build, recipe.output, family.screen_limits))
        results[name] = result
        print(f"{name} ({genome.id}): {result.status.value} in {time.perf_counter() - started:.1f} s "
              f"{result.message[:300]}", flush=True)
    width = max(len(s.name) for s in workload.shapes)
    wins = print_table(workload, anchors, results, width)
    if args.against:
        other = evaluator.secondary_anchor_timings().get(args.against)
        if other is None:
            print(f"--against: {args.against!r} is not one of {sorted(evaluator.secondary_anchors())}")
            return 2
        print(f"\nagainst {args.against}:")
        print_table(workload, {t.shape: t.median_s for t in other}, results, width)
    print(f"\nthese genomes beat {family.fallback_label} at {wins} of {len(workload.shapes)} shapes")
    return 0


def print_table(workload, anchors: dict, results: dict, width: int) -> int:
    """One row a shape: the anchor's time, each genome's speedup over it, and the best; then the geometric
    mean of the best over the shapes some genome ran correctly. Returns the shapes where the best beats it."""
    print(f"\n{'shape':<{width}} {'anchor':>10} " + " ".join(f"{n[:12]:>12}" for n in results) + "   best")
    wins, logs = 0, []
    for shape in workload.shapes:
        cells, best = [], None
        for name, result in results.items():
            timing = result.timing(shape.name) if result.status is Status.OK else None
            checked = next((c for c in result.checks if c.shape == shape.name), None)
            if timing is None:
                cells.append("-" if result.status is Status.OK else result.status.value[:12])
            elif timing.cut_short:
                cells.append("cut")
            elif checked is None or not checked.passed:
                cells.append("wrong")
            else:
                ratio = anchors[shape.name] / timing.median_s
                cells.append(f"{ratio:.2f}x")
                best = max(best or 0.0, ratio)
        wins += bool(best and best > 1.0)
        if best:
            logs.append(math.log(best))
        print(f"{shape.name:<{width}} {anchors[shape.name] * 1e6:8.1f}us " + " ".join(f"{c:>12}" for c in cells)
              + (f"   {best:.2f}x" if best else "   -"))
    if logs:
        print(f"geometric mean of the best over {len(logs)} shapes: {math.exp(sum(logs) / len(logs)):.3f}x")
    return wins


if __name__ == "__main__":
    sys.exit(main())
