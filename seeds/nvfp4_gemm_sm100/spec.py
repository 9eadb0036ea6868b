"""nvfp4_gemm's Blackwell variant (sm_100a): the same problem, shapes, reference, tolerance and
anchors as ``seeds/nvfp4_gemm``, on the block-scaled tensor cores (tcgen05.mma kind::mxf4nvf4
with the e4m3 scales in tensor memory, see nvfp4_gemm_sm100.cu).

Knobs as a Blackwell kernel engineer names them: tile N (one or two MMAs of N 128), pipeline stages,
accumulator buffers in TMEM ("TMEM full" / "TMEM empty" barriers between the MMA warp and the
epilogue), epilogue warps, TMEM load depth, whether one lane computes the descriptors and TMEM
addresses and broadcasts them, and the K split of the M = 128 shapes. Every knob value compiles for
sm_100a and passes the ptxas screen on any machine with nvcc; the kernels run only on a GPU of
compute capability 10.0, and an evaluator on any other GPU records them as ``unverified``.
The kernel reads the scales in the blocked layout; for a shape whose scales are plain, the launch
converts them first (formats.to_blocked, inside the timed launch).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from evo.kernel_genome import Constraint, IntRange, PowerOfTwo, Space
from evo.seeds._blackwell import sm100_recipe, warp_role_knobs
from evo.seeds._family import BLOCK_SHARED_BYTES, BuildRecipe, KernelFamily, ProblemShape, ScreenLimits
from evo.seeds.nvfp4_gemm.spec import Nvfp4Gemm

HERE = Path(__file__).parent
SOURCE = HERE / "nvfp4_gemm_sm100.cu"
SMEM_LIMIT = BLOCK_SHARED_BYTES
BLOCK_M, BLOCK_K = 128, 256  # a tile's rows (tcgen05.mma M); values of K a stage (128 bytes a row)
SCALE_GROUP = 4 * 512  # a stage's scales of 128 rows: 4 blocked tiles of 128 x 4
TMEM_COLUMNS = 512


def stage_bytes(g) -> int:
    return (BLOCK_M + g["block_n"]) * BLOCK_K // 2 + (1 + g["block_n"] // 128) * SCALE_GROUP


def shared_bytes(g) -> int:
    """Dynamic shared memory of a block; mirrors SHARED_BYTES in nvfp4_gemm_sm100.cu."""
    return g["stages"] * stage_bytes(g) + (2 * g["stages"] + 2 * g["acc_buffers"]) * 8 + 16 + 1024


def tmem_columns(g) -> int:
    """TMEM columns the kernel uses: the accumulator buffers, then 16 scale columns of a and 16 of
    each 128 rows of b per stage; mirrors TMEM_COLUMNS (before rounding to a power of two)."""
    return g["acc_buffers"] * g["block_n"] + g["stages"] * 16 * (1 + g["block_n"] // 128)


def output_tiles(g, s: ProblemShape) -> int:
    return -(-s["n"] // g["block_n"]) * -(-s["m"] // BLOCK_M) * s["l"]


def splits(g, s: ProblemShape, multiprocessors: int) -> int:
    """Units an output tile is split into at shape s: the most (a power of two, at most split_k and
    at most the K stages) whose units still fit one wave of one block an SM."""
    tiles, stages, count = output_tiles(g, s), s["k"] // BLOCK_K, 1
    while count * 2 <= min(g["split_k"], stages) and tiles * count * 2 <= multiprocessors:
        count *= 2
    return count


SPACE = Space(
    [
        PowerOfTwo("block_n", 128, 256, description="tile columns: one tcgen05.mma of N 128 a K step, or two "
                                                    "sharing a's tile"),
        IntRange("stages", 2, 6, description="TMA pipeline stages of 256 values of K (values and scales)"),
        *warp_role_knobs("unit"),
        PowerOfTwo("split_k", 1, 8, description="the most units an output tile is split into along K (the launch takes "
                                                "the most that fit one wave); the last to finish adds the others' "
                                                "partial tiles (global workspace)"),
    ],
    [
        Constraint("shared_memory_fits", lambda g: shared_bytes(g) <= SMEM_LIMIT,
                   f"stages x (128 + block_n) x 128 bytes of values + their scales + barriers <= {SMEM_LIMIT}"),
        Constraint("tensor_memory_fits", lambda g: tmem_columns(g) <= TMEM_COLUMNS,
                   f"acc_buffers x block_n accumulator columns + 16 scale columns of a and of each 128 rows of b a "
                   f"stage <= {TMEM_COLUMNS} TMEM columns"),
    ],
)

SEED = SPACE.genome(dict(block_n=128, stages=2, acc_buffers=1, epilogue_warps=4, tmem_load_depth=1,
                         desc_broadcast=False, split_k=1))


class Nvfp4GemmSm100(Nvfp4Gemm):
    name = "nvfp4_gemm_sm100"
    description = ("nvfp4_gemm on Blackwell (sm_100a: tcgen05.mma kind::mxf4nvf4, scales in TMEM); built and "
                   "screened anywhere, verified only on a compute capability 10.0 GPU")
    space = SPACE
    seed_genomes = (SEED,)
    compute_capability = (10, 0)
    screen_limits = ScreenLimits()

    def export_problem(self) -> str | None:  # the Hopper family's runtime launches the Hopper kernel
        return KernelFamily.export_problem(self)

    def build_recipe(self, genome) -> BuildRecipe:
        g = genome.as_dict()
        return sm100_recipe(SOURCE, dict(
            BLOCK_N=g["block_n"], STAGES=g["stages"], ACC_BUFFERS=g["acc_buffers"],
            EPILOGUE_WARPS=g["epilogue_warps"], TMEM_LOAD_DEPTH=g["tmem_load_depth"],
            DESC_BROADCAST=int(g["desc_broadcast"]), SPLIT_K=g["split_k"]))

    def check_shape(self, shape: ProblemShape) -> None:
        super().check_shape(shape)
        if shape["k"] % BLOCK_K:
            raise ValueError(f"nvfp4_gemm_sm100 handles K a multiple of {BLOCK_K}, not {shape['k']}")

    def load(self, artifact: Path, genome):
        from evo.runtime.cuda import CudaModule

        kernel = CudaModule(artifact).sized_kernel("nvfp4_gemm_sm100", "nvfp4_sm100_shared_bytes", shared_bytes(genome),
                                                   "nvfp4_gemm_sm100.cu")
        return kernel, genome.as_dict(), {}

    def launch(self, kernel, shape: ProblemShape, inputs, output) -> None:
        from evo.runtime.cuda import batched_byte_map, multiprocessors, ptr, ticketed_workspace
        from evo.seeds.nvfp4_gemm import formats

        function, g, cache = kernel
        a, b, sfa, sfb = inputs
        l, m, n, k = shape["l"], shape["m"], shape["n"], shape["k"]
        if not shape["blocked"]:  # the tensor cores read the blocked layout
            sfa, sfb = formats.to_blocked(sfa), formats.to_blocked(sfb)
        split = splits(g, shape, multiprocessors())
        tiles = output_tiles(g, shape)
        records, tickets = ticketed_workspace(cache, shape, tiles * split * BLOCK_M * g["block_n"] if split > 1 else 0,
                                              tiles if split > 1 else 0, a.device)
        key = ("maps", a.data_ptr(), b.data_ptr(), l, m, n, k)
        if key not in cache:  # boxes of 128 bytes (256 values) x the tile's rows, 128-byte swizzle
            cache[key] = (batched_byte_map(a, BLOCK_M), batched_byte_map(b, g["block_n"]))
        function.launch((min(tiles * split, multiprocessors()),), (32 * (2 + g["epilogue_warps"]),),
                        [*cache[key], ptr(sfa), ptr(sfb), ptr(output), ctypes.c_int(m), ctypes.c_int(n),
                         ctypes.c_int(k), ctypes.c_int(l), ctypes.c_int(split), ptr(records), ptr(tickets)],
                        shared_bytes=shared_bytes(g))


FAMILY = Nvfp4GemmSm100()
