"""vit_gemm's op inside timm's vision transformers: a PatchEmbed that runs the projection as unfold + the
op's GEMM with the bias and the patches' position embedding in its epilogue, and ``fuse_into_timm``, which
puts it into a timm VisionTransformer (whose own position-embedding step then only adds the class token's).

Needs torch only (timm's modules are read, not imported): `evo export` ships it as vit_gemm_timm.py;
``embed(x, w, bias, pos)`` is the package's patch_embed.
"""

from __future__ import annotations

import types
from typing import Callable

import torch


class PatchEmbed(torch.nn.Module):
    """A timm PatchEmbed (``source``: a Conv2d of stride = kernel = patch size, no norm) as unfold + GEMM +
    bias + ``pos`` ([P, N], the patches' position embedding, added here): images [B, C, H, W] in, patches
    [B, P, N] out, sharing ``source``'s parameters."""

    def __init__(self, embed: Callable, source: torch.nn.Module, pos: Callable[[], torch.Tensor]) -> None:
        super().__init__()
        conv = source.proj
        if (tuple(conv.kernel_size) != tuple(conv.stride) or tuple(conv.padding) != (0, 0) or conv.groups != 1
                or tuple(conv.dilation) != (1, 1) or conv.bias is None):
            raise ValueError("PatchEmbed: the projection must be a Conv2d with stride = kernel, no padding or groups, "
                             "and a bias")
        if not isinstance(getattr(source, "norm", torch.nn.Identity()), torch.nn.Identity) or not getattr(source, "flatten", True):
            raise ValueError("PatchEmbed: a patch embedding with a norm or without flattening is not fused")
        self.embed, self.proj, self.pos = embed, conv, pos
        self.patch_size, self.img_size = tuple(conv.kernel_size), getattr(source, "img_size", None)
        self.num_patches = getattr(source, "num_patches", None)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        b, c, h, w = images.shape
        ph, pw = self.patch_size
        patches = (images.reshape(b, c, h // ph, ph, w // pw, pw).permute(0, 2, 4, 1, 3, 5)
                   .reshape(b, (h // ph) * (w // pw), c * ph * pw))
        weight = self.proj.weight.reshape(self.proj.weight.shape[0], -1)
        return self.embed(patches.to(weight.dtype), weight, self.proj.bias, self.pos())


def fuse_into_timm(embed: Callable, model: torch.nn.Module) -> torch.nn.Module:
    """``model`` (a timm VisionTransformer, changed in place and returned) with its patch embedding, bias and
    patches' position embedding in one call of the op; its class and register tokens get theirs as before."""
    if getattr(model, "dynamic_img_size", False) or getattr(model, "pos_embed", None) is None:
        raise ValueError("fuse_into_timm: a VisionTransformer with a fixed image size and a learned pos_embed")
    prefix = 0 if model.no_embed_class else model.num_prefix_tokens
    model.patch_embed = PatchEmbed(embed, model.patch_embed, lambda: model.pos_embed[0, prefix:])

    def _pos_embed(self, x: torch.Tensor) -> torch.Tensor:
        tokens = [t.expand(x.shape[0], -1, -1) for t in (self.cls_token, self.reg_token) if t is not None]
        if tokens and prefix:
            tokens = [torch.cat(tokens, dim=1) + self.pos_embed[:, :prefix]]
        return self.pos_drop(torch.cat([*tokens, x], dim=1) if tokens else x)

    model._pos_embed = types.MethodType(_pos_embed, model)
    return model
