"""Where an nvfp4_gemm launch spends its time, block by block (GPU): stamps and wrong-result bounds.

    python benchmarks/nvfp4_timeline.py m128_n7168_k2048 'ks=K_SPLIT{"bit_placement": "bytes"}' \
        'ks@no_wgmma=K_SPLIT{"bit_placement": "bytes"}'

A variant is LABEL[@BOUND+BOUND...]=POINT[CHANGES] (POINT and CHANGES as in nvfp4_ab.py). The genome's
source is built twice: as the family builds it, and with stamps: thread 0 of each warpgroup (the first
two) writes clock64 at the kernel's entry (0), after griddepcontrol.wait (1), when the first K tile's
fragments are loaded (2; mbarrier-stage loop only), after the K loop (3; the same), before the epilogue
(4), after the split sum's cluster barrier (5), at the end (6) and once the stages' mbarriers are
initialised (7). A producer warpgroup (a_dequant producer, warpgroup 1 beside one that multiplies)
stamps when its first tile is written (2) and when it is done (3). Printed: the error against the
float64 reference, prepass + GEMM and the GEMM alone (a's fp16 copy left from before) timed as the
evaluator times, then per stamp the median [min, max] over blocks of the cycles since entry. A BOUND
replaces source text to leave work out (the results are wrong; the times bound what that work costs).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from nvfp4_ab import parse_variant  # noqa: E402
from evo.fitness import BuildConfig, Builder, Status  # noqa: E402
from evo.seeds import get_family  # noqa: E402

STAMPS = r'''
__device__ unsigned long long evo_stamps[4096 * 16];  // [block][warpgroup 0, 1][8]
__device__ __forceinline__ unsigned long long evo_clock() {
    unsigned long long t; asm volatile("mov.u64 %0, %%clock64;" : "=l"(t) :: "memory"); return t; }
#define EVO_BLOCK (((blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x) * 16)
#define STAMP(i) do { if (threadIdx.x % 128 == 0 && threadIdx.x < 256) \
    evo_stamps[EVO_BLOCK + threadIdx.x / 128 * 8 + (i)] = evo_clock(); } while (0)
'''
# (source text, its stamp: placed at the "|", or after the text)
POINTS = (
    ("extern __shared__ __align__(128) unsigned char smem[];", "STAMP(0);"),
    ("    if (STAGE_BARRIERS) __syncthreads();  // the barriers are initialised before any thread arrives on them",
     "STAMP(7);"),
    ('    asm volatile("griddepcontrol.wait;" ::: "memory");\n|#pragma unroll', "STAMP(1);"),
    ("        load_fragments(raw, warp_row, fragments[0], k_half);\n    }", "STAMP(2);"),
    ("tma_k_loop(tma, b_loader, acc, raw, warp_row, k_half, begin, end);", "STAMP(3);"),
    # a's producer warpgroup (warpgroup 1 beside one warpgroup that multiplies): its first tile written, its end
    ("        barrier_arrive(tma.full_in(s));", "if (kt == begin) STAMP(2);"),
    ("                  begin, end);", "STAMP(3);"),
    ("#endif\n    half* out = c + (size_t)batch * M * N;", "STAMP(4);"),
    ("        cluster_sync();  // every block's slices have arrived", "STAMP(5);"),
    ("        cluster_sync();  // every block's partial sums are in the workspace", "STAMP(5);"),
    ("        sum_cluster_slice(partials, split, splits, out, m0, n0, M, N);", "STAMP(6);"),
    ("#endif\n|}\n\n// what the kernel carves out", "STAMP(6);"),
)
BOUNDS = {  # name: (source text, replacement)
    "no_a_boxes": (("for (int atom = 0; atom < BLOCK_K / 64; ++atom)", "for (int atom = 0; atom < 0; ++atom)"),
                   ("barrier_expect_bytes(full_in(s), (A_PRODUCER ? 0 : A_HALVES) + BLOCK_N * ROW_BYTES)",
                    "barrier_expect_bytes(full_in(s), BLOCK_N * ROW_BYTES)")),
    "half_a_boxes": (("for (int atom = 0; atom < BLOCK_K / 64; ++atom)", "for (int atom = 0; atom < 1; ++atom)"),
                     ("barrier_expect_bytes(full_in(s), (A_PRODUCER ? 0 : A_HALVES) + BLOCK_N * ROW_BYTES)",
                      "barrier_expect_bytes(full_in(s), BLOCK_M * 128 + BLOCK_N * ROW_BYTES)")),
    "no_wgmma": (("wgmma_rs(reinterpret_cast<float(&)[NT * 4]>(d[0]), a[j], first + step_offset(j) / 16, "
                  "!(fresh && j == 0));",
                  'asm volatile("" :: "r"(a[j][0]), "r"(a[j][1]), "r"(a[j][2]), "r"(a[j][3]));'),),
    "no_dequant": (("for (int w = 0; w < WORDS; ++w) dequantize8(words[w], factor[w / 2], out[w]);",
                    "for (int w = 0; w < WORDS; ++w) { out[w][0] = words[w]; out[w][1] = words[w] ^ factor[w / 2]; "
                    "out[w][2] = words[w] + 1; out[w][3] = words[w] + 2; }"),),
    # a's producer warpgroup (a_dequant == producer): its arithmetic, its global loads
    "no_producer_dequant": (("dequantize8(p.words[t][i], factor(p, t, w), pairs[t]);",
                             "{ pairs[t][0] = p.words[t][i]; pairs[t][1] = p.scales[0]; pairs[t][2] = p.words[t][i] + w; "
                             "pairs[t][3] = p.words[t][i] ^ t; }"),),
    "no_producer_loads": (("valid ? __ldg(reinterpret_cast<const uint4*>(run)) : make_uint4(0, 0, 0, 0)",
                           "make_uint4(kt, t, row, 7)"),
                          ("valid ? __ldg(reinterpret_cast<const uint32_t*>(scales + kt * scale_step + g * group_step)) "
                           ": 0u", "0x38383838u + kt")),
    "no_producer_fence": (("        fence_proxy_async();\n        barrier_arrive(tma.full_in(s));",
                           "        barrier_arrive(tma.full_in(s));"),),
    "no_fragment_loads": (("run_pairs(values, scales, warp_row + g, k_half * WORDS, top);\n"
                           "    run_pairs(values, scales, warp_row + g + 8, k_half * WORDS, bottom);",
                           "for (int w = 0; w < WORDS; ++w) for (int c = 0; c < 4; ++c) "
                           "top[w][c] = bottom[w][c] = threadIdx.x * 77 + w * 5 + c + (size_t)values;"),),
}


def recipe(family, genome, bounds: list[str], stamped: bool):
    """The family's build recipe for `genome`, its source with the bounds and (if `stamped`) the stamps."""
    plain = family.build_recipe(genome)
    text = plain.source
    for bound in bounds:
        for old, new in BOUNDS[bound]:
            if old not in text:
                raise SystemExit(f"bound {bound}: the source has no {old[:60]!r}")
            text = text.replace(old, new)
    if not stamped:
        return dataclasses.replace(plain, source="#define STAMP(i)\n" + text)
    for place, stamp in POINTS:
        old = place.replace("|", "")
        if old in text:
            text = text.replace(old, place.replace("|", stamp + "\n") if "|" in place else old + "\n" + stamp, 1)
    return dataclasses.replace(plain, source=STAMPS + text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", help="comma-separated shape names of the family")
    parser.add_argument("variant", nargs="+", help="LABEL[@BOUND+...]=POINT[JSON changes]")
    args = parser.parse_args()
    import torch

    from evo.fitness.benchmark import time_runs
    from evo.runtime.cuda import multiprocessors
    from evo.seeds.nvfp4_gemm.launch import grid, splits

    family = get_family("nvfp4_gemm")
    names = {s.name: s for s in family.shapes}
    if unknown := [n for n in args.shapes.split(",") if n not in names]:
        parser.error(f"no shape {unknown[0]!r}; the family's: {', '.join(names)}")
    work = Path(tempfile.mkdtemp())
    builder = Builder(BuildConfig(work / "cache"))
    for text in args.variant:
        head, sep, rest = text.partition("=")
        label, _, bound_text = head.partition("@")
        bounds = [b for b in bound_text.split("+") if b]
        if bad := [b for b in bounds if b not in BOUNDS]:
            parser.error(f"{text!r}: no bound {bad[0]!r}; the bounds: {', '.join(BOUNDS)}")
        try:
            _, genome = parse_variant(f"{label}{sep}{rest}", family)
        except ValueError as error:
            parser.error(str(error))
        for shape in (names[n] for n in args.shapes.split(",")):
            generator = torch.Generator(device="cuda").manual_seed(1)
            inputs, output = family.make_inputs(shape, generator), family.make_output(shape)
            reference = family.reference(shape, inputs)
            for stamped in (False, True):
                build = builder.build(genome.id, recipe(family, genome, bounds, stamped))
                if build.status is not Status.OK:
                    raise SystemExit(f"{text}: {build.status.value}: {build.message}")
                path = work / f"{build.artifact_key}.cubin"
                path.write_bytes(build.artifact)
                kernel = family.load(path, genome)
                output.fill_(float("nan"))
                family.launch(kernel, shape, inputs, output)
                torch.cuda.synchronize()
                error = ((output.double() - reference).abs().max() / reference.abs().max()).item()
                alone = copy.copy(kernel)  # the same launcher without a's prepass: the GEMM alone
                alone.prepass = type("NoPrepass", (), {"launch": lambda *a, **k: None})()
                both_us, alone_us = (time_runs(lambda k=k: family.launch(k, shape, inputs, output), "cuda",
                                               family.timing, shape.name).median_s * 1e6 for k in (kernel, alone))
                print(f"{text} {shape.name} {'stamped' if stamped else 'as built'}: max error / max |ref| {error:.2e}, "
                      f"prepass + GEMM {both_us:.2f} us, GEMM alone {alone_us:.2f} us")
            family.launch(kernel, shape, inputs, output)  # the stamps of one launch
            torch.cuda.synchronize()
            g = kernel.genome
            fit = lambda size: kernel.kept.get(("clusters", size), 1 << 30)  # what the launch asked the driver
            x, y, z = grid(g, shape, splits(g, shape, multiprocessors(), fit))
            ints = kernel.gemm.module.read_ints("evo_stamps", x * y * z * 32)
            values = [(ints[2 * i] & 0xFFFFFFFF) | (ints[2 * i + 1] << 32) for i in range(x * y * z * 16)]
            for group in (0, 1):
                rows = [values[b * 16 + group * 8: b * 16 + group * 8 + 8] for b in range(x * y * z)]
                cells = []
                for point in range(1, 8):
                    since = [r[point] - r[0] for r in rows if r[point] and r[0]]
                    cells.append(f"{point}:{statistics.median(since):.0f}[{min(since)},{max(since)}]" if since
                                 else f"{point}:-")
                print(f"  warpgroup {group}, cycles since entry:", " ".join(cells))


if __name__ == "__main__":
    main()
