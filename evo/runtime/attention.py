"""What attention families' exported ops share: PyTorch's own backward of SDPA as the op's gradient.

Imports torch only (part of evo.runtime, shipped whole as evo_runtime/).
"""

from __future__ import annotations

import torch

_SDPA = torch.nn.functional.scaled_dot_product_attention  # PyTorch's, kept before any patching
GRADIENT_SCHEMA = "(Tensor grad, Tensor q, Tensor k, Tensor v, bool causal) -> (Tensor, Tensor, Tensor)"


def sdpa_gradient(grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool):
    """dq, dk, dv: PyTorch's own backward of SDPA (its forward recomputed) at the op's inputs, K/V heads grouped
    where k and v have fewer (the op runs this with autograd on)."""
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = _SDPA(*leaves, is_causal=bool(causal), enable_gqa=k.shape[1] != q.shape[1])
    return tuple(torch.autograd.grad(out, leaves, grad))


def sdpa_gradient_fake(grad, q, k, v, causal):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
