"""FlashCore: fp16 attention forward on the H100, from a scalar baseline towards FlashAttention.

One CUDA translation unit (seeds/_hopper.cuh, flashcore_parts.cuh, _materialised.cuh, _merge.cuh,
_fused.cuh, _tma.cuh, flashcore.cu) whose knobs walk the steps a kernel engineer takes by hand: scalar FMA ->
WMMA -> mma.sync + ldmatrix for Q K^T and for P V, the S/P tile
materialised in shared memory -> the fused online softmax in registers, serial -> shuffle row
reductions, plain loads -> cp.async pipelines, plain -> padded -> swizzled shared memory, exp2 with
the scale folded in, Q kept in registers, TMA stages and the overlap of one tile's Q K^T with the
previous tile's softmax. Both head dimensions are compiled into one cubin (entry
points flashcore_d64 and flashcore_d128); the cubin also exports the shared-memory size its plan
needs for each, which runtime.py's ``load`` checks against ``plan.shared_bytes``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from evo.seeds._family import HOPPER_NVCC_FLAGS, BuildRecipe, ProblemShape, RuntimeFamily, TimingPlan, Tolerance, shape
from evo.seeds._workload import workload
from evo.seeds._wgmma import wgmma_wrapper
from evo.seeds.flashcore import runtime as flashcore_runtime
from evo.seeds.flashcore.space import ENGINES, HEAD_DIMS, SEED, SPACE, STAGES

HERE = Path(__file__).parent
SOURCES = (HERE.parent / "_hopper.cuh",) + tuple(HERE / name for name in (
    "flashcore_parts.cuh", "flashcore_materialised.cuh", "flashcore_merge.cuh", "flashcore_fused.cuh",
    "flashcore_tma.cuh", "flashcore.cu"))
WS_SOURCE = HERE / "flashcore_ws.cuh"  # the warp-specialised design's whole kernel, after _hopper.cuh


def attention_shape(name: str, b: int, h: int, s: int, d: int, *, causal: bool = False, mission: bool = False,
                    h_kv: int | None = None, bf16: bool = False, kv: int | None = None, lower_right: bool = False):
    """B x H x S x D queries over kv keys (default S); K and V with h_kv heads (grouped-query attention; default
    H), bf16 or fp16; causal aligned to the top left (SDPA's is_causal) or, with lower_right, to the lower right
    (the S queries are the last of the kv positions: a chunk of a prompt after the cache)."""
    return shape(name, b=b, h=h, s=s, d=d, causal=int(causal or lower_right), h_kv=h if h_kv is None else h_kv,
                 bf16=int(bf16), kv=s if kv is None else kv, lower_right=int(lower_right), mission=mission)


def _prefill(name: str, b: int, h: int, s: int, d: int, causal: bool = False, **more):
    return attention_shape(name, b, h, s, d, causal=causal, **more), 1.0


LLAMA3_8B, LLAMA3_70B_TP8, QWEN2_7B = dict(h=32, h_kv=8), dict(h=8, h_kv=1), dict(h=28, h_kv=4)


def _chunk(name: str, b: int, s: int, kv: int, heads: Mapping):
    """A prompt chunk of s tokens after a cache of kv - s: bf16, D 128, the mask aligned to the lower right."""
    return _prefill(name, b, heads["h"], s, 128, h_kv=heads["h_kv"], kv=kv, lower_right=True, bf16=True)


# Prefill attention of encoders (ViT, BERT: non-causal) and decoders (GPT-2, Llama: causal)
WORKLOADS = (workload("prefill", "attention prefill of real models, B x H x S x D: ViT-B/16 and ViT-L/14 at "
                      "batches 1-16, BERT-base/-large, GPT-2 (D 64, causal), Llama-style heads of 128 (causal, "
                      "512-8192 tokens) and long non-causal sequences; every shape weighs 1", [
    _prefill("vit_b16_b1", 1, 12, 197, 64), _prefill("vit_b16_b8", 8, 12, 197, 64),
    _prefill("vit_l14_b1", 1, 16, 257, 64), _prefill("vit_l14_b16", 16, 16, 257, 64),
    _prefill("bert_base_s128_b16", 16, 12, 128, 64), _prefill("bert_large_s512_b16", 16, 16, 512, 64),
    _prefill("h8_s512", 1, 8, 512, 64), _prefill("gpt2_s1024", 1, 12, 1024, 64, True),
    _prefill("gpt2_s1024_b8", 8, 12, 1024, 64, True), _prefill("h8_s8192", 1, 8, 8192, 64),
    _prefill("h16_s4096_b4", 4, 16, 4096, 64), _prefill("llama_s512", 1, 32, 512, 128, True),
    _prefill("llama_s1024", 1, 32, 1024, 128, True), _prefill("llama_s2048", 1, 32, 2048, 128, True),
    _prefill("h16_s2048_b2_causal", 2, 16, 2048, 128, True), _prefill("llama_s8192", 1, 32, 8192, 128, True),
    _prefill("dit_s1024_b2", 2, 16, 1024, 128), _prefill("h16_s4096_d128_b4", 4, 16, 4096, 128),
]), workload("llm_bf16", "bf16 prefill of current LLMs with grouped-query attention (K/V heads h_kv): Llama-3-8B "
             "(32 query heads, 8 K/V heads, D 128) at 2048 and 8192 tokens, Llama-3-70B's per-GPU slice at "
             "tensor parallel 8 (8 / 1 heads), Mistral-7B (32 / 8) at 4096, Qwen2-7B (28 / 4) at 4096, all causal; "
             "every shape weighs 1; only warp-specialised kernels run bf16 and grouped heads", [
    _prefill("llama3_8b_s2048", 1, 32, 2048, 128, True, h_kv=8, bf16=True),
    _prefill("llama3_8b_s8192", 1, 32, 8192, 128, True, h_kv=8, bf16=True),
    _prefill("llama3_8b_s2048_b4", 4, 32, 2048, 128, True, h_kv=8, bf16=True),
    _prefill("llama3_70b_tp8_s4096", 2, 8, 4096, 128, True, h_kv=1, bf16=True),
    _prefill("mistral_7b_s4096", 1, 32, 4096, 128, True, h_kv=8, bf16=True),
    _prefill("qwen2_7b_s4096", 1, 28, 4096, 128, True, h_kv=4, bf16=True),
]), workload("chunked_prefill", "chunked prefill of LLMs: prompt chunks of 128-2048 tokens after a KV cache (the "
             "query tokens the last of the keys: the causal mask aligned to the lower right), bf16, D 128, grouped "
             "K/V heads: Llama-3-8B, Qwen2-7B and Llama-3-70B at tensor parallel 8; every shape weighs 1", [
    _chunk("llama3_8b_chunk256_kv2k", 1, 256, 2048, LLAMA3_8B),
    _chunk("llama3_8b_chunk512_kv4k", 1, 512, 4096, LLAMA3_8B),
    _chunk("llama3_8b_chunk512_kv16k", 1, 512, 16384, LLAMA3_8B),
    _chunk("llama3_8b_chunk2048_kv8k", 1, 2048, 8192, LLAMA3_8B),
    _chunk("llama3_8b_b4_chunk128_kv8k", 4, 128, 8192, LLAMA3_8B),
    _chunk("qwen2_7b_chunk512_kv8k", 1, 512, 8192, QWEN2_7B),
    _chunk("llama3_70b_tp8_chunk512_kv8k", 1, 512, 8192, LLAMA3_70B_TP8),
    _chunk("llama3_70b_tp8_chunk256_kv32k", 1, 256, 32768, LLAMA3_70B_TP8),
]), workload("cross_attention", "cross-attention: decoder queries over an encoder's keys, no mask: Whisper-large's "
             "decoder (20 heads, D 64, 448 tokens over 1500 audio frames) at batches 1-8, SDXL's UNet (10 and 20 "
             "heads, D 64, 4096 and 1024 latents over 77 text tokens) at batch 2, fp16; every shape weighs 1", [
    _prefill("whisper_large_b1", 1, 20, 448, 64, kv=1500), _prefill("whisper_large_b8", 8, 20, 448, 64, kv=1500),
    _prefill("sdxl_q4096_kv77", 2, 10, 4096, 64, kv=77), _prefill("sdxl_q1024_kv77", 2, 20, 1024, 64, kv=77),
]),)


class FlashCore(RuntimeFamily):
    default_strategy = "surrogate"  # the strategy its recorded searches were measured with (docs/JOURNAL.md)
    name = "flashcore"
    description = ("fp16/bf16 attention forward O = softmax(QK^T * scale) V, Q [B,H,S,D] over K, V [B,h_kv,kv,D], "
                   "D in {64,128}, grouped K/V heads, causal aligned to the top left or the lower right")
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
    workloads = WORKLOADS
    flag_dims = ("causal", "bf16", "lower_right")
    categorical_dims = ("d",)  # one kernel of the cubin per head dimension
    # fp16 output of an fp32-accumulated attention: errors of a few 1e-3 at most
    tolerance = Tolerance(max_abs=0.06, max_rel_l2=1e-2)
    anchor_name = "torch SDPA (its default backend for the call: cuDNN on Hopper GPUs, flash for causal_lower_right)"
    # inputs, reference, anchors, load and launch: seeds/flashcore/runtime.py, which an export ships
    runtime = flashcore_runtime
    export_files = (("flashcore_plan.py", HERE / "plan.py"), ("flashcore_dropin.py", HERE / "dropin.py"))
    timing = TimingPlan(warmup=5, min_runs=20, max_runs=200, min_seconds=0.02)

    def build_recipe(self, genome) -> BuildRecipe:
        g = genome.as_dict()
        if g["warp_specialized"]:
            return self._warp_specialized_recipe(g)
        macros = dict(BLOCK_M=g["block_m"], QK=ENGINES.index(g["qk"]),
                      PV=ENGINES.index(g["pv"]), SOFTMAX=int(g["softmax"] == "registers"),
                      REDUCE=int(g["reduce"] == "shuffle"), EXP2=int(g["exp2"]),
                      LAYOUT=("plain", "padded", "swizzled").index(g["layout"]), STAGES=STAGES[g["kv_loads"]],
                      Q_REGS=int(g["q_in_registers"]), KV_SPLIT=g["kv_split"], CLUSTER=g["cluster_kv_split"],
                      GRID_SPLIT=g["grid_kv_split"], KV_SHARE_D64=g["kv_share_d64"],
                      STAGE_WAIT=int(g["stage_wait"] == "mbarrier"), WGMMA_D64=int(g["wgmma_d64"]),
                      TMA_STAGES_D64=int(g["tma_stages_d64"]), OVERLAP=int(g["overlap_tiles"]),
                      **{f"{name.upper()}_D{d}": g[f"{name}_d{d}"] for name in ("block_n", "warps") for d in HEAD_DIMS})
        flags = HOPPER_NVCC_FLAGS + tuple(
            f"-D{k}={v}" for k, v in sorted(macros.items()))
        parts = [f'#line 1 "{path.name}"\n{path.read_text()}\n' for path in SOURCES]
        wrappers = ""
        if g["wgmma_d64"]:  # after _hopper.cuh: S = Q K^T (N = the key tile) and O += P V (N = 64, V N-major)
            wrappers = (wgmma_wrapper("wgmma_qk", g["block_n_d64"], "f16", a_source="registers")
                        + wgmma_wrapper("wgmma_pv", 64, "f16", a_source="registers", b_mn_major=True))
        source = parts[0] + wrappers + "".join(parts[1:])
        return BuildRecipe(source, "flashcore.cu", "nvcc", flags, "cubin")

    def _warp_specialized_recipe(self, g: dict) -> BuildRecipe:
        """Only the knobs the design reads become macros, so genomes that differ in the classic design's
        knobs alone build (and measure) the same kernel once."""
        macros = dict(BLOCK_M=g["block_m"], BLOCK_N_D64=g["block_n_d64"], BLOCK_N_D128=g["block_n_d128"],
                      STAGES=STAGES[g["kv_loads"]], OVERLAP=int(g["ws_overlap"]), PINGPONG=int(g["ws_pingpong"]),
                      REGISTERS=int(g["ws_registers"]), HEAVY_FIRST=int(g["ws_heavy_first"]))
        flags = HOPPER_NVCC_FLAGS + tuple(
            f"-D{k}={v}" for k, v in sorted(macros.items()))
        # the wgmma wrappers of each element type and key tile, and the templates the kernel calls them by
        pieces = ["#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n"
                  "template <typename T, int N> __device__ void ws_qk(float (&s)[N / 2], uint64_t q, uint64_t k, bool acc);\n"
                  "template <typename T, int N> __device__ void ws_qk0(float (&s)[N / 2], uint64_t q, uint64_t k);\n"
                  "template <typename T> __device__ void ws_pv(float (&o)[32], const uint32_t (&p)[4], uint64_t v);\n"]
        specialise = "template <> __device__ __forceinline__ void"
        for t, ctype in (("f16", "half"), ("bf16", "__nv_bfloat16")):
            for n in sorted({g["block_n_d64"], g["block_n_d128"]}):
                pieces += [wgmma_wrapper(f"ws_qk_{t}_n{n}", n, t, a_source="shared"),
                           wgmma_wrapper(f"ws_qk0_{t}_n{n}", n, t, a_source="shared", overwrite=True),
                           f"{specialise} ws_qk<{ctype}, {n}>(float (&s)[{n // 2}], uint64_t q, uint64_t k, bool acc) "
                           f"{{ ws_qk_{t}_n{n}(s, q, k, acc); }}\n",
                           f"{specialise} ws_qk0<{ctype}, {n}>(float (&s)[{n // 2}], uint64_t q, uint64_t k) "
                           f"{{ ws_qk0_{t}_n{n}(s, q, k); }}\n"]
            pieces += [wgmma_wrapper(f"ws_pv_{t}", 64, t, a_source="registers", b_mn_major=True),
                       f"{specialise} ws_pv<{ctype}>(float (&o)[32], const uint32_t (&p)[4], uint64_t v) "
                       f"{{ ws_pv_{t}(o, p, v); }}\n"]
        hopper = SOURCES[0]
        source = (f'#line 1 "{hopper.name}"\n{hopper.read_text()}\n' + "".join(pieces)
                  + f'#line 1 "{WS_SOURCE.name}"\n{WS_SOURCE.read_text()}\n')
        return BuildRecipe(source, "flashcore.cu", "nvcc", flags, "cubin")

    def check_shape(self, shape: ProblemShape) -> None:
        if shape["d"] not in HEAD_DIMS:
            raise ValueError(f"flashcore handles head dimension {HEAD_DIMS}, not {shape['d']}")
        if shape["h"] % shape["h_kv"]:
            raise ValueError(f"the query heads h = {shape['h']} must be a multiple of the K/V heads h_kv = {shape['h_kv']}")
        dims = self._with_defaults(shape)
        if dims["lower_right"] and not (dims["causal"] and dims["kv"] > dims["s"]):
            raise ValueError(f"lower_right (the causal mask aligned to the lower right) needs causal = 1 and more keys "
                             f"than queries (kv > s), not causal = {dims['causal']}, kv = {dims['kv']}, s = {dims['s']}")

    def _with_defaults(self, shape: ProblemShape) -> dict[str, int]:
        """The shape's dimensions, the defaults where it leaves some out (a shape made by hand may lack kv)."""
        return self.dimension_defaults(dict(shape.dims)) | dict(shape.dims)

    def dimension_defaults(self, dims: Mapping[str, int]) -> dict[str, int]:
        """A workload file may leave out h_kv (the query heads h: no grouping), bf16 (0: fp16), kv (the queries s:
        self-attention) and lower_right (0)."""
        return {"h_kv": dims.get("h", 1), "bf16": 0, "kv": dims.get("s", 1), "lower_right": 0}

    def knobs_read(self, shape: ProblemShape) -> frozenset[str]:
        """The knobs of this head dimension's kernel: the other one's (``*_d128`` at D = 64; ``*_d64`` and
        the D = 64 kernel's overlap_tiles at D = 128) change nothing it runs."""
        other = 128 if shape["d"] == 64 else 64
        unread = {k.name for k in self.space.knobs if k.name.endswith(f"_d{other}")}
        if shape["d"] != 64:
            unread.add("overlap_tiles")
        return frozenset(k.name for k in self.space.knobs) - unread

    def flops(self, shape: ProblemShape) -> float:
        """4 D a head per score a causal mask leaves (counted as half of the square it cuts): at the top left the
        first min(S, KV) rows' triangle and every key of the rows after it; at the lower right the triangle and
        the S x (KV - S) keys before it."""
        dims = self._with_defaults(shape)
        s, kv = dims["s"], dims["kv"]
        scores = s * kv
        if dims["causal"] and dims["lower_right"]:
            scores = s * (kv - s) + s * s / 2
        elif dims["causal"]:
            scores = min(s, kv) ** 2 / 2 + max(0, s - kv) * kv
        return 4.0 * dims["b"] * dims["h"] * scores * dims["d"]

    def bytes_moved(self, shape: ProblemShape) -> float:
        """Q and O (H heads, S rows), K and V (h_kv heads, kv rows), two bytes a value."""
        dims = self._with_defaults(shape)
        return 2.0 * 2 * dims["b"] * (dims["h"] * dims["s"] + dims["h_kv"] * dims["kv"]) * dims["d"]


FAMILY = FlashCore()
