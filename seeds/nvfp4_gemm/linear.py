"""An ``nn.Linear`` on NVFP4: its weight quantised once (formats.quantize), each call's activations quantised the
same way, the product by the op's ``gemm`` (an evolved kernel, or PyTorch's dequantisation + matmul), the bias
added in the activations' dtype.

Needs torch: `evo export` ships it as nvfp4_linear.py. No backward: a call whose input or weight requires a
gradient (with grad mode on) raises, rather than return a result that autograd cannot see through.
"""

from __future__ import annotations

from typing import Callable

import torch

if __package__:  # seeds.nvfp4_gemm.linear, inside evo
    from evo.seeds.nvfp4_gemm import formats
else:  # an exported package's nvfp4_linear.py, with nvfp4_formats.py beside it
    import nvfp4_formats as formats


class NVFP4Linear(torch.nn.Module):
    """``linear`` (an nn.Linear with K a multiple of 16) with its weight held as NVFP4; ``gemm(a, b, sfa, sfb)``
    the op's public function."""

    def __init__(self, gemm: Callable, linear: torch.nn.Linear) -> None:
        super().__init__()
        if linear.in_features % formats.SCALE_GROUP:
            raise ValueError(f"NVFP4Linear: in_features must be a multiple of {formats.SCALE_GROUP}, not "
                             f"{linear.in_features}")
        self.gemm, self.in_features, self.out_features = gemm, linear.in_features, linear.out_features
        packed, scales = formats.quantize(linear.weight.detach())
        self.register_buffer("weight_packed", packed)
        self.register_buffer("weight_scales", scales)
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone(),
                                                                         requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and x.requires_grad:
            raise RuntimeError("NVFP4Linear has no backward: its input requires a gradient (run it under "
                               "torch.no_grad(), or train with the bf16 nn.Linear)")
        rows = x.reshape(-1, self.in_features)
        packed, scales = formats.quantize(rows)
        out = self.gemm(packed, self.weight_packed, scales, self.weight_scales).to(x.dtype)
        if self.bias is not None:
            out += self.bias.to(x.dtype)
        return out.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
