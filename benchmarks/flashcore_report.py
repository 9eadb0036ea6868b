"""FlashCore kernels against cuDNN SDPA and FA2 at the mission shape and at large shapes (GPU).

    python benchmarks/flashcore_report.py --db evo.db --run 3             # the run's best kernel
    python benchmarks/flashcore_report.py --genome '{"block_m": 64, ...}'  # any genome(s)
    python benchmarks/flashcore_report.py --seed --shapes 1,8,512,64 4,16,4096,128

Each genome is built, verified on every shape of the family's set (as in a search) and on
every report shape (against the float32 math reference, output poisoned first), then timed
at each report shape with the evaluator's CUDA-graph timing; cuDNN SDPA (torch's default
backend) and FA2 (SDPA's FLASH_ATTENTION backend) are timed the same way in the same process.
Prints one Markdown table for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _reporting import add_genome_arguments, best_genome, evaluated
from fitness import BuildConfig, Builder, EvalConfig, Evaluator
from fitness.score import format_seconds
from seeds import get_family
from seeds.flashcore.spec import attention_shape

DEFAULT_SHAPES = ("1,8,512,64", "4,16,4096,64", "4,16,4096,128")


def parse_shape(text: str):
    try:
        b, h, s, d = (int(part) for part in text.split(","))
    except ValueError:
        raise SystemExit(f"--shapes: {text!r} is not B,H,S,D") from None
    return attention_shape(f"{b}x{h}x{s}x{d}", b, h, s, d)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_genome_arguments(parser)
    parser.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES), help="B,H,S,D (non-causal)")
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args()

    family = get_family("flashcore")
    genomes = []
    for text in args.genome:
        genome = family.space.genome_from_json(text)
        problems = family.space.violations(genome)
        if problems:
            print(f"skipping {text}: {'; '.join(problems)}", file=sys.stderr)
        else:
            genomes.append(genome)
    if args.seed:
        genomes.insert(0, family.seed_genomes[0])
    if args.run is not None:
        genomes.append(best_genome(args.db or "evo.db", args.run, family))
    if not genomes:
        raise SystemExit("nothing to report: give --run, --genome or --seed")
    shapes = [parse_shape(text) for text in args.shapes]

    work = Path(tempfile.mkdtemp(prefix="flashcore-report-"))
    builder = Builder(BuildConfig(work / "cache"))
    evaluator = Evaluator(family, EvalConfig(trials=2), work / "loaded")
    anchors = {"cuDNN": family.anchor, **{"FA2": run for run in family.secondary_anchors().values()}}
    anchor_times = {(name, s.name): evaluator.time_anchor(run, s).median_s for s in shapes
                    for name, run in anchors.items()}
    rows = []
    for genome in genomes:
        done = evaluated(family, genome, builder, evaluator)
        if done is None:
            continue
        kernel = evaluator.load(genome, done[0])
        for s in shapes:
            check = evaluator.verify_shape(kernel, s)
            if not check.passed:
                print(f"{genome.id} at {s.name}: {check.message}", file=sys.stderr)
                continue
            seconds = evaluator.time_shape(kernel, s).median_s
            flops = family.flops(s)
            row = dict(genome=genome.id, knobs=genome.as_dict(), shape=s.name, max_abs_error=check.max_abs_error,
                       kernel_s=seconds, kernel_tflops=flops / seconds / 1e12)
            for name in anchors:
                row[f"{name}_s"] = anchor_times[(name, s.name)]
                row[f"{name}_tflops"] = flops / anchor_times[(name, s.name)] / 1e12
            rows.append(row)

    print(f"\n{evaluator.describe()}")
    print("| genome | shape | max abs err | kernel | TFLOP/s | cuDNN | TFLOP/s | FA2 | TFLOP/s "
          "| kernel / cuDNN time | kernel / FA2 time |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['genome']} | {r['shape']} | {r['max_abs_error']:.4f} | {format_seconds(r['kernel_s'])} "
              f"| {r['kernel_tflops']:.0f} | {format_seconds(r['cuDNN_s'])} | {r['cuDNN_tflops']:.0f} "
              f"| {format_seconds(r['FA2_s'])} | {r['FA2_tflops']:.0f} | {r['kernel_s'] / r['cuDNN_s']:.2f} "
              f"| {r['kernel_s'] / r['FA2_s']:.2f} |")
    for genome in genomes:
        print(f"{genome.id}: {json.dumps(genome.as_dict(), sort_keys=True)}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
