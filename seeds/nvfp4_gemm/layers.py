"""nvfp4_gemm's problem shapes: one GEMM's shape, and the ``llm_layers`` workload of real LLM layers' weights at
the token counts of decoding and of prefill chunks."""

from __future__ import annotations

from evo.seeds._family import shape
from evo.seeds._workload import workload


def gemm_shape(name: str, l: int, m: int, n: int, k: int, *, blocked: bool = False, mission: bool = False):
    return shape(name, l=l, m=m, n=n, k=k, blocked=int(blocked), mission=mission)


# (N, K) of real layers' weights, at the token counts M of decoding (1, 16) and of prefill chunks (128, 512)
LAYERS = ((7168, 16384), (4096, 7168), (7168, 2048), (14336, 4096), (3072, 4096))
# Llama-3-70B on one GPU (its weights fit in NVFP4): the down projection, the fused q/k/v and the output projection
LAYERS_70B = ((8192, 28672), (10240, 8192), (8192, 8192))
# MoE experts at decode, one batch an active expert, each with a few tokens (or a prefill chunk's share):
# Mixtral-8x7B's experts (up 14336 x 4096, down 4096 x 14336), 2 of 8 active, and Qwen3-30B-A3B's (fused gate/up
# 1536 x 2048, down 2048 x 768), 8 of 128 active
EXPERTS = ((8, 14336, 4096, (2, 16)), (8, 4096, 14336, (2, 16)), (8, 1536, 2048, (4, 64)), (8, 2048, 768, (4, 64)))


def _layer_shapes():
    shapes = [gemm_shape(f"m{m}_n{n}_k{k}_{'blocked' if blocked else 'plain'}", 1, m, n, k, blocked=blocked)
              for n, k in LAYERS for m in (1, 16, 128, 512) for blocked in (False, True)]
    shapes += [gemm_shape(f"m{m}_n{n}_k{k}_plain", 1, m, n, k) for n, k in LAYERS_70B for m in (1, 16, 128, 512)]
    shapes += [gemm_shape(f"experts{l}_m{m}_n{n}_k{k}_plain", l, m, n, k) for l, n, k, ms in EXPERTS for m in ms]
    return [(s, 1.0) for s in shapes]


WORKLOADS = (workload("llm_layers", "NVFP4 linear layers of LLMs: (N, K) in (7168, 16384), (4096, 7168), (7168, 2048), "
                      "(14336, 4096), (3072, 4096) at M = 1, 16, 128, 512 tokens, with plain and with blocked scales; "
                      "Llama-3-70B's (8192, 28672), (10240, 8192), (8192, 8192) at the same M, plain; MoE experts as "
                      "batches of 8 (Mixtral-8x7B's (14336, 4096) and (4096, 14336) at M = 2 and 16 a batch, "
                      "Qwen3-30B-A3B's (1536, 2048) and (2048, 768) at M = 4 and 64); every shape weighs 1",
                      _layer_shapes()),)
