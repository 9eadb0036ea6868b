"""vit_gemm's Blackwell variant (sm_100a): the same problem, shapes, reference and anchors as
``seeds/vit_gemm``, computed by tcgen05.mma into tensor memory (TMEM).

Knobs as a Blackwell kernel engineer names them (see vit_gemm_sm100.cu): tile N, pipeline stages,
accumulator buffers in TMEM (the MMA warp commits "mainloop done", the epilogue warps arrive
"epilogue done"), epilogue warps, TMEM load prefetch depth, and whether one lane computes the
shared-memory descriptors and broadcasts them to the MMA warp. Every knob value compiles for
sm_100a and passes the ptxas screen on any machine with nvcc; the kernels run only on a GPU of
compute capability 10.0, and an evaluator on any other GPU records them as ``unverified``.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from evo.kernel_genome import Constraint, IntRange, PowerOfTwo, Space
from evo.seeds._blackwell import sm100_recipe, warp_role_knobs
from evo.seeds._family import BLOCK_SHARED_BYTES, BuildRecipe, KernelFamily, ScreenLimits
from evo.seeds.vit_gemm.spec import VitGemm

HERE = Path(__file__).parent
SOURCE = HERE / "vit_gemm_sm100.cu"
SMEM_LIMIT = BLOCK_SHARED_BYTES


def shared_bytes(g) -> int:
    """Dynamic shared memory of a block; mirrors SHARED_BYTES in vit_gemm_sm100.cu."""
    return g["stages"] * (128 + g["block_n"]) * 64 * 2 + (2 * g["stages"] + 2 * g["acc_buffers"]) * 8 + 16 + 1024


SPACE = Space(
    [
        PowerOfTwo("block_n", 64, 256, description="tile columns = tcgen05.mma N (M is 128)"),
        IntRange("stages", 2, 6, description="TMA pipeline stages of 64-deep K slices"),
        *warp_role_knobs("tile"),
    ],
    [
        Constraint("shared_memory_fits", lambda g: shared_bytes(g) <= SMEM_LIMIT,
                   f"stages * (128 + block_n) * 128 bytes + barriers <= {SMEM_LIMIT}"),
    ],
)

SEED = SPACE.genome(dict(block_n=128, stages=2, acc_buffers=1, epilogue_warps=4, tmem_load_depth=1,
                         desc_broadcast=False))


class VitGemmSm100(VitGemm):
    name = "vit_gemm_sm100"
    description = ("vit_gemm on Blackwell (sm_100a: tcgen05.mma into TMEM, epilogue warps); built and screened "
                   "anywhere, verified only on a compute capability 10.0 GPU")
    space = SPACE
    seed_genomes = (SEED,)
    compute_capability = (10, 0)
    screen_limits = ScreenLimits()  # 255 registers, 227 KiB of shared memory, no spills: as on Hopper

    def build_recipe(self, genome) -> BuildRecipe:
        g = genome.as_dict()
        macros = dict(BLOCK_N=g["block_n"], STAGES=g["stages"], ACC_BUFFERS=g["acc_buffers"],
                      EPILOGUE_WARPS=g["epilogue_warps"], TMEM_LOAD_DEPTH=g["tmem_load_depth"],
                      DESC_BROADCAST=int(g["desc_broadcast"]))
        return sm100_recipe(SOURCE, macros)

    def export_problem(self) -> str | None:  # the Hopper family's runtime launches the Hopper kernel
        return KernelFamily.export_problem(self)

    def takes(self, genome, shape) -> bool:
        return shape["n"] % 8 == 0  # 16-byte rows of C and pos for the TMA

    def load(self, artifact: Path, genome):
        """(kernel, knobs, its tensor maps by buffers, resident blocks: one an SM), after checking that
        the kernel plans the shared memory the spec sizes."""
        from evo.runtime.cuda import CudaModule, multiprocessors

        kernel = CudaModule(artifact).sized_kernel("vit_gemm_sm100", "vit_gemm_sm100_shared_bytes",
                                                   shared_bytes(genome), "vit_gemm_sm100.cu")
        return kernel, genome.as_dict(), {}, multiprocessors()

    def launch(self, kernel, shape, inputs, output) -> None:
        from evo.runtime.cuda import matrix_map, ptr

        function, g, maps, resident = kernel
        a, w, bias, pos = inputs[:4]
        m, n, k = shape["m"], shape["n"], shape["k"]
        key = (a.data_ptr(), w.data_ptr(), m, n, k)
        if key not in maps:
            maps.clear()
            maps[key] = (matrix_map(a, 64, 128, swizzled=True), matrix_map(w, 64, g["block_n"], swizzled=True))
        tiles = -(-m // 128) * -(-n // g["block_n"])
        function.launch((min(tiles, resident),), (32 * (2 + g["epilogue_warps"]),),
                        [*maps[key], ptr(bias), ptr(pos), ptr(output), ctypes.c_int(m), ctypes.c_int(n),
                         ctypes.c_int(k), ctypes.c_int(shape["p"])],
                        shared_bytes=shared_bytes(g))


FAMILY = VitGemmSm100()
