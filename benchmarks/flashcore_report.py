"""FlashCore kernels against cuDNN SDPA and FA2 at the mission shape and at large shapes (GPU).

    python benchmarks/flashcore_report.py --db evo.db --run 3             # the run's best kernel
    python benchmarks/flashcore_report.py --genome '{"block_m": 64, ...}'  # any genome(s)
    python benchmarks/flashcore_report.py --seed --shapes 1,8,512,64 4,16,4096,128 2,16,2048,128,causal \
        1,32/8,8192,128,causal,bf16      # H/H_kv: grouped K/V heads; causal, bf16: flags

Each genome is built, verified on every shape of the family's set (as in a search) and on
every report shape (against the float32 math reference, output poisoned first), then timed
at each report shape with the evaluator's CUDA-graph timing; torch SDPA (its default backend:
cuDNN on Hopper GPUs) and FA2 (SDPA's FLASH_ATTENTION backend) are timed the same way in the same
process. At a grouped-head shape SDPA runs with enable_gqa (the backend it picks then), and cuDNN
is also timed at the same shape with every query head's own K/V head ("cuDNN MHA": the same
FLOPs, H / H_kv times the K/V bytes), since torch's cuDNN backend does not take grouped heads.
Prints one Markdown table for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _reporting import add_genome_arguments, best_genome, evaluated
from evo.fitness import BuildConfig, Builder, EvalConfig, Evaluator
from evo.fitness.score import format_seconds
from evo.seeds import get_family
from evo.seeds.flashcore.spec import attention_shape

DEFAULT_SHAPES = ("1,8,512,64", "4,16,4096,64", "4,16,4096,128")


def parse_shape(text: str):
    """B,H,S,D or B,H/H_kv,S,D, then optional flags causal and bf16."""
    parts = text.split(",")
    flags = set(parts[4:])
    try:
        heads, _, kv_heads = parts[1].partition("/")
        b, h, s, d = int(parts[0]), int(heads), int(parts[2]), int(parts[3])
        h_kv = int(kv_heads) if kv_heads else h
    except (ValueError, IndexError):
        raise SystemExit(f"--shapes: {text!r} is not B,H[/H_kv],S,D[,causal][,bf16]") from None
    if flags - {"causal", "bf16"}:
        raise SystemExit(f"--shapes: {text!r}: unknown flags {sorted(flags - {'causal', 'bf16'})}")
    return attention_shape(text.replace(",", "x"), b, h, s, d, causal="causal" in flags, h_kv=h_kv,
                           bf16="bf16" in flags)


def _cudnn(dims, inputs):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(*inputs, is_causal=bool(dims["causal"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_genome_arguments(parser)
    parser.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES),
                        help="B,H[/H_kv],S,D[,causal][,bf16]")
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
    for s in shapes:  # cuDNN where torch's cuDNN backend cannot take the shape's grouped heads
        if s["h_kv"] != s["h"]:
            mha = attention_shape(s.name + "-mha", s["b"], s["h"], s["s"], s["d"], causal=bool(s["causal"]),
                                  bf16=bool(s["bf16"]))
            anchor_times[("cuDNN MHA", s.name)] = evaluator.time_anchor(_cudnn, mha).median_s
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
    for s in shapes:
        if ("cuDNN MHA", s.name) in anchor_times:
            seconds = anchor_times[("cuDNN MHA", s.name)]
            print(f"{s.name}: cuDNN MHA (H / H_kv copies of K/V) {format_seconds(seconds)}, "
                  f"{family.flops(s) / seconds / 1e12:.0f} TFLOP/s")
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
