"""FlashDecode: attention of a few query tokens over a long K/V cache (decode, speculative decode, cross-attention)
on the H100/H200, split across the sequence (FlashDecoding), beside FlashCore (query length == key length).

One CUDA translation unit (flashdecode.cu): a split kernel whose blocks each take one K/V head of one sequence,
the (query head, query token) rows that share it in tiles of 16, and one stretch of the cache, streamed by each
warp through shared memory on its own (cp.async), with mma.sync for Q K^T and P V; and a combine kernel (or the
split's last block) that merges the splits' partial results. Both head dimensions and both element types are
compiled into one cubin. The work is bound by reading K and V: ``bytes_moved`` counts them (and Q and O), and the
reports set the achieved rate against the GPU's read bandwidth.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from evo.kernel_genome import Choice, Constraint, PowerOfTwo, Space
from evo.seeds._family import BLOCK_SHARED_BYTES, HOPPER_NVCC_FLAGS, BuildRecipe, ProblemShape, RuntimeFamily, TimingPlan, Tolerance, shape
from evo.seeds._workload import workload
from evo.seeds.flashdecode import runtime as flashdecode_runtime

SOURCE = Path(__file__).with_name("flashdecode.cu")
COMBINES = ("kernel", "overlapped_kernel", "last_block")

SPACE = Space(
    [
        PowerOfTwo("warps", 1, 8, description="warps per block, each streaming its own tiles of the split's keys"),
        Choice("keys_per_warp", (16, 32, 64), ordered=True, description="keys of one warp's K/V tile"),
        Choice("stages", (2, 3, 4), ordered=True, description="tiles each warp has in flight (cp.async pipeline depth)"),
        Choice("split_waves", (1, 2, 4, 8), ordered=True,
               description="blocks per SM the split count aims at (splits = SMs x this / (sequences x K/V heads x row tiles))"),
        Choice("min_split_keys", (64, 128, 256, 512, 1024), ordered=True, description="no split takes fewer keys"),
        Choice("split_policy", ("fill", "balanced"),
               description="fill: splits for split_waves blocks per SM; balanced: the split count whose last wave of "
                           "resident blocks is fullest, at least split_waves waves"),
        Choice("combine", COMBINES, description="who merges the splits: a combine kernel, one launched to overlap the split kernel's end "
                           "(programmatic dependent launch), or each row tile's last block"),
    ],
    [
        Constraint("stages_fit_shared", lambda g: flashdecode_runtime.shared_bytes(g, 128) <= BLOCK_SHARED_BYTES,
                   f"warps x stages x 2 x keys_per_warp x (128 + 8) x 2 <= {BLOCK_SHARED_BYTES}"),
    ],
)
SEED = SPACE.genome(dict(warps=4, keys_per_warp=32, stages=2, split_waves=1, min_split_keys=256, split_policy="fill",
                         combine="kernel"))


def decode_shape(name: str, b: int, h: int, h_kv: int, kv: int, *, q: int = 1, d: int = 128, causal: bool = False,
                 lower_right: bool = False, bf16: bool = True, mission: bool = False):
    """B sequences of Q query tokens, H query heads over H_kv K/V heads of KV cached keys, head dimension D; causal
    aligned to the top left (SDPA's is_causal) or, with lower_right, to the lower right (the Q queries are the last
    of the KV positions, as in chunked prefill)."""
    return shape(name, b=b, h=h, h_kv=h_kv, q=q, kv=kv, d=d, causal=int(causal or lower_right),
                 lower_right=int(lower_right), bf16=int(bf16), mission=mission)


def _decode(name: str, b: int, h: int, h_kv: int, kv: int, **more):
    return decode_shape(name, b, h, h_kv, kv, **more), 1.0


LLAMA3_8B = dict(h=32, h_kv=8)  # also Mistral-7B's attention
LLAMA3_70B_TP8 = dict(h=8, h_kv=1)  # one GPU's slice at tensor parallel 8
QWEN2_7B = dict(h=28, h_kv=4)

WORKLOADS = (workload("decode", "bf16 decode against a K/V cache in serving: Llama-3-8B / Mistral-7B (32 query heads, "
                      "8 K/V heads), Llama-3-70B's slice at tensor parallel 8 (8 / 1), Qwen2-7B (28 / 4), D 128, one "
                      "query token a sequence (four and sixteen for speculative decoding), batch 1-64, cache 1k-32k; "
                      "every shape weighs 1", [
    _decode("llama3_8b_b1_kv4k", 1, kv=4096, **LLAMA3_8B), _decode("llama3_8b_b1_kv32k", 1, kv=32768, **LLAMA3_8B),
    _decode("llama3_8b_b8_kv4k", 8, kv=4096, **LLAMA3_8B), _decode("llama3_8b_b8_kv16k", 8, kv=16384, **LLAMA3_8B),
    _decode("llama3_8b_b32_kv2k", 32, kv=2048, **LLAMA3_8B), _decode("llama3_8b_b64_kv1k", 64, kv=1024, **LLAMA3_8B),
    _decode("llama3_8b_b64_kv4k", 64, kv=4096, **LLAMA3_8B), _decode("mistral_7b_b4_kv8k", 4, kv=8192, **LLAMA3_8B),
    _decode("llama3_70b_tp8_b1_kv8k", 1, kv=8192, **LLAMA3_70B_TP8),
    _decode("llama3_70b_tp8_b16_kv8k", 16, kv=8192, **LLAMA3_70B_TP8),
    _decode("llama3_70b_tp8_b64_kv2k", 64, kv=2048, **LLAMA3_70B_TP8),
    _decode("qwen2_7b_b1_kv8k", 1, kv=8192, **QWEN2_7B), _decode("qwen2_7b_b16_kv4k", 16, kv=4096, **QWEN2_7B),
    _decode("qwen2_7b_b4_kv32k", 4, kv=32768, **QWEN2_7B),
    _decode("llama3_8b_b1_q4_kv4k", 1, kv=4096, q=4, **LLAMA3_8B), _decode("llama3_8b_b8_q4_kv8k", 8, kv=8192, q=4, **LLAMA3_8B),
    _decode("llama3_8b_b1_q16_kv8k", 1, kv=8192, q=16, **LLAMA3_8B),
]), workload("chunked_prefill", "bf16 mixed chunked prefill in serving: prompt chunks of 128-512 tokens against the cache "
             "before them and themselves (causal, aligned to the lower right: kv counts the chunk), speculative "
             "drafts of 4 tokens likewise, and the batch's decode steps beside them; Llama-3-8B (32 / 8 heads), "
             "Qwen2-7B (28 / 4), Llama-3-70B's slice at tensor parallel 8 (8 / 1), D 128; every shape weighs 1", [
    _decode("llama3_8b_chunk256_kv2k", 1, kv=2048, q=256, lower_right=True, **LLAMA3_8B),
    _decode("llama3_8b_chunk512_kv4k", 1, kv=4096, q=512, lower_right=True, **LLAMA3_8B),
    _decode("llama3_8b_chunk512_kv16k", 1, kv=16384, q=512, lower_right=True, **LLAMA3_8B),
    _decode("llama3_8b_b4_chunk128_kv8k", 4, kv=8192, q=128, lower_right=True, **LLAMA3_8B),
    _decode("qwen2_7b_chunk512_kv8k", 1, kv=8192, q=512, lower_right=True, **QWEN2_7B),
    _decode("llama3_70b_tp8_chunk512_kv8k", 1, kv=8192, q=512, lower_right=True, **LLAMA3_70B_TP8),
    _decode("llama3_70b_tp8_chunk256_kv32k", 1, kv=32768, q=256, lower_right=True, **LLAMA3_70B_TP8),
    _decode("llama3_8b_b8_draft4_kv4k", 8, kv=4096, q=4, lower_right=True, **LLAMA3_8B),
    _decode("llama3_8b_b16_decode_kv4k", 16, kv=4096, **LLAMA3_8B),
    _decode("qwen2_7b_b16_decode_kv8k", 16, kv=8192, **QWEN2_7B),
]),)


class FlashDecode(RuntimeFamily):
    default_strategy = "surrogate"  # the strategy its recorded searches were measured with (docs/JOURNAL.md)
    name = "flashdecode"
    description = ("fp16/bf16 attention of Q query tokens over a K/V cache, q [B,H,Q,D] against k, v [B,H_kv,KV,D], "
                   "D in {64,128}, split across the cache")
    device = "cuda"
    memory_bound = True
    space = SPACE
    seed_genomes = (SEED,)
    shapes = (
        decode_shape("mission", 1, 32, 8, 4096, mission=True),
        decode_shape("fp16_d64_ragged", 2, 16, 16, 1000, d=64, bf16=False),
        decode_shape("causal_q4", 1, 8, 2, 777, q=4, causal=True),
        decode_shape("long", 1, 8, 1, 16384),
        decode_shape("rows_35", 1, 28, 4, 3001, q=5),
        decode_shape("chunk_lower_right", 1, 8, 2, 1000, q=40, lower_right=True),
    )
    workloads = WORKLOADS
    flag_dims = ("causal", "lower_right", "bf16")
    categorical_dims = ("d",)  # one kernel of the cubin per head dimension
    tolerance = Tolerance(max_abs=0.03, max_rel_l2=1e-2)  # fp16/bf16 output of fp32 softmax and accumulation
    anchor_name = "torch SDPA (its default backend for the call)"
    runtime = flashdecode_runtime
    timing = TimingPlan(warmup=5, min_runs=20, max_runs=200, min_seconds=0.02)

    def build_recipe(self, genome) -> BuildRecipe:
        g = genome.as_dict()
        macros = dict(WARPS=g["warps"], KEYS_PER_WARP=g["keys_per_warp"], STAGES=g["stages"],
                      COMBINE=COMBINES.index(g["combine"]))
        flags = HOPPER_NVCC_FLAGS + tuple(f"-D{k}={v}" for k, v in sorted(macros.items()))
        return BuildRecipe(SOURCE.read_text(), SOURCE.name, "nvcc", flags, "cubin", origin=SOURCE)

    def check_shape(self, shape: ProblemShape) -> None:
        if shape["d"] not in flashdecode_runtime.HEAD_DIMS:
            raise ValueError(f"flashdecode handles head dimension {flashdecode_runtime.HEAD_DIMS}, not {shape['d']}")
        if shape["h"] % shape["h_kv"]:
            raise ValueError(f"the query heads h = {shape['h']} must be a multiple of the K/V heads h_kv = {shape['h_kv']}")
        if shape["lower_right"] and not shape["causal"]:
            raise ValueError("lower_right aligns the causal mask to the lower right: it needs causal = 1")
        if not flashdecode_runtime.every_query_sees_a_key(shape["q"], shape["kv"], shape["lower_right"]):
            raise ValueError(f"a causal mask aligned to the lower right needs kv >= q (else a query sees no key), "
                             f"not kv = {shape['kv']} < q = {shape['q']}")

    def dimension_defaults(self, dims: Mapping[str, int]) -> dict[str, int]:
        """A workload file may leave out h_kv (the query heads h: no grouping), q (1), causal (0), lower_right (0) and
        bf16 (1)."""
        return {"h_kv": dims.get("h", 1), "q": 1, "causal": 0, "lower_right": 0, "bf16": 1}

    def flops(self, shape: ProblemShape) -> float:
        return 4.0 * shape["b"] * shape["h"] * shape["q"] * shape["kv"] * shape["d"]

    def bytes_moved(self, shape: ProblemShape) -> float:
        """K and V read once, Q read and O written: what the kernel cannot do without."""
        cache = 2 * shape["b"] * shape["h_kv"] * shape["kv"] * shape["d"]
        queries = 2 * shape["b"] * shape["h"] * shape["q"] * shape["d"]
        return 2.0 * (cache + queries)


FAMILY = FlashDecode()
