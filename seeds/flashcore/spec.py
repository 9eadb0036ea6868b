"""FlashCore: fp16 attention forward on the H100, from a scalar baseline towards FlashAttention.

One CUDA translation unit (seeds/_hopper.cuh, flashcore_parts.cuh, _materialised.cuh, _merge.cuh,
_fused.cuh, flashcore.cu) whose knobs walk the steps a kernel engineer takes by hand: scalar FMA ->
WMMA -> mma.sync + ldmatrix for Q K^T and for P V, the S/P tile
materialised in shared memory -> the fused online softmax in registers, serial -> shuffle row
reductions, plain loads -> cp.async pipelines, plain -> padded -> swizzled shared memory, exp2 with
the scale folded in, Q kept in registers. Both head dimensions are compiled into one cubin (entry
points flashcore_d64 and flashcore_d128); the cubin also exports the shared-memory size its plan
needs for each, which ``load`` checks against ``shared_bytes`` below.
"""

from __future__ import annotations

import ctypes
import math
from pathlib import Path

from kernel_genome import Boolean, Choice, Constraint, PowerOfTwo, Space
from seeds._cuda import TensorMapBytes, tensor_map
from seeds._family import BuildRecipe, KernelFamily, ProblemShape, TimingPlan, Tolerance, shape
from seeds._wgmma import wgmma_wrapper

HERE = Path(__file__).parent
SOURCES = (HERE.parent / "_hopper.cuh",) + tuple(HERE / name for name in (
    "flashcore_parts.cuh", "flashcore_materialised.cuh", "flashcore_merge.cuh", "flashcore_fused.cuh",
    "flashcore.cu"))
HEAD_DIMS = (64, 128)
SMEM_LIMIT = 227 * 1024
MAX_ACCUMULATORS = 64  # fp32 O accumulators a thread keeps in registers on the materialised path
MAX_FRAGMENTS = 192  # fp32 S + O fragments a thread keeps in registers on the fused path
ENGINES = ("scalar", "wmma", "mma")
STAGES = {"plain": 1, "cp_async2": 2, "cp_async3": 3}


def _align128(n: int) -> int:
    return (n + 127) // 128 * 128


def block_n(g, head_dim: int) -> int:
    """Key/value rows per tile of the kernel for this head dimension."""
    return g[f"block_n_d{head_dim}"]


def warps(g, head_dim: int) -> int:
    """Warps per block of the kernel for this head dimension."""
    return g[f"warps_d{head_dim}"]


def kv_rows(g, head_dim: int) -> int:
    """Key/value rows of one pipeline stage (a tile for each warp sharing the query rows)."""
    return block_n(g, head_dim) * g["kv_split"]


def uses_wgmma(g, head_dim: int) -> bool:
    """Whether this head dimension's kernel multiplies by wgmma (a warpgroup of 64 rows per key split)."""
    return head_dim == 64 and g["wgmma_d64"]


def rows_per_warp(g, head_dim: int) -> int:
    """Query rows a warp owns on the fused path (warps sharing rows split the keys; wgmma: 16 of its
    warpgroup's 64, query rows or padding)."""
    return 16 if uses_wgmma(g, head_dim) else g["block_m"] * g["kv_split"] // warps(g, head_dim)


def shared_bytes(g, head_dim: int) -> int:
    """Dynamic shared memory of one block; mirrors Plan<D> in flashcore_parts.cuh."""
    bm, bn = g["block_m"], block_n(g, head_dim)
    ld = head_dim + (8 if g["layout"] == "padded" else 0)
    split = g["kv_split"]
    total = _align128(bm * ld * 2) + 2 * STAGES[g["kv_loads"]] * _align128(kv_rows(g, head_dim) * ld * 2)
    if kv_share(g, head_dim) > 1 or g["stage_wait"] == "mbarrier":
        total += _align128(3 * STAGES[g["kv_loads"]] * 8)  # full K, full V and empty mbarriers a stage
    if split > 1 or g["cluster_kv_split"] > 1 or g["grid_kv_split"] > 1:
        splits = split * g["cluster_kv_split"]  # every split's partial rows, in each block
        total += _align128(splits * bm * (head_dim + 4) * 4) + _align128(4 * splits * bm * 4)
        if g["cluster_kv_split"] > 1 and g["softmax"] == "registers":
            total += 128  # the merge's mbarriers
    if g["softmax"] == "smem":
        total += _align128(bm * (bn + 4) * 4) + _align128(3 * bm * 4)
        if g["pv"] != "scalar":
            total += _align128(bm * (bn + 8) * 2)
        if g["pv"] == "wmma":
            total += _align128(bm * (head_dim + 4) * 4)
    return total


def kv_share(g, head_dim: int) -> int:
    """Blocks of a cluster sharing the K/V stages in this head dimension's kernel (1: none)."""
    return g["kv_share_d64"] if head_dim == 64 else 1


def query_blocks(g, s: int, head_dim: int) -> int:
    """Query blocks of one head (rounded up to whole clusters when they share K/V stages)."""
    share = kv_share(g, head_dim)
    blocks = (s + g["block_m"] - 1) // g["block_m"]
    return (blocks + share - 1) // share * share


def grid(g, s: int, heads: int, head_dim: int) -> tuple[int, int]:
    """Blocks of a launch: query blocks times the blocks sharing their rows (a cluster's or the
    grid's key split) by batch * heads."""
    return query_blocks(g, s, head_dim) * g["cluster_kv_split"] * g["grid_kv_split"], heads


def grid_workspace(g, s: int, heads: int, head_dim: int) -> tuple[int, int]:
    """What a grid key split needs in global memory: floats of partial rows (a record of
    block_m x (D + 2) per block) and ticket counters (one per query block); (0, 0) without one."""
    if g["grid_kv_split"] == 1:
        return 0, 0
    x, y = grid(g, s, heads, head_dim)
    return x * y * g["block_m"] * (head_dim + 2), query_blocks(g, s, head_dim) * heads


def _implies(condition: bool, consequence: bool) -> bool:
    return consequence or not condition


def _registers_fit(g) -> bool:
    for d in HEAD_DIMS:
        if g["softmax"] == "registers":
            if rows_per_warp(g, d) * (block_n(g, d) + d) // 32 > MAX_FRAGMENTS:
                return False
        elif g["pv"] != "wmma" and g["block_m"] * d // (warps(g, d) * 32) > MAX_ACCUMULATORS:
            return False
    return True


def _warps_own_rows(g) -> bool:
    return all(warps(g, d) % g["kv_split"] == 0 and g["block_m"] * g["kv_split"] % (16 * warps(g, d)) == 0
               for d in HEAD_DIMS if not uses_wgmma(g, d))


def _warpgroups_cover_rows(g) -> bool:
    return g["warps_d64"] == 4 * g["kv_split"] and g["block_m"] <= 64


SPACE = Space(
    [
        PowerOfTwo("block_m", 16, 128, description="query rows per block"),
        PowerOfTwo("block_n_d64", 32, 128, description="key/value rows per tile, D = 64 kernel"),
        PowerOfTwo("warps_d64", 1, 8, description="warps per block, D = 64 kernel"),
        PowerOfTwo("block_n_d128", 32, 128, description="key/value rows per tile, D = 128 kernel"),
        PowerOfTwo("warps_d128", 1, 8, description="warps per block, D = 128 kernel"),
        Choice("qk", ENGINES, description="S = Q K^T: scalar FMA | WMMA 16x16x16 | mma.sync m16n8k16 + ldmatrix"),
        Choice("pv", ENGINES, description="O += P V: scalar FMA | WMMA 16x16x16 | mma.sync m16n8k16 + ldmatrix"),
        Choice("softmax", ("smem", "registers"),
               description="S/P tile materialised in shared memory | fused online softmax in registers"),
        Choice("reduce", ("serial", "shuffle"), description="row max/sum: one thread per row | warp shuffles"),
        Boolean("exp2", description="exp2 with log2(e) folded into the scale"),
        Choice("layout", ("plain", "padded", "swizzled"),
               description="Q/K/V rows in shared memory: plain | padded by 16 bytes | 16-byte chunks XOR-swizzled"),
        Choice("kv_loads", tuple(STAGES), description="K/V tiles: plain 16-byte loads | cp.async, 2 or 3 stages"),
        Boolean("q_in_registers", description="fused path: Q fragments loaded once into registers"),
        PowerOfTwo("kv_split", 1, 4,
                   description="fused path: warps sharing query rows, each on its slice of every K/V stage, merged at the end"),
        PowerOfTwo("cluster_kv_split", 1, 4,
                   description="fused path: blocks of a thread-block cluster sharing query rows, each on every n-th "
                               "K/V stage, merged through distributed shared memory"),
        PowerOfTwo("grid_kv_split", 1, 4,
                   description="fused path, no cluster: blocks of the grid sharing query rows, each on every n-th "
                               "K/V stage; each leaves its partial rows in a global workspace and the last to "
                               "finish merges them"),
        Choice("stage_wait", ("block_barrier", "mbarrier"),
               description="fused path, cp.async stages: each thread waits for its own copies and the block meets "
                           "at a barrier per stage | every thread's copies of a stage end in an arrival on the "
                           "stage's mbarrier (cp.async.mbarrier.arrive), each warp waits for the stage alone and "
                           "marks it empty when done: warps run free"),
        Boolean("wgmma_d64",
                description="D = 64 kernel, fused path: Q K^T and P V by wgmma (sm_90a) instead of mma.sync: a "
                            "warpgroup per key split, its 64 rows the block's query rows and padding; Q (loaded by "
                            "ldmatrix each tile, whatever q_in_registers says) and P from registers, K and V read by "
                            "the tensor cores from the swizzled stages"),
        PowerOfTwo("kv_share_d64", 1, 4,
                   description="D = 64 kernel, fused path: blocks of a thread-block cluster (consecutive query blocks "
                               "of one head) sharing every K/V stage, each bringing in 1/n of its rows by a TMA copy "
                               "multicast to all"),
    ],
    [
        Constraint(
            "accumulators_fit_registers",
            _registers_fit,
            f"at each head dimension D: on the fused path the S and O fragments of a thread, rows a warp "
            f"owns * (block_n + D) / 32, are at most {MAX_FRAGMENTS} (the screen drops those that still "
            f"spill); on the materialised path the O accumulators, block_m * D / (warps * 32), at most "
            f"{MAX_ACCUMULATORS} (WMMA keeps O in shared memory)",
        ),
        Constraint(
            "shared_memory_fits",
            lambda g: all(shared_bytes(g, d) <= SMEM_LIMIT for d in HEAD_DIMS),
            f"Q tile + K/V stages + S/P/O tiles + row stats <= {SMEM_LIMIT} bytes at each head dimension",
        ),
        Constraint(
            "register_softmax_needs_mma",
            lambda g: _implies(g["softmax"] == "registers", g["qk"] == "mma" and g["pv"] == "mma"),
            "softmax in registers reads S from, and feeds P to, mma.sync fragments: qk = pv = mma",
        ),
        Constraint(
            "warps_own_query_rows",
            lambda g: _implies(g["softmax"] == "registers", _warps_own_rows(g)),
            "softmax in registers: at each head dimension kv_split divides warps, and each warp owns a "
            "multiple of 16 query rows (block_m * kv_split % (16 * warps) == 0)",
        ),
        Constraint(
            "kv_split_needs_fused_path",
            lambda g: _implies(g["kv_split"] > 1, g["softmax"] == "registers"),
            "only the fused path splits key tiles between warps (kv_split = 1 unless softmax = registers)",
        ),
        Constraint(
            "cluster_split_needs_fused_path",
            lambda g: _implies(g["cluster_kv_split"] > 1, g["softmax"] == "registers"),
            "only the fused path merges partial rows across a cluster (cluster_kv_split = 1 unless softmax = registers)",
        ),
        Constraint(
            "grid_split_needs_fused_path_alone",
            lambda g: _implies(g["grid_kv_split"] > 1, g["softmax"] == "registers" and g["cluster_kv_split"] == 1
                               and g["kv_share_d64"] == 1),
            "blocks of the grid share query rows (grid_kv_split > 1) only on the fused path and without "
            "clusters (cluster_kv_split = kv_share_d64 = 1)",
        ),
        Constraint(
            "shared_stages_need_fused_pipeline",
            lambda g: _implies(g["kv_share_d64"] > 1, g["softmax"] == "registers" and g["kv_loads"] != "plain"
                               and g["layout"] != "padded" and g["cluster_kv_split"] == 1),
            "K/V stages shared across a cluster (kv_share_d64 > 1) need the fused path, a pipeline of 2 or 3 "
            "stages (kv_loads != plain), a layout the TMA writes (swizzled = its 128-byte swizzle, or plain; "
            "not padded) and no cluster key split (cluster_kv_split = 1: one cluster dimension)",
        ),
        Constraint(
            "wgmma_needs_fused_warpgroups",
            lambda g: _implies(g["wgmma_d64"], g["softmax"] == "registers"
                               and g["layout"] == "swizzled" and _warpgroups_cover_rows(g)
                               and g["cluster_kv_split"] == 1 and g["grid_kv_split"] == 1 and g["kv_share_d64"] == 1
                               and g["stage_wait"] == "block_barrier"),
            "wgmma_d64 needs the fused path, the swizzled layout (wgmma's 128-byte swizzle), "
            "a warpgroup per key split (warps_d64 = 4 * kv_split) covering the block's rows (block_m <= 64), "
            "the block alone on its rows (no cluster or grid split, no shared stages), and block barriers "
            "between the stages (stage_wait = block_barrier: the threads that copied a tile fence it for wgmma's "
            "proxy before the barrier)",
        ),
        Constraint(
            "mbarrier_stages_need_fused_pipeline",
            lambda g: _implies(g["stage_wait"] == "mbarrier", g["softmax"] == "registers" and g["kv_loads"] != "plain"
                               and g["kv_share_d64"] == 1),
            "stages announced on mbarriers (stage_wait = mbarrier) need the fused path, a cp.async pipeline "
            "(kv_loads != plain) and no cluster sharing the stages (kv_share_d64 = 1: its TMA stages have their own)",
        ),
        Constraint(
            "register_softmax_reduces_by_shuffle",
            lambda g: _implies(g["softmax"] == "registers", g["reduce"] == "shuffle"),
            "softmax in registers always reduces rows with quad shuffles (reduce = shuffle)",
        ),
        Constraint(
            "q_registers_need_fused_path",
            lambda g: _implies(g["q_in_registers"], g["softmax"] == "registers"),
            "Q in registers only exists on the fused path (softmax = registers)",
        ),
        Constraint(
            "wmma_needs_row_major_smem",
            lambda g: _implies("wmma" in (g["qk"], g["pv"]), g["layout"] != "swizzled"),
            "WMMA loads need a plain row stride: no swizzled layout",
        ),
    ],
    # runs stored before these knobs existed built what their value 1 builds
    added_later={"kv_share_d64": 1, "grid_kv_split": 1, "stage_wait": "block_barrier", "wgmma_d64": False},
)

SEED = SPACE.genome(dict(block_m=16, block_n_d64=64, warps_d64=4, block_n_d128=64, warps_d128=4, qk="scalar",
                         pv="scalar", softmax="smem", reduce="serial", exp2=False, layout="plain", kv_loads="plain",
                         q_in_registers=False, kv_split=1, cluster_kv_split=1, grid_kv_split=1, kv_share_d64=1,
                         stage_wait="block_barrier", wgmma_d64=False))


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
    export_template = HERE / "export_template.py.in"
    timing = TimingPlan(warmup=5, min_runs=20, max_runs=200, min_seconds=0.05)

    def build_recipe(self, genome) -> BuildRecipe:
        g = genome.as_dict()
        macros = dict(BLOCK_M=g["block_m"], QK=ENGINES.index(g["qk"]),
                      PV=ENGINES.index(g["pv"]), SOFTMAX=int(g["softmax"] == "registers"),
                      REDUCE=int(g["reduce"] == "shuffle"), EXP2=int(g["exp2"]),
                      LAYOUT=("plain", "padded", "swizzled").index(g["layout"]), STAGES=STAGES[g["kv_loads"]],
                      Q_REGS=int(g["q_in_registers"]), KV_SPLIT=g["kv_split"], CLUSTER=g["cluster_kv_split"],
                      GRID_SPLIT=g["grid_kv_split"], KV_SHARE_D64=g["kv_share_d64"],
                      STAGE_WAIT=int(g["stage_wait"] == "mbarrier"), WGMMA_D64=int(g["wgmma_d64"]),
                      **{f"{name.upper()}_D{d}": g[f"{name}_d{d}"] for name in ("block_n", "warps") for d in HEAD_DIMS})
        flags = ("-gencode", "arch=compute_90a,code=sm_90a", "-O3", "-std=c++17") + tuple(
            f"-D{k}={v}" for k, v in sorted(macros.items()))
        parts = [f'#line 1 "{path.name}"\n{path.read_text()}\n' for path in SOURCES]
        wrappers = ""
        if g["wgmma_d64"]:  # after _hopper.cuh: S = Q K^T (N = the key tile) and O += P V (N = 64, V N-major)
            wrappers = (wgmma_wrapper("wgmma_qk", g["block_n_d64"], "f16", a_source="registers")
                        + wgmma_wrapper("wgmma_pv", 64, "f16", a_source="registers", b_mn_major=True))
        source = parts[0] + wrappers + "".join(parts[1:])
        return BuildRecipe(source, "flashcore.cu", "nvcc", flags, "cubin")

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
        planned = module.read_ints("flashcore_shared_bytes", len(HEAD_DIMS))
        kernels = {}
        for d, kernel_bytes in zip(HEAD_DIMS, planned):
            if kernel_bytes != shared_bytes(genome, d):
                raise RuntimeError(f"the kernel plans {kernel_bytes} bytes of shared memory at D={d}, "
                                   f"the spec {shared_bytes(genome, d)}: flashcore.cu and spec.py disagree")
            kernel = module.kernel(f"flashcore_d{d}")
            kernel.set_max_dynamic_shared(kernel_bytes)
            kernels[d] = (kernel, kernel_bytes)
        return kernels, genome.as_dict(), {}

    def launch(self, kernel, shape: ProblemShape, inputs, output) -> None:
        from seeds._cuda import ptr, ticketed_workspace

        kernels, g, workspaces = kernel
        b, h, s, d = shape["b"], shape["h"], shape["s"], shape["d"]
        function, smem = kernels[d]
        q, k, v = inputs
        share = kv_share(g, d)
        if share > 1:
            box_rows = kv_rows(g, d) // share
            maps = [tensor_map(t, box_rows, swizzled=g["layout"] == "swizzled") for t in (k, v)]
        else:
            maps = [TensorMapBytes(), TensorMapBytes()]  # not read by a kernel without shared stages
        records, tickets = ticketed_workspace(workspaces, shape, *grid_workspace(g, s, b * h, d), q.device)
        function.launch(grid(g, s, b * h, d), (warps(g, d) * 32,),
                        [ptr(q), ptr(k), ptr(v), ptr(output), ctypes.c_int(s), ctypes.c_int(shape["causal"]),
                         ctypes.c_float(1.0 / math.sqrt(d)), *maps, ptr(records), ptr(tickets)],
                        shared_bytes=smem)

    def anchor(self, shape: ProblemShape, inputs):
        import torch

        q, k, v = inputs
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(shape["causal"]))

    def secondary_anchors(self):
        return {"torch SDPA FLASH_ATTENTION backend (FA2)": self._flash_attention}

    def _flash_attention(self, shape: ProblemShape, inputs):
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v = inputs
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(shape["causal"]))

    def flops(self, shape: ProblemShape) -> float:
        full = 4.0 * shape["b"] * shape["h"] * shape["s"] * shape["s"] * shape["d"]
        return full / 2 if shape["causal"] else full

    def bytes_moved(self, shape: ProblemShape) -> float:
        return 2.0 * 4 * shape["b"] * shape["h"] * shape["s"] * shape["d"]


FAMILY = FlashCore()
