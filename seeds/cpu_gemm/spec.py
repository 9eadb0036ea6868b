"""cpu_gemm: an fp32 GEMM in C++, tuned on the CPU; the family that runs the loop anywhere."""

from __future__ import annotations

from pathlib import Path

from evo.kernel_genome import Boolean, Choice, Constraint, PowerOfTwo, Space
from evo.seeds._family import BuildRecipe, ProblemShape, RuntimeFamily, TimingPlan, Tolerance, shape
from evo.seeds.cpu_gemm import runtime as cpu_gemm_runtime
from evo.seeds._workload import workload

SOURCE = Path(__file__).with_name("gemm.cpp")
LOOP_ORDERS = {"ijk": 0, "ikj": 1, "register": 2}
TILE_BYTES_LIMIT = 1 << 20  # A, B and C tiles together stay within 1 MiB (a core's L2)

SPACE = Space(
    [
        PowerOfTwo("block_m", 8, 256, description="rows of C per tile"),
        PowerOfTwo("block_n", 8, 256, description="columns of C per tile"),
        PowerOfTwo("block_k", 8, 256, description="depth of one A/B tile step"),
        Choice("loop_order", tuple(LOOP_ORDERS), description="micro-kernel loop order"),
        Choice("rows_per_step", (1, 2, 4, 8), ordered=True, description="A rows sharing one B load"),
        Choice("vec_width", (1, 4, 8, 16), ordered=True, description="floats per vector along N"),
        Choice("k_unroll", (1, 2, 4, 8), ordered=True, description="unroll of the k loop"),
        Boolean("pack_b", description="copy each B tile to a contiguous buffer"),
        Choice("threads", (1, 2, 4), ordered=True, description="OpenMP threads"),
    ],
    [
        Constraint(
            "tile_fits_l2",
            lambda g: (g["block_m"] * g["block_k"] + g["block_k"] * g["block_n"]
                       + g["block_m"] * g["block_n"]) * 4 <= TILE_BYTES_LIMIT,
            f"(block_m*block_k + block_k*block_n + block_m*block_n) * 4 <= {TILE_BYTES_LIMIT}",
        ),
        Constraint("vector_fits_tile", lambda g: g["vec_width"] <= g["block_n"], "vec_width <= block_n"),
        Constraint("rows_fit_tile", lambda g: g["rows_per_step"] <= g["block_m"], "rows_per_step <= block_m"),
        Constraint(
            "ijk_is_scalar",
            lambda g: g["loop_order"] != "ijk" or (g["vec_width"] == 1 and g["rows_per_step"] == 1),
            "loop_order ijk computes scalar dot products: vec_width == 1 and rows_per_step == 1",
        ),
    ],
)

SEED = SPACE.genome(
    dict(block_m=32, block_n=32, block_k=256, loop_order="ijk", rows_per_step=1, vec_width=1,
         k_unroll=1, pack_b=False, threads=1)
)


# Small enough for CI to search, export and self-check end to end in a few minutes; large enough (one to a
# few milliseconds each for torch.matmul on two cores) that an op's few microseconds of dispatch in Python
# count for little beside it
WORKLOADS = (workload("small", "four fp32 GEMMs of M, N, K in 384-768 (one ragged); the first weighs 2, the "
                      "others 1", [(shape("m512_n512_k512", m=512, n=512, k=512), 2.0),
                                   (shape("m768_n384_k512", m=768, n=384, k=512), 1.0),
                                   (shape("m384_n768_k640", m=384, n=768, k=640), 1.0),
                                   (shape("m600_n400_k520", m=600, n=400, k=520), 1.0)]),)


class CpuGemm(RuntimeFamily):
    default_strategy = "surrogate"  # the strategy its recorded searches were measured with (docs/JOURNAL.md)
    name = "cpu_gemm"
    description = "fp32 GEMM C = A @ B in C++ (OpenMP), against torch.matmul"
    device = "cpu"
    space = SPACE
    seed_genomes = (SEED,)
    shapes = (
        shape("mission", m=256, n=256, k=256, mission=True),
        shape("tall", m=384, n=128, k=192),
        shape("ragged", m=131, n=77, k=93),
    )
    workloads = WORKLOADS
    tolerance = Tolerance(max_abs=1e-3, max_rel_l2=1e-5)
    anchor_name = "torch.matmul"
    runtime = cpu_gemm_runtime  # inputs, reference, anchor, load and launch: seeds/cpu_gemm/runtime.py
    timing = TimingPlan(warmup=2, min_runs=7, max_runs=100, min_seconds=0.03)

    def build_recipe(self, genome) -> BuildRecipe:
        g = genome.as_dict()
        macros = dict(
            BLOCK_M=g["block_m"], BLOCK_N=g["block_n"], BLOCK_K=g["block_k"],
            LOOP_ORDER=LOOP_ORDERS[g["loop_order"]], ROWS_PER_STEP=g["rows_per_step"],
            VEC_WIDTH=g["vec_width"], K_UNROLL=g["k_unroll"], PACK_B=int(g["pack_b"]),
            THREADS=g["threads"],
        )
        flags = ("-O3", "-march=native", "-std=c++17", "-fopenmp", "-fPIC", "-shared") + tuple(
            f"-D{k}={v}" for k, v in sorted(macros.items())
        )
        return BuildRecipe(SOURCE.read_text(), SOURCE.name, "c++", flags, "shared_library", origin=SOURCE)

    def flops(self, shape: ProblemShape) -> float:
        return 2.0 * shape["m"] * shape["n"] * shape["k"]

    def bytes_moved(self, shape: ProblemShape) -> float:
        return 4.0 * (shape["m"] * shape["k"] + shape["k"] * shape["n"] + shape["m"] * shape["n"])


FAMILY = CpuGemm()
