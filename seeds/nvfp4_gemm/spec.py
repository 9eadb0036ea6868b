"""NVFP4 block-scaled GEMM on the H100: c = fp16(sum_k a*sfa * b*sfb) with e2m1 values and e4m3 scales.

Hopper has no FP4 tensor cores: nvfp4_gemm.cu turns the values into fp16 in the main loop (exact:
an e2m1 value times an e4m3 scale fits fp16), in registers or once per block into shared memory,
and multiplies with mma.sync m16n8k16 or wgmma, fp32 accumulation. a is M x K and b is N x K, both K-major, two values a byte; one scale per 16 values
of a row, in the plain row-major layout or the blocked layout of cuBLAS / CUTLASS (a shape's
``blocked`` says which the user holds; the kernel reads either, seeds/nvfp4_gemm/formats.py
converts between them). For few rows of a (tokens), design "skinny" is a second kernel
(nvfp4_skinny.cuh) that streams b's rows, each thread dequantising straight into mma.sync fragments. Host formats and layouts: formats.py. The launch (grid, K split, workspaces,
a's prepass, tensor maps): launch.py; inputs, anchors and the op's public function: runtime.py, both
shipped by `evo export` beside an exported op.
"""

from __future__ import annotations

from pathlib import Path

from evo.kernel_genome import Boolean, Choice, Constraint, IntRange, PowerOfTwo, Space
from evo.seeds._family import BLOCK_SHARED_BYTES, HOPPER_NVCC_FLAGS, BuildRecipe, ProblemShape, RuntimeFamily, TimingPlan, Tolerance
from evo.seeds._wgmma import wgmma_wrapper
from evo.seeds.nvfp4_gemm import runtime as nvfp4_runtime
from evo.seeds.nvfp4_gemm.layers import WORKLOADS, gemm_shape
from evo.seeds.nvfp4_gemm.launch import shared_bytes, skinny_dynamic_bytes, threads

HERE = Path(__file__).parent
HOPPER = HERE.parent / "_hopper.cuh"
SOURCES = (HERE / "nvfp4_bits.cuh", HERE / "nvfp4_gemm_parts.cuh", HERE / "nvfp4_epilogue.cuh",
           HERE / "nvfp4_tma.cuh", HERE / "nvfp4_prepass.cuh", HERE / "nvfp4_gemm.cu", HERE / "nvfp4_skinny.cuh",
           HERE / "nvfp4_skinny_rings.cuh", HERE / "nvfp4_skinny_kernel.cuh")
DESIGNS = ("tiles", "skinny")
DEQUANTS = ("registers", "shared")
MMAS = ("mma_sync", "wgmma", "wgmma_swapped")
A_DEQUANTS = ("in_block", "prepass", "producer")
SPLIT_REDUCES = ("ticket", "cluster", "spread", "cluster_l2")
LOADS = ("cp_async", "tma")
STAGE_SYNCS = ("block_barrier", "mbarriers")
BIT_PLACEMENTS = ("shifts", "bytes")
RING_FILLS = ("cp_async", "tma_boxes")
SMEM_LIMIT = BLOCK_SHARED_BYTES  # one block
SMEM_PER_SM = 228 * 1024  # all the blocks of an SM (each also reserves 1 KiB for the system)
MAX_ACCUMULATORS = 64  # fp32 accumulators a thread keeps (twice: the running ones and the K tile's)


def _warp_tiles_fit(g) -> bool:
    rows, cols = g["block_m"] // g["warps_m"], g["block_n"] // g["warps_n"]
    return rows % 16 == 0 and cols % 8 == 0 and rows * cols // 32 <= MAX_ACCUMULATORS


def _partial_tile_bytes(g) -> int:
    columns = g["block_m"] if g["mma"] == "wgmma_swapped" else g["block_n"]
    return g["block_m"] * g["block_n"] // columns * (columns + 4) * 4


def _registers_hold_accumulators(g) -> bool:
    multiplying = g["warps_m"] * g["warps_n"] * 32  # (a producer warpgroup holds none, but takes registers)
    # warpgroups sharing K tiles each hold the sums of the whole of their columns
    accumulators = g["block_m"] * g["block_n"] * g["warpgroup_k_split"] // multiplying
    return min(255, 65536 // (threads(g) * g["blocks_per_sm"])) >= 2 * accumulators


def _two_in_flight_fit(g) -> bool:
    return g["wgmma_in_flight"] == 1 or (g["mma"] == "wgmma_swapped" and g["a_dequant"] != "in_block"
                                         and not g["promote"] and g["stages"] >= 3)


# the tile kernel's knobs at the seed's values, where a skinny genome holds them (it reads none)
TILES_HELD = dict(block_m=128, block_n=128, block_k=64, warps_m=2, warps_n=4, stages=2, dequant="registers",
                  mma="mma_sync", promote=True, blocks_per_sm=1, split_k=1, a_dequant="in_block", split_reduce="ticket",
                  wgmma_in_flight=1, loads="cp_async", stage_sync="block_barrier", warpgroup_k_split=1)
# the skinny kernel's knobs, where a tile genome holds them
SKINNY_HELD = dict(skinny_warps=8, skinny_tokens=8, skinny_unroll=2, skinny_l2_prefetch=False, skinny_a_prepass=False,
                   skinny_min_blocks=1, skinny_prefetch=False, skinny_split=1, skinny_stages=1, skinny_ring_fill="cp_async",
                   skinny_stage_chunks=1)
# the skinny knobs of b's loads into registers, which a skinny kernel with shared-memory stages reads not
SKINNY_REGISTER_LOADS = ("skinny_unroll", "skinny_prefetch", "skinny_l2_prefetch")
SKINNY_RING_KNOBS = ("skinny_ring_fill", "skinny_stage_chunks")  # read with shared-memory stages alone
SKINNY_STAGE_BYTES = 2 * 32 * 16 + 16 * 8  # a warp's stage: two 512-byte slabs of runs and 16 rows' 8 scales
STATIC_SHARED_LIMIT = 48 * 1024  # the skinny kernel's shared memory is static
SKINNY_REGISTER_BUDGET = 255  # registers a skinny thread may hold (__launch_bounds__ leaves it up to 65536 / threads)
SKINNY_FIXED_REGISTERS = 20  # what a skinny thread holds beside its runs in flight (accumulators, addresses); ptxas
# reuses a run's registers once multiplied, so the estimate is rough: the screen refuses what spills


def _skinny_runs_fit(g) -> bool:
    """The registers of a skinny thread's runs in flight fit what its block leaves it: skinny_unroll x (two of
    b's runs, 5 registers each, and a token run a fragment: 5 registers packed, 16 as the prepass's fp16
    pairs); with skinny_prefetch two batches of b's runs and one chunk's token runs; with shared-memory stages
    one chunk's."""
    token_registers = g["skinny_tokens"] // 8 * (16 if g["skinny_a_prepass"] else 5)
    if g["skinny_stages"] > 1:  # one chunk's runs, from shared memory
        runs = 10 + token_registers
    elif g["skinny_prefetch"]:  # two batches of b's runs; a chunk's token runs at a time
        runs = 2 * g["skinny_unroll"] * 10 + token_registers
    else:
        runs = g["skinny_unroll"] * (10 + token_registers)
    return runs + SKINNY_FIXED_REGISTERS <= min(SKINNY_REGISTER_BUDGET,
                                                65536 // (32 * g["skinny_warps"] * g["skinny_min_blocks"]))


def _inactive(values) -> dict:
    """A genome's kernel reads its design's knobs alone (and bit_placement, which both read); a skinny
    kernel with shared-memory stages reads none of the register loads' knobs."""
    if values["design"] != "skinny":
        return SKINNY_HELD
    if values["skinny_stages"] == 1:
        return {**TILES_HELD, **{name: SKINNY_HELD[name] for name in SKINNY_RING_KNOBS}}
    held = {**TILES_HELD, **{name: SKINNY_HELD[name] for name in SKINNY_REGISTER_LOADS}}
    if values["skinny_ring_fill"] == "cp_async":  # one chunk a stage
        return {**held, "skinny_stage_chunks": SKINNY_HELD["skinny_stage_chunks"]}
    return held


def _skinny_shared_bytes(g) -> int:
    """Static shared memory of a skinny block: the warps' partial sums and (skinny_stages > 1 by cp.async) their
    rings."""
    sums = g["skinny_warps"] * g["skinny_tokens"] // 8 * 32 * 16
    staged = g["skinny_stages"] > 1 and g["skinny_ring_fill"] == "cp_async"
    return sums + (g["skinny_warps"] * g["skinny_stages"] * SKINNY_STAGE_BYTES if staged else 0)


SPACE = Space(
    [
        Choice("design", DESIGNS,
               description="the kernel: output tiles of block_m x block_n on the tensor cores, their K loop "
                           "pipelined (the knobs below) | skinny, for few rows of a (tokens): a block streams 16 "
                           "of b's rows, its skinny_warps warps each on a range of K, every thread dequantising "
                           "its own 16-byte runs of b and a straight into mma.sync fragments, the warps' sums "
                           "added in shared memory (nvfp4_skinny.cuh); reads no tile knob"),
        PowerOfTwo("skinny_warps", 2, 16, description="skinny: warps of a block, each on a range of K"),
        IntRange("skinny_min_blocks", 1, 4, description="skinny: blocks an SM must hold at once, the register cap "
                                                           "of __launch_bounds__ (more warps resident to keep "
                                                           "loads in flight, fewer registers each)"),
        PowerOfTwo("skinny_tokens", 8, 16, description="skinny: rows of a (tokens) a block takes; more, more blocks"),
        PowerOfTwo("skinny_unroll", 1, 4, description="skinny: chunks of 128 values of K whose loads a warp issues "
                                                      "before it multiplies the first"),
        Boolean("skinny_l2_prefetch", description="skinny: b's loads ask L2 to fetch 256 bytes of the row (the next "
                                                  "chunks' runs), bypassing L1 (ld.global.nc.L1::no_allocate.L2::256B)"),
        PowerOfTwo("skinny_stages", 1, 8, description="skinny: 1, b's runs loaded into registers (skinny_unroll, "
                                                      "skinny_prefetch, skinny_l2_prefetch); more, through a ring of "
                                                      "that many shared-memory stages of each warp's own by cp.async, "
                                                      "one chunk a stage (stages - 1 chunks in flight)"),
        Choice("skinny_ring_fill", RING_FILLS,
               description="skinny with skinny_stages > 1, how b's rows come into a warp's ring: every lane's 16-byte "
                           "cp.async copies, one chunk a stage | the TMA, one box of the 16 rows a stage (and with "
                           "skinny_a_prepass a second of a's fp16 rows), counted on the stage's mbarrier: the bytes "
                           "in flight cost neither registers nor a copy a lane, and every stage is in flight while "
                           "the warp waits for the oldest"),
        PowerOfTwo("skinny_stage_chunks", 1, 4, description="skinny rings filled by TMA boxes: chunks of 128 values "
                                                            "of K a stage holds (64 bytes of each of b's rows, 256 of "
                                                            "each of a's fp16 rows)"),
        PowerOfTwo("skinny_split", 1, 8, description="skinny: the most blocks sharing a tile of 16 of b's rows, "
                                                     "each on a range of K (the launch takes the count, up to this, "
                                                     "whose grid best fills its last wave); the last to finish adds "
                                                     "the others' sums from a global workspace"),
        Boolean("skinny_prefetch", description="skinny: b's runs of the next skinny_unroll chunks are loaded before "
                                               "this batch is multiplied (two batches of registers, so loads stay "
                                               "in flight while the warp multiplies), a's runs chunk by chunk"),
        Boolean("skinny_a_prepass", description="skinny: a's rows dequantised once by a first kernel into fp16 "
                                                "pairs that every warp loads as they are (64 bytes a run), instead "
                                                "of each warp of each block dequantising them again; the skinny "
                                                "kernel is the first one's programmatic dependent"),
        PowerOfTwo("block_m", 64, 128, description="rows of a block's output tile"),
        PowerOfTwo("block_n", 64, 256, description="columns of a block's output tile"),
        PowerOfTwo("block_k", 64, 128, description="K elements of a pipeline stage"),
        PowerOfTwo("warps_m", 1, 4, description="warps along M"),
        PowerOfTwo("warps_n", 1, 4, description="warps along N"),
        IntRange("stages", 2, 6, description="cp.async pipeline stages (values and scales of a K tile)"),
        Choice("dequant", DEQUANTS, description="where e2m1 x scale becomes fp16: in registers, each warp for its own "
                                                "fragments | once per block into shared-memory tiles (the next K "
                                                "tile's while the tensor cores multiply this one)"),
        Choice("mma", MMAS, description="tensor-core instruction: mma.sync m16n8k16 (fragments in registers) | "
                                        "wgmma m64nNk16 from shared memory (a warpgroup of 4 warps along M) | "
                                        "swapped wgmma: b's rows are wgmma's M, dequantised in registers as its A "
                                        "operand, a's rows its N from an fp16 tile in shared memory (a warpgroup "
                                        "owns 64 columns of c)"),
        Choice("a_dequant", A_DEQUANTS,
               description="swapped wgmma, where a's rows become fp16: in every block, into shared memory, each K "
                           "tile | once, by a first kernel, into an fp16 copy of a that every block streams in | "
                           "in every block by one more warpgroup (a producer) that reads a's packed rows and writes "
                           "each K tile's fp16 tile into the TMA stage while the other warpgroups multiply (no first "
                           "kernel; loads == tma, stage_sync == mbarriers)"),
        Boolean("promote", description="each K tile's products go to fresh accumulators added in fp32 to the "
                                       "running sums (the tensor core truncates as it accumulates)"),
        PowerOfTwo("blocks_per_sm", 1, 2, description="blocks an SM holds at once (the register cap of "
                                                       "__launch_bounds__); a block's barriers and waits overlap "
                                                       "the other's work"),
        PowerOfTwo("split_k", 1, 8, description="the most blocks sharing an output tile, each on a range of K (the "
                                                "launch takes the most that still fit one wave on the GPU); the "
                                                "last to finish adds the others' partial tiles (global workspace)"),
        IntRange("wgmma_in_flight", 1, 2,
                 description="swapped wgmma on a's fp16 copy: K tiles whose wgmmas may run at once (2: tile kt's are "
                             "issued before the warps wait for tile kt - 1's, so the tensor cores never drain between "
                             "tiles; each warp keeps two sets of A fragments pinned)"),
        Choice("loads", LOADS,
               description="swapped wgmma on a's fp16 copy, how a stage comes in: every thread's cp.async copies "
                           "(16 bytes each, b's rows padded) | TMA boxes of a's fp16 tile and b's packed rows "
                           "requested by one thread and counted on an mbarrier (b's scales still by cp.async), each "
                           "thread's K values a contiguous run of a row"),
        Choice("stage_sync", STAGE_SYNCS,
               description="TMA stages with two tiles' wgmmas in flight, how a stage passes between copies and "
                           "readers: a block barrier every K tile | mbarriers alone (full: boxes and every thread's "
                           "scale copies landed; empty: every thread done), so the warpgroups need not keep in step"),
        Choice("bit_placement", BIT_PLACEMENTS,
               description="how an e2m1 code's bits become an fp16's: two shifts and masks per pair of values (15 "
                           "integer operations a word) | the high bytes of four values at once, then prmt over "
                           "zero bytes (11)"),
        IntRange("warpgroup_k_split", 1, 2,
                 description="swapped wgmma: warpgroups that share each K tile (2: a pair owns the same 64 columns "
                             "of c, each dequantises and multiplies half of the tile's k16 steps, and the second's "
                             "sums are added to the first's after the K loop: half the dequantisation a warp per "
                             "tile; eight warps on 64 columns, or sixteen on 128)"),
        Choice("split_reduce", SPLIT_REDUCES,
               description="how a split tile's partial results are added: the last block to take the tile's ticket "
                           "reads the others' from a global workspace | the tile's blocks are one thread-block "
                           "cluster, each sums a slice of the rows over every block's shared memory | every block "
                           "leaves its partial tile in the workspace, waits for the tile's others (the grid runs in "
                           "one wave) and sums a slice of the rows | (swapped wgmma) the tile's blocks are one "
                           "cluster, each warp's 16 rows summed by one block: the warps of the others leave their "
                           "partial sums in the global workspace (L2), one cluster barrier, and the summing warps "
                           "add them to their own and store (distributed shared memory is slower than L2)"),
    ],
    [
        Constraint("warp_tiles_fit", _warp_tiles_fit,
                   f"a warp owns whole 16 x 8 mma tiles, at most {MAX_ACCUMULATORS} fp32 accumulators a thread "
                   "(kept twice: running, and the K tile's): "
                   "(block_m / warps_m) % 16 == 0, (block_n / warps_n) % 8 == 0"),
        Constraint("wgmma_reads_shared_memory", lambda g: g["mma"] != "wgmma" or g["dequant"] == "shared",
                   "wgmma takes its operands from shared memory: mma == wgmma needs dequant == shared"),
        Constraint("wgmma_warpgroup_along_m", lambda g: g["mma"] != "wgmma" or g["warps_m"] == 4,
                   "a wgmma warpgroup is 4 warps stacked along M: mma == wgmma needs warps_m == 4"),
        Constraint("swapped_wgmma_dequantises_b_in_registers",
                   lambda g: g["mma"] != "wgmma_swapped" or g["dequant"] == "registers",
                   "swapped wgmma takes b's fragments from registers: mma == wgmma_swapped needs dequant == "
                   "registers (a's rows still become an fp16 tile in shared memory, wgmma's B operand)"),
        Constraint("swapped_wgmma_warpgroups_own_64_columns",
                   lambda g: g["mma"] != "wgmma_swapped" or (
                       g["warps_m"] == 4 and g["block_n"] * g["warpgroup_k_split"] == 64 * g["warps_n"]),
                   "swapped wgmma: warps_n warpgroups of 4 warps, each 64 columns of c (wgmma's M), "
                   "warpgroup_k_split of them to the same columns: warps_m == 4 and "
                   "block_n * warpgroup_k_split == 64 * warps_n"),
        Constraint("warpgroups_sharing_k_tiles_read_tma_runs",
                   lambda g: g["warpgroup_k_split"] == 1 or (
                       g["mma"] == "wgmma_swapped" and g["loads"] == "tma" and g["warps_n"] % 2 == 0),
                   "warpgroup_k_split == 2 needs mma == wgmma_swapped, loads == tma and warps_n even (pairs of "
                   "warpgroups, each pair on 64 columns of the tile)"),
        Constraint("l2_exchange_sums_swapped_warp_rows",
                   lambda g: g["split_reduce"] != "cluster_l2" or g["mma"] == "wgmma_swapped",
                   "split_reduce == cluster_l2 hands a warp's 16 rows of the swapped tile between blocks: mma == "
                   "wgmma_swapped"),
        Constraint("prepass_feeds_swapped_wgmma",
                   lambda g: g["a_dequant"] == "in_block" or g["mma"] == "wgmma_swapped",
                   "a's fp16 tile from a's copy or a producer (a_dequant == prepass or producer) is read by the "
                   "swapped wgmma alone: mma == wgmma_swapped"),
        Constraint("producer_fills_mbarrier_stages",
                   lambda g: g["a_dequant"] != "producer" or (g["loads"] == "tma" and g["stage_sync"] == "mbarriers"),
                   "a's producer warpgroup (a_dequant == producer) writes TMA stages handed over by mbarriers: "
                   "loads == tma and stage_sync == mbarriers"),
        Constraint("shared_memory_fits", lambda g: shared_bytes(g) <= SMEM_LIMIT,
                   f"stages x (values and scales of block_m + block_n rows) (+ two fp16 tiles with dequant == "
                   f"shared) <= {SMEM_LIMIT} bytes"),
        Constraint("registers_hold_the_accumulators", _registers_hold_accumulators,
                   "a thread's register share, 65536 / (threads * blocks_per_sm) up to 255 (threads: the warps "
                   "that multiply, and a producer warpgroup's 128), holds twice its fp32 accumulators, block_m * "
                   "block_n * warpgroup_k_split / (warps_m * warps_n * 32) (ptxas refuses wgmma kernels below that)"),
        Constraint("cluster_reduction_fits_the_stages",
                   lambda g: g["split_reduce"] != "cluster" or _partial_tile_bytes(g) <= shared_bytes(g),
                   "split_reduce == cluster keeps a block's fp32 partial tile, rows padded by 16 bytes, in its "
                   "shared memory: block_m * (block_n + 4) * 4 (swapped wgmma: block_n * (block_m + 4) * 4) <= "
                   "shared bytes"),
        Constraint("two_tiles_in_flight_need_the_prepass", _two_in_flight_fit,
                   "wgmma_in_flight == 2 needs mma == wgmma_swapped, a_dequant == prepass or producer (a's tile stays "
                   "in its stage "
                   "until both tiles' wgmmas are done), promote off and stages >= 3"),
        Constraint("tma_loads_need_the_prepass", lambda g: g["loads"] == "cp_async" or g["a_dequant"] != "in_block",
                   "loads == tma puts a's fp16 tile in the stage: a_dequant == prepass or producer (with mma == "
                   "wgmma_swapped)"),
        Constraint("mbarrier_stages_need_tma_and_two_in_flight",
                   lambda g: g["stage_sync"] == "block_barrier" or (g["loads"] == "tma" and g["wgmma_in_flight"] == 2),
                   "stage_sync == mbarriers needs loads == tma and wgmma_in_flight == 2"),
        Constraint("skinny_runs_fit_registers", _skinny_runs_fit,
                   "skinny: the registers of the runs a thread has in flight, skinny_unroll x (10 + T) with T = "
                   "skinny_tokens / 8 x (16 with skinny_a_prepass, else 5), or 2 x skinny_unroll x 10 + T with "
                   "skinny_prefetch, plus "
                   f"{SKINNY_FIXED_REGISTERS}, fit what its block leaves it (65536 / (32 x skinny_warps x "
                   f"skinny_min_blocks), up to "
                   f"{SKINNY_REGISTER_BUDGET})"),
        Constraint("skinny_stages_fit_static_shared_memory",
                   lambda g: g["design"] != "skinny" or _skinny_shared_bytes(g) <= STATIC_SHARED_LIMIT,
                   f"skinny: the warps' partial sums (skinny_warps x skinny_tokens x 64 bytes) and rings (skinny_warps x "
                   f"skinny_stages x {SKINNY_STAGE_BYTES} bytes with skinny_stages > 1) fit {STATIC_SHARED_LIMIT} bytes of "
                   "static shared memory"),
        Constraint("skinny_boxed_rings_fit_shared_memory",
                   lambda g: g["design"] != "skinny" or _skinny_shared_bytes(g) + skinny_dynamic_bytes(g) <= SMEM_LIMIT,
                   "skinny rings filled by TMA boxes: the warps' partial sums and rings, skinny_warps x skinny_stages x "
                   "(skinny_stage_chunks x (16 x 64 bytes of b's rows + 16 x 8 of their scales, + skinny_tokens x "
                   f"256 of a's fp16 rows with skinny_a_prepass) + 8), fit {SMEM_LIMIT} bytes"),
        Constraint("blocks_fit_an_sm", lambda g: g["blocks_per_sm"] * (shared_bytes(g) + 1024) <= SMEM_PER_SM,
                   f"blocks_per_sm * (shared bytes + 1 KiB) <= {SMEM_PER_SM}"),
    ],
    inactive=_inactive,
    # stored genomes from before these knobs were added built the register path with promotion
    added_later=dict(design="tiles", **SKINNY_HELD, dequant="registers", mma="mma_sync", promote=True,
                     blocks_per_sm=1, a_dequant="in_block", split_reduce="ticket", wgmma_in_flight=1, loads="cp_async",
                     stage_sync="block_barrier", bit_placement="shifts", warpgroup_k_split=1),
)

SEED = SPACE.genome(dict(TILES_HELD, design="tiles", bit_placement="shifts", **SKINNY_HELD))


class Nvfp4Gemm(RuntimeFamily):
    default_strategy = "surrogate"  # the strategy its recorded searches were measured with (docs/JOURNAL.md)
    name = "nvfp4_gemm"
    description = "NVFP4 GEMM c = fp16(a*sfa @ (b*sfb)^T), e2m1 values, e4m3 scales per 16, on the H100"
    device = "cuda"
    space = SPACE
    seed_genomes = (SEED,)
    shapes = (
        gemm_shape("m128_n7168_k16384", 1, 128, 7168, 16384, mission=True),
        gemm_shape("m128_n4096_k7168", 1, 128, 4096, 7168, blocked=True),
        gemm_shape("m128_n7168_k2048", 1, 128, 7168, 2048),
        gemm_shape("square4096", 1, 4096, 4096, 4096, blocked=True),
        gemm_shape("batched4", 4, 128, 2048, 4096),
        gemm_shape("ragged", 2, 200, 1000, 2048, blocked=True),
    )
    workloads = WORKLOADS
    flag_dims = ("blocked",)
    # the rtol = atol = 1e-3 on the fp16 output, elementwise
    tolerance = Tolerance(max_abs=1e-3, max_rel_l2=1e-3, rtol=1e-3)
    anchor_name = "torch: dequantise to bf16 + matmul"
    # inputs, reference, anchors, PyTorch's whole computation, load and launch: seeds/nvfp4_gemm/runtime.py,
    # which an export ships with the files it imports
    runtime = nvfp4_runtime
    export_files = (("nvfp4_launch.py", HERE / "launch.py"), ("nvfp4_formats.py", HERE / "formats.py"),
                    ("nvfp4_linear.py", HERE / "linear.py"))
    timing = TimingPlan(warmup=3, min_runs=10, max_runs=100, min_seconds=0.05)

    def build_recipe(self, genome) -> BuildRecipe:
        # from the canonical genome: no knob the design does not read reaches the compiler (a genome drawn as it is,
        # as a covering sample draws them, once built a's prepass for TMA stages from a tile knob it held)
        g = self.space.canonical(genome).as_dict()
        # numbers and switches (0 / 1) under their own names; the choices as their macros
        named = ("design", "dequant", "mma", "a_dequant", "split_reduce", "loads", "stage_sync", "bit_placement",
                 "skinny_ring_fill")
        macros = {**{name.upper(): int(value) if isinstance(value, bool) else value for name, value in g.items()
                     if name not in named},
                  "DESIGN": DESIGNS.index(g["design"]), "DEQUANT": DEQUANTS.index(g["dequant"]),
                  "MMA": MMAS.index(g["mma"]),
                  "A_PREPASS": int(g["a_dequant"] != "in_block"), "A_PRODUCER": int(g["a_dequant"] == "producer"),
                  "SPLIT_CLUSTER": int(g["split_reduce"] == "cluster"),
                  "BIT_PLACEMENT": BIT_PLACEMENTS.index(g["bit_placement"]),
                  "SPLIT_SPREAD": int(g["split_reduce"] == "spread"),
                  "SPLIT_CLUSTER_L2": int(g["split_reduce"] == "cluster_l2"),
                  "TMA_LOADS": int(g["loads"] == "tma"), "STAGE_BARRIERS": int(g["stage_sync"] == "mbarriers"),
                  "SKINNY_TMA_BOXES": int(g["skinny_ring_fill"] == "tma_boxes")}
        flags = HOPPER_NVCC_FLAGS + tuple(
            f"-D{name}={value}" for name, value in sorted(macros.items()))
        wrapper = {"mma_sync": "", "wgmma": wgmma_wrapper("wgmma_f16", g["block_n"] // g["warps_n"], "f16"),
                   "wgmma_swapped": wgmma_wrapper("wgmma_rs", g["block_m"], "f16", a_source="registers")}[g["mma"]]
        source = (f'#line 1 "_hopper.cuh"\n{HOPPER.read_text()}\n{wrapper}'
                  + "".join(f'#line 1 "{path.name}"\n{path.read_text()}\n' for path in SOURCES))
        return BuildRecipe(source, "nvfp4_gemm.cu", "nvcc", flags, "cubin")

    def check_shape(self, shape: ProblemShape) -> None:
        if shape["k"] % 128:
            raise ValueError(f"nvfp4_gemm handles K a multiple of 128, not {shape['k']}")
        if shape["n"] % 2:
            raise ValueError(f"nvfp4_gemm handles an even N, not {shape['n']}")

    fallback_name = "torch: dequantise to fp16 + matmul"  # runtime.py's fallback says why not bf16

    def flops(self, shape: ProblemShape) -> float:
        return 2.0 * shape["l"] * shape["m"] * shape["n"] * shape["k"]

    def bytes_moved(self, shape: ProblemShape) -> float:
        l, m, n, k = shape["l"], shape["m"], shape["n"], shape["k"]
        return l * ((m + n) * (k // 2 + k // 16) + 2 * m * n)


FAMILY = Nvfp4Gemm()
