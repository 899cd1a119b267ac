"""Prefill on a cached prefix at the cost of the suffix.

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
tests/consultants/test_choices.py checks tokens and scores).

It is registered as the attention implementation "prefix_sdpa" (transformers'
AttentionInterface) with a mask function that skips building the mask only where the split
applies: no padding mask was given (the unpadded calls of the hf backend: prefix computation,
choice scoring's length groups, the lean decode loop). Every other call (generate with a padding
mask, sliding windows) builds the mask sdpa would and runs transformers' sdpa unchanged. CPU
only: the merge needs the kernel's log-sum-exp, which the CPU flash kernel returns.

Fully masked query rows are zeroed (`zero_masked_rows`) wherever sdpa runs with a mask, here and
in "masked_sdpa" (sdpa plus that zeroing, what the hf backend takes on an accelerator): the pad
rows of a left-padded prefill attend to no key, and some GPU kernels (cuDNN, the default for
sdpa on H100/H200 since torch 2.11) return NaN for such a row where torch's CPU kernels return 0.
In the hybrid Qwen3.5 a NaN in a pad row survives the pad-state masking of the next
linear-attention layer (NaN x 0 = NaN) and enters its recurrent state, and every later token of
the row; attention layers would spread it through the pad keys' values. Zeroed, a pad row's
output is what the CPU kernels give, and the real rows never read it
(tests/consultants/test_finite.py)."""

from __future__ import annotations

from typing import Any

NAME = "prefix_sdpa"
MASKED = "masked_sdpa"  # sdpa with fully masked query rows zeroed (module docstring)
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
    docstring): query [B, H, S, D], key/value [B, Hkv, P + S, D]; returns [B, S, H, D].
    `choice_branches=(n, lengths)` (choice scoring's folded forward, `branched_attention`): the
    first n query rows are the suffix, the rest are branches of those lengths, each after the
    whole suffix and blind to the others."""
    from transformers.integrations.sdpa_attention import repeat_kv

    branches = kwargs.pop("choice_branches", None)
    s, total = query.shape[2], key.shape[2]
    plain = (
        attention_mask is None
        and query.device.type == "cpu"
        and not dropout
        and kwargs.get("position_bias") is None
        and kwargs.get("softcap") is None
        and getattr(module, "is_causal", True)
    )
    if branches is not None and not plain:
        raise ValueError(
            "choice_branches needs the unmasked CPU attention of prefix_sdpa (no attention mask, "
            "no dropout, softcap or position bias)"
        )
    if branches is None and (not plain or s == 1 or s >= total):
        return masked_sdpa_attention(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    if branches is None:
        return _suffix(query, key, value, total - s, scaling).to(query.dtype), None
    n, lengths = branches
    p = total - s  # the cache before this forward
    out = query.new_empty(query.shape[0], s, query.shape[1], query.shape[3])
    out[:, :n] = _suffix(query[:, :, :n], key[:, :, : p + n], value[:, :, : p + n], p, scaling)
    out[:, n:] = branched_attention(
        query[:, :, n:],
        key[:, :, : p + n],
        value[:, :, : p + n],
        key[:, :, p + n :],
        value[:, :, p + n :],
        lengths,
        scaling,
    )
    return out.to(query.dtype), None


def masked_sdpa_attention(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, *args: Any, **kwargs: Any
) -> tuple[Any, None]:
    """transformers' sdpa with the query rows its mask allows no key zeroed (`zero_masked_rows`):
    [B, S, H, D]. The other arguments (dropout, scaling, is_causal, ...) are sdpa's, passed on
    as given."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    out, weights = sdpa_attention_forward(
        module, query, key, value, attention_mask, *args, **kwargs
    )
    return zero_masked_rows(out, attention_mask), weights


def zero_masked_rows(out: Any, attention_mask: Any) -> Any:
    """sdpa's output `out` [B, S, H, D] with every query row that `attention_mask` [B|1, H|1, S, T]
    (boolean: True = attend; or additive float: its dtype's minimum or -inf = masked) allows no
    key set to 0, whatever the kernel returned there (NaN on cuDNN; module docstring). No device
    sync: a masked fill. A single query row (decoding) always sees its own key: returned as is."""
    import torch

    if attention_mask is None or out.shape[1] == 1 or attention_mask.dim() != 4:
        return out
    if attention_mask.dtype == torch.bool:
        dead = ~attention_mask.any(-1)
    else:
        dead = (attention_mask <= torch.finfo(attention_mask.dtype).min).all(-1)
    return out.masked_fill(dead.transpose(1, 2).unsqueeze(-1), 0.0)  # [B|1, S, H|1, 1]


def _suffix(query: Any, key: Any, value: Any, p: int, scaling: float) -> Any:
    """Bottom-right causal attention of query [B, H, S, D] on key/value [B, H, p + S, D], in
    blocks of BLOCK query rows; [B, S, H, D]."""
    import torch

    s = query.shape[2]
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    out = query.new_empty(query.shape[0], s, query.shape[1], query.shape[3])
    for s0 in range(0, s, BLOCK):  # query blocks: all earlier keys unmasked, own block causal
        s1 = min(s, s0 + BLOCK)
        q = query[:, :, s0:s1]
        parts = []
        if p + s0 > 0:
            parts.append(flash(q, key[:, :, : p + s0], value[:, :, : p + s0], scale=scaling)[:2])
        kv = (key[:, :, p + s0 : p + s1], value[:, :, p + s0 : p + s1])
        parts.append(flash(q, *kv, is_causal=True, scale=scaling)[:2])
        out[:, s0:s1] = _merge(parts).transpose(1, 2)
    return out


def branched_attention(
    query: Any, key: Any, value: Any, own_key: Any, own_value: Any, lengths: Any, scaling: float
) -> Any:
    """Branches after a shared context (choice scoring: every action's tokens after the same
    prompt): query/own_key/own_value [B, H, sum(lengths), D], the branches one after the other;
    each row attends to every context key (key/value [B, H, C, D]) and causally to its own
    branch's earlier rows, never to another branch. [B, sum(lengths), H, D]."""
    import torch

    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    past = flash(query, key, value, scale=scaling)[:2]
    m = query.shape[2]
    branch = torch.repeat_interleave(
        torch.arange(len(lengths), device=query.device),
        torch.as_tensor(list(lengths), device=query.device),
    )
    index = torch.arange(m, device=query.device)
    allowed = (branch[:, None] == branch[None, :]) & (index[None, :] <= index[:, None])
    scores = torch.matmul(query, own_key.transpose(-1, -2)).float() * scaling
    scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    own = torch.matmul(torch.exp(scores - lse.unsqueeze(-1)).to(own_value.dtype), own_value)
    return _merge([past, (own, lse)]).transpose(1, 2)


def _merge(parts: list[tuple[Any, Any]]) -> Any:
    """Attention outputs [B, H, S, D] over disjoint key sets, with their log-sum-exps [B, H, S],
    merged into the attention over all of them (the online-softmax merge)."""
    import torch

    if len(parts) == 1:
        return parts[0][0]
    top = parts[0][1]
    for _, lse in parts[1:]:
        top = torch.maximum(top, lse)
    weights = [(lse - top).exp().unsqueeze(-1) for _, lse in parts]
    num = sum(out * w for (out, _), w in zip(parts, weights, strict=True))
    return num / sum(weights)


def register(device_type: str = "cpu") -> str:
    """Register "prefix_sdpa" and "masked_sdpa" with transformers (once); the name for a model on
    `device_type`: prefix_sdpa on a CPU (its split needs the CPU flash kernel), masked_sdpa on an
    accelerator. Both zero fully masked query rows (`zero_masked_rows`)."""
    global _registered
    if not _registered:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(NAME, prefix_sdpa_attention)
        AttentionMaskInterface.register(NAME, prefix_sdpa_mask)
        AttentionInterface.register(MASKED, masked_sdpa_attention)
        AttentionMaskInterface.register(MASKED, sdpa_mask)
        _registered = True
    return NAME if device_type == "cpu" else MASKED


def install(model: Any) -> None:
    """Give a model that runs transformers' sdpa the suite's attention (`register`):
    "prefix_sdpa" on a CPU, where a suffix on a cached prefix is prefilled without the masked
    rectangle and every other call is sdpa's; "masked_sdpa", sdpa itself, on an accelerator.
    Both zero the fully masked query rows of a left-padded batch, which some GPU kernels return
    as NaN. Any other implementation (eager, flash attention) is left as it is."""
    if getattr(model.config, "_attn_implementation", None) == "sdpa":
        model.set_attn_implementation(register(model.device.type))
