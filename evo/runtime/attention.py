"""What attention families' exported ops share: PyTorch's own backward of SDPA as the op's gradient.

Imports torch only (part of evo.runtime, shipped whole as evo_runtime/).
"""

from __future__ import annotations

import torch

_SDPA = torch.nn.functional.scaled_dot_product_attention  # PyTorch's, kept before any patching
GRADIENT_SCHEMA = "(Tensor grad, Tensor q, Tensor k, Tensor v, bool causal) -> (Tensor, Tensor, Tensor)"
# with the causal mask's alignment: the top left (SDPA's is_causal) or the lower right (lower_right)
ALIGNED_GRADIENT_SCHEMA = ("(Tensor grad, Tensor q, Tensor k, Tensor v, bool causal, bool lower_right=False) -> "
                           "(Tensor, Tensor, Tensor)")


CAUSAL_ARGUMENTS = (False, True, "top_left", "lower_right")  # what an attention op's public causal may be


def causal_alignment(causal) -> tuple[bool, bool]:
    """(causal, lower_right) for a public function's ``causal``: False, True or "top_left" (SDPA's is_causal), or
    "lower_right"; ValueError naming the argument for anything else."""
    if causal not in CAUSAL_ARGUMENTS:
        raise ValueError(f"causal must be False, True, 'top_left' or 'lower_right', not {causal!r}")
    return bool(causal), causal == "lower_right"


def boolean_causal_mask(queries: int, keys: int, lower_right: bool, device) -> torch.Tensor:
    """The causal mask as a boolean [queries, keys] tensor (True: seen): query i sees keys 0..i, or with
    ``lower_right`` 0..keys - queries + i."""
    return torch.ones(queries, keys, dtype=torch.bool, device=device).tril(keys - queries if lower_right else 0)


def every_query_sees_a_key(queries: int, keys: int, lower_right: bool) -> bool:
    """A causal mask aligned to the lower right leaves a query no key where there are fewer keys than queries."""
    return not lower_right or keys >= queries


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, lower_right: bool = False, *,
         scale: float | None = None, enable_gqa: bool | None = None) -> torch.Tensor:
    """PyTorch's SDPA for q [B, H, Q, D] over k, v [B, H_kv, KV, D], K/V heads grouped where they are fewer (or as
    ``enable_gqa`` says); causal aligned to the top left (SDPA's is_causal: query token i sees keys 0..i) or, with
    ``lower_right``, to the lower right (i sees keys 0..KV - Q + i: the queries are the last Q positions, as in
    chunked prefill), through torch.nn.attention.bias.causal_lower_right; under torch.compile (which cannot trace
    that mask's making) the same mask as a boolean tensor."""
    grouped = k.shape[1] != q.shape[1] if enable_gqa is None else enable_gqa
    if causal and lower_right and q.shape[-2] != k.shape[-2]:
        if torch.compiler.is_compiling():
            mask = boolean_causal_mask(q.shape[-2], k.shape[-2], True, q.device)
        else:
            from torch.nn.attention.bias import causal_lower_right

            # (the mask's own dispatch takes grouped heads: flash attention reads each K/V head once, no copies)
            mask = causal_lower_right(q.shape[-2], k.shape[-2])
        return _SDPA(q, k, v, attn_mask=mask, scale=scale, enable_gqa=grouped)
    return _SDPA(q, k, v, is_causal=bool(causal), scale=scale, enable_gqa=grouped)


def sdpa_gradient(grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                  lower_right: bool = False):
    """dq, dk, dv: PyTorch's own backward of SDPA (its forward recomputed) at the op's inputs, K/V heads grouped
    where k and v have fewer, the causal mask aligned as ``sdpa`` aligns it (the op runs this with autograd on)."""
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    return tuple(torch.autograd.grad(sdpa(*leaves, causal, lower_right), leaves, grad))


def sdpa_gradient_fake(grad, q, k, v, causal, lower_right=False):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
