"""FlashCore's op as a drop-in where models call attention: SDPA's signature (``sdpa``, the op's
scaled_dot_product_attention bound to it; ``causal_mask`` reads the masks it takes), a context in which
torch's own SDPA is the op's (timm's attention calls it), and transformers' attention function with its
registration.

Needs torch (transformers only when its functions are called): `evo export` ships it as flashcore_dropin.py.
"""

from __future__ import annotations

import contextlib

import torch


def causal_mask(attn_mask, is_causal: bool, query, key) -> tuple[bool, bool] | None:
    """(causal, lower_right) for an SDPA call's mask arguments the kernels compute: no mask (is_causal: the top
    left), or torch.nn.attention.bias's causal_upper_left / causal_lower_right of the call's query and key
    lengths; None for any other mask."""
    if attn_mask is None:
        return bool(is_causal), False
    from torch.nn.attention.bias import CausalBias, CausalVariant

    if not (isinstance(attn_mask, CausalBias) and isinstance(query, torch.Tensor) and isinstance(key, torch.Tensor)):
        return None
    if not is_causal and (attn_mask.seq_len_q, attn_mask.seq_len_kv) == (query.shape[-2], key.shape[-2]):
        return True, attn_mask.variant == CausalVariant.LOWER_RIGHT
    return None


def surfaces(sdpa) -> dict:
    """The names the exported module adds for ``sdpa``."""

    @contextlib.contextmanager
    def patched_sdpa():
        """Inside it, torch.nn.functional.scaled_dot_product_attention is this op's (what no kernel takes
        still runs PyTorch's own)."""
        saved = torch.nn.functional.scaled_dot_product_attention
        torch.nn.functional.scaled_dot_product_attention = sdpa
        try:
            yield
        finally:
            torch.nn.functional.scaled_dot_product_attention = saved

    def transformers_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                               is_causal=None, **kwargs):
        """transformers' attention function (its sdpa's, with this op's SDPA where no mask, dropout, bias or
        softcap asks for more; those calls run transformers' own sdpa_attention_forward)."""
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        extra = any(kwargs.get(name) is not None for name in ("position_bias", "softcap", "s_aux"))
        if attention_mask is not None or dropout != 0.0 or extra or kwargs.get("output_attentions"):
            return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                          is_causal=is_causal, **kwargs)
        q_length, kv_length = query.shape[2], key.shape[2]
        causal = q_length > 1 and (is_causal if is_causal is not None else getattr(module, "is_causal", True))
        if causal and kv_length > q_length:  # an empty static cache's prefill, as transformers crops it
            key, value = key[:, :, :q_length], value[:, :, :q_length]
        out = sdpa(query, key, value, scale=scaling, is_causal=causal,
                   enable_gqa=getattr(module, "num_key_value_groups", 1) > 1)
        return out.transpose(1, 2).contiguous(), None

    def register_with_transformers(name: str = "evo") -> str:
        """Registers the op as transformers' attention ``name`` (with sdpa's masks): load a model with
        attn_implementation=name, or model.set_attn_implementation(name)."""
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

        AttentionInterface.register(name, transformers_attention)
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, sdpa_mask)
        return name

    return dict(scaled_dot_product_attention=sdpa, patched_sdpa=patched_sdpa,
                transformers_attention=transformers_attention, register_with_transformers=register_with_transformers)
