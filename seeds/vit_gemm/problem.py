"""vit_gemm's problem on the host: random inputs, the float32 reference and the eager torch form.

Needs torch only: the family uses it, and `evo export` ships it beside an exported kernel as
vit_gemm_problem.py, so the self-check draws its inputs and checks against the same reference as
the search did. ``s`` is a shape with m, n, k and p (a ProblemShape or a plain dict).
"""

from __future__ import annotations

from typing import Mapping


def random_inputs(s: Mapping, generator) -> tuple:
    """(a, w, bias, pos, bias16, pos16) on the generator's device: a [M, K] and w [N, K] bf16 (w scaled
    by 1/sqrt(K), so C's values are a few units), bias [N] and pos [P, N] fp32, and bias and pos in
    bf16 for the eager anchors, which add them as a model keeping its parameters in bf16 would."""
    import torch

    m, n, k, p = s["m"], s["n"], s["k"], s["p"]
    options = dict(generator=generator, device=generator.device)
    a = torch.randn(m, k, **options).to(torch.bfloat16)
    w = (torch.randn(n, k, **options) / k ** 0.5).to(torch.bfloat16)
    bias = torch.randn(n, **options)
    pos = torch.randn(p, n, **options)
    return a, w, bias, pos, bias.to(torch.bfloat16), pos.to(torch.bfloat16)


def reference(s: Mapping, inputs):
    """C in float32: a @ w^T + bias + pos, each row b * P + p adding pos[p]."""
    a, w, bias, pos = inputs[:4]
    out = a.float() @ w.float().t() + bias
    return (out.view(-1, s["p"], s["n"]) + pos).view(s["m"], s["n"])


def eager(s: Mapping, inputs):
    """Eager PyTorch: the bf16 matmul, then + bias and + pos in bf16."""
    a, w, bias16, pos16 = inputs[0], inputs[1], inputs[4], inputs[5]
    out = a @ w.t() + bias16
    return (out.view(-1, s["p"], s["n"]) + pos16).view(s["m"], s["n"])


def fallback(s: Mapping, inputs):
    """PyTorch's fastest eager form of the whole result, what a workload's op runs where no evolved
    kernel beats it: cuBLAS's matmul with the bias in its epilogue (addmm, as nn.Linear), then + pos,
    in bf16 (bias and pos kept in bf16, as a bf16 model keeps them)."""
    import torch

    a, w, bias16, pos16 = inputs[0], inputs[1], inputs[4], inputs[5]
    out = torch.addmm(bias16, a, w.t())
    out.view(-1, s["p"], s["n"]).add_(pos16)
    return out
