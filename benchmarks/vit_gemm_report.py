"""vit_gemm kernels against cuBLAS, eager PyTorch and torch.compile, timed in turns (GPU).

    python benchmarks/vit_gemm_report.py --db evo.db --run 1          # the run's best kernel
    python benchmarks/vit_gemm_report.py --genome '{"block_n": 128, ...}' --seed --rounds 7

Each genome is built and evaluated as in a search (every shape verified against the float32
reference, output poisoned first). Then the GPU is kept busy with the first kernel for --heat
seconds, so that its clocks settle where a long run keeps them, and each shape is timed in
--rounds rounds, each round timing every kernel and every anchor once in turn (the evaluator's
CUDA-graph timing, same process): kernel and anchors see the same clocks. A search's evaluator
times its anchor once, when it starts on a cool GPU, and then hundreds of kernels on a warm one;
this script is how a kernel's ratio to the anchors is reported. Prints one Markdown table (median
of the rounds' medians, and the spread of the rounds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from _reporting import add_genome_arguments, best_genome, evaluated
from evo.fitness import BuildConfig, Builder, EvalConfig, Evaluator
from evo.fitness.score import format_seconds
from evo.seeds import get_family


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_genome_arguments(parser)
    parser.add_argument("--rounds", type=int, default=7, help="rounds of timing every kernel and anchor in turn")
    parser.add_argument("--heat", type=float, default=10.0, help="seconds of load before timing")
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args()

    family = get_family("vit_gemm")
    genomes = []
    for text in args.genome:
        try:
            genome = family.space.check(family.space.genome_from_json(text))
        except ValueError as exc:
            raise SystemExit(f"--genome {text}: {exc}") from None
        genomes.append(genome)
    if args.run is not None:
        genomes.insert(0, best_genome(args.db or "evo.db", args.run, family))
    if args.seed:
        genomes.append(family.seed_genomes[0])
    if not genomes:
        raise SystemExit("nothing to report: give --run, --genome or --seed")

    work = Path(tempfile.mkdtemp(prefix="vit-gemm-report-"))
    builder = Builder(BuildConfig(work / "cache"))
    evaluator = Evaluator(family, EvalConfig(trials=3), work / "loaded")
    kernels = {}
    for genome in genomes:
        done = evaluated(family, genome, builder, evaluator)
        if done is None:
            continue
        build, result = done
        worst = max(c.max_abs_error for c in result.checks)
        print(f"{genome.id}: correct on every shape (max abs error {worst:.4f}); "
              f"{json.dumps(genome.as_dict(), sort_keys=True)}")
        kernels[genome.id] = evaluator.load(genome, build)
    if not kernels:
        raise SystemExit("no kernel to time")

    timed = {f"kernel {gid}": (lambda s, k=k: evaluator.time_shape(k, s)) for gid, k in kernels.items()}
    anchors = {"cuBLAS": family.anchor, **family.secondary_anchors()}
    timed.update({name: (lambda s, run=run: evaluator.time_anchor(run, s)) for name, run in anchors.items()})
    mission = family.mission_shape
    first = next(iter(timed.values()))
    started = time.perf_counter()
    while time.perf_counter() - started < args.heat:
        first(mission)

    rows = []
    for shape in family.shapes:
        samples = {name: [] for name in timed}
        for _ in range(args.rounds):
            for name, run in timed.items():
                samples[name].append(run(shape).median_s)
        row = {"shape": shape.name}
        for name, values in samples.items():
            row[name] = {"median_s": statistics.median(values), "min_s": min(values), "max_s": max(values)}
        rows.append(row)

    print(f"\n{evaluator.describe()}; {args.rounds} rounds after {args.heat:g} s of load")
    names = list(timed)
    print("| shape | " + " | ".join(names) + " | " + " | ".join(f"{n} / cuBLAS" for n in names[:len(kernels)]) + " |")
    print("|---" * (1 + len(names) + len(kernels)) + "|")
    for row in rows:
        cells = [f"{format_seconds(row[n]['median_s'])} ({format_seconds(row[n]['min_s'])}-"
                 f"{format_seconds(row[n]['max_s'])})" for n in names]
        ratios = [f"{row[n]['median_s'] / row['cuBLAS']['median_s']:.3f}" for n in names[:len(kernels)]]
        print(f"| {row['shape']} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
