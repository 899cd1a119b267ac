"""Prefill on a cached prefix at the cost of the suffix (issue 30, item 4).

With a cached prefix of P tokens, a suffix of S tokens attends to P + S keys under a
bottom-right causal mask. transformers then builds that mask explicitly and PyTorch's CPU
kernel computes every query-key block of the masked rectangle (and the mask itself costs time);
its `is_causal` fast path assumes top-left alignment, which is wrong when P > 0. Here the
attention is split exactly: the suffix's queries against the prefix's keys with no mask at
all, and against the suffix's own keys with `is_causal` (aligned, since both are S long); the
two partial results are merged with their log-sum-exps (the online-softmax merge of flash
attention). A long suffix goes in blocks of BLOCK query rows, each attending every earlier key
unmasked and its own block causally: the CPU kernel's causal mode computes whole key blocks
along the diagonal and is then slower per score than its unmasked mode, so the causal part is
kept small (about 7% off one stateful prompt's prefill on the tiny model, 2 loaded cores). The
result is the masked attention's up to float rounding (about 1e-7 in float32;
tests/test_choices.py checks tokens and scores).

It is registered as the attention implementation "prefix_sdpa" (transformers'
AttentionInterface) with a mask function that skips building the mask only where the split
applies: no padding mask was given (the unpadded calls of the hf backend: prefix computation,
choice scoring's length groups, the lean decode loop). Every other call (generate with a padding
mask, sliding windows) builds the mask sdpa would and runs transformers' sdpa unchanged. CPU
only: the merge needs the kernel's log-sum-exp, which the CPU flash kernel returns."""

from __future__ import annotations

from typing import Any

NAME = "prefix_sdpa"
BLOCK = 256  # query rows per block (module docstring)
_registered = False


def prefix_sdpa_mask(*args: Any, **kwargs: Any) -> Any:
    """None (no mask: the attention function knows it is bottom-right causal) when no padding
    mask was given and the mask is plain causal; sdpa's mask otherwise."""
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    if (
        kwargs.get("attention_mask") is None
        and kwargs.get("local_size") is None
        and kwargs.get("mask_function", causal_mask_function) is causal_mask_function
        and not args
    ):
        return None
    return sdpa_mask(*args, **kwargs)


def prefix_sdpa_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers' sdpa, except for a suffix on a cached prefix without a mask (module
    docstring): query [B, H, S, D], key/value [B, Hkv, P + S, D]; returns [B, S, H, D]."""
    import torch
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    s, total = query.shape[2], key.shape[2]
    if (
        attention_mask is not None
        or s == 1
        or s >= total
        or query.device.type != "cpu"
        or dropout
        or kwargs.get("position_bias") is not None
        or kwargs.get("softcap") is not None
        or not getattr(module, "is_causal", True)
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    p = total - s
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    out = query.new_empty(query.shape[0], s, query.shape[1], query.shape[3])  # [B, S, H, D]
    for s0 in range(0, s, BLOCK):  # query blocks: all earlier keys unmasked, own block causal
        s1 = min(s, s0 + BLOCK)
        q = query[:, :, s0:s1]
        past, lse_past = flash(q, key[:, :, : p + s0], value[:, :, : p + s0], scale=scaling)[:2]
        own, lse_own = flash(
            q,
            key[:, :, p + s0 : p + s1],
            value[:, :, p + s0 : p + s1],
            is_causal=True,
            scale=scaling,
        )[:2]
        top = torch.maximum(lse_past, lse_own)
        w_past = (lse_past - top).exp().unsqueeze(-1)
        w_own = (lse_own - top).exp().unsqueeze(-1)
        merged = (past * w_past + own * w_own) / (w_past + w_own)
        out[:, s0:s1] = merged.to(query.dtype).transpose(1, 2)
    return out, None


def register() -> str:
    """Register "prefix_sdpa" with transformers (once); its name."""
    global _registered
    if not _registered:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface

        AttentionInterface.register(NAME, prefix_sdpa_attention)
        AttentionMaskInterface.register(NAME, prefix_sdpa_mask)
        _registered = True
    return NAME
