"""FlashCore: fp16 attention forward on the H100, from a scalar baseline towards FlashAttention.

This first version carries the scalar path (FMA on fp32, S/P tile materialised in shared
memory) with the knobs that do not need tensor cores: tile sizes, warps, serial or shuffle
reductions, exp2 with the scale folded in, padded shared memory. Both head dimensions are
compiled into one cubin (entry points flashcore_d64 and flashcore_d128).
"""

from __future__ import annotations

import ctypes
import math
from pathlib import Path

from kernel_genome import Boolean, Choice, Constraint, PowerOfTwo, Space
from seeds._family import BuildRecipe, KernelFamily, ProblemShape, TimingPlan, Tolerance, shape

SOURCE = Path(__file__).with_name("flashcore.cu")
HEAD_DIMS = (64, 128)
SMEM_LIMIT = 227 * 1024
MAX_ACCUMULATORS = 64  # fp32 output accumulators a thread keeps in registers (at D = 128)


def shared_bytes(g, head_dim: int) -> int:
    """Dynamic shared memory of one block; mirrors the carve-up at the top of attention<D>()."""
    ld = head_dim + (8 if g["smem_pad"] else 0)
    halves = (g["block_m"] + 2 * g["block_n"]) * ld
    floats = g["block_m"] * (g["block_n"] + 1) + 3 * g["block_m"]
    return 2 * halves + 4 * floats


SPACE = Space(
    [
        PowerOfTwo("block_m", 16, 128, description="query rows per block"),
        PowerOfTwo("block_n", 32, 128, description="key/value rows per tile"),
        PowerOfTwo("warps", 1, 8, description="warps per block"),
        Choice("reduce", ("serial", "shuffle"), description="row max/sum: one thread per row | warp shuffles"),
        Boolean("exp2", description="exp2 with log2(e) folded into the scale"),
        Boolean("smem_pad", description="pad shared-memory rows by 16 bytes"),
    ],
    [
        Constraint(
            "accumulators_fit_registers",
            lambda g: g["block_m"] * max(HEAD_DIMS) // (g["warps"] * 32) <= MAX_ACCUMULATORS,
            f"block_m * 128 / (warps * 32) <= {MAX_ACCUMULATORS} fp32 accumulators a thread",
        ),
        Constraint(
            "shared_memory_fits",
            lambda g: shared_bytes(g, max(HEAD_DIMS)) <= SMEM_LIMIT,
            f"Q, K, V tiles + S tile + row stats <= {SMEM_LIMIT} bytes at D = 128",
        ),
    ],
)

SEED = SPACE.genome(dict(block_m=16, block_n=64, warps=4, reduce="serial", exp2=False, smem_pad=False))


def attention_shape(name: str, b: int, h: int, s: int, d: int, *, causal: bool = False, mission: bool = False):
    return shape(name, b=b, h=h, s=s, d=d, causal=int(causal), mission=mission)


class FlashCore(KernelFamily):
    name = "flashcore"
    description = "fp16 attention forward O = softmax(QK^T * scale) V, [B,H,S,D], D in {64,128}"
    device = "cuda"
    space = SPACE
    seed_genomes = (SEED,)
    shapes = (
        attention_shape("mission", 1, 8, 512, 64, mission=True),
        attention_shape("short", 1, 8, 256, 64),
        attention_shape("long", 1, 8, 1024, 64),
        attention_shape("d128", 1, 8, 512, 128),
        attention_shape("causal", 1, 8, 512, 64, causal=True),
        attention_shape("ragged", 2, 4, 300, 64, causal=True),
    )
    # fp16 output of an fp32-accumulated attention: errors of a few 1e-3 at most
    tolerance = Tolerance(max_abs=0.06, max_rel_l2=1e-2)
    anchor_name = "torch SDPA (default backend: cuDNN on the H100)"
    timing = TimingPlan(warmup=5, min_runs=20, max_runs=200, min_seconds=0.05)

    def build_recipe(self, genome) -> BuildRecipe:
        g = genome.as_dict()
        macros = dict(BLOCK_M=g["block_m"], BLOCK_N=g["block_n"], WARPS=g["warps"],
                      REDUCE=int(g["reduce"] == "shuffle"), EXP2=int(g["exp2"]), SMEM_PAD=int(g["smem_pad"]))
        flags = ("-gencode", "arch=compute_90a,code=sm_90a", "-O3", "-std=c++17") + tuple(
            f"-D{k}={v}" for k, v in sorted(macros.items()))
        return BuildRecipe(SOURCE.read_text(), SOURCE.name, "nvcc", flags, "cubin")

    def check_shape(self, shape: ProblemShape) -> None:
        if shape["d"] not in HEAD_DIMS:
            raise ValueError(f"flashcore handles head dimension {HEAD_DIMS}, not {shape['d']}")

    def make_inputs(self, shape: ProblemShape, generator):
        import torch

        self.check_shape(shape)
        dims = (shape["b"], shape["h"], shape["s"], shape["d"])
        return tuple(torch.randn(dims, generator=generator, device="cuda", dtype=torch.float16) for _ in range(3))

    def make_output(self, shape: ProblemShape):
        import torch

        return torch.empty((shape["b"], shape["h"], shape["s"], shape["d"]), device="cuda", dtype=torch.float16)

    def reference(self, shape: ProblemShape, inputs):
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v = (t.float() for t in inputs)
        with sdpa_kernel(SDPBackend.MATH):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(shape["causal"]))

    def load(self, artifact: Path, genome):
        from seeds._cuda import CudaModule

        module = CudaModule(artifact)
        kernels = {}
        for d in HEAD_DIMS:
            kernel = module.kernel(f"flashcore_d{d}")
            kernel.set_max_dynamic_shared(shared_bytes(genome, d))
            kernels[d] = kernel
        return kernels, genome.as_dict()

    def launch(self, kernel, shape: ProblemShape, inputs, output) -> None:
        from seeds._cuda import ptr

        kernels, g = kernel
        b, h, s, d = shape["b"], shape["h"], shape["s"], shape["d"]
        q, k, v = inputs
        grid = ((s + g["block_m"] - 1) // g["block_m"], b * h)
        kernels[d].launch(grid, (g["warps"] * 32,),
                          [ptr(q), ptr(k), ptr(v), ptr(output), ctypes.c_int(s), ctypes.c_int(shape["causal"]),
                           ctypes.c_float(1.0 / math.sqrt(d))],
                          shared_bytes=shared_bytes(g, d))

    def anchor(self, shape: ProblemShape, inputs):
        import torch

        q, k, v = inputs
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(shape["causal"]))

    def flops(self, shape: ProblemShape) -> float:
        full = 4.0 * shape["b"] * shape["h"] * shape["s"] * shape["s"] * shape["d"]
        return full / 2 if shape["causal"] else full

    def bytes_moved(self, shape: ProblemShape) -> float:
        return 2.0 * 4 * shape["b"] * shape["h"] * shape["s"] * shape["d"]


FAMILY = FlashCore()
