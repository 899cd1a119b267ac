"""Prefix reuse for the hf backend (`prefix_cache`: LRU entries, 0 = off). The key/value cache of a prompt prefix is
computed once (batch 1, unpadded) and kept: the chat-templated messages before the last one (the
system message of every prompt variant) are the stored prefix, reused across the queries of a
batch and across steps; a batch that shares more than that (the longest common token prefix)
computes the rest once per batch on a copy. Generation then gets, per row, the prefix, then left
padding, then the row's own suffix: `[prefix | pad ... pad | suffix]`, attention mask 0 on the
padding. Positions come from the mask (transformers' cumsum), so each row sees exactly the
positions and keys of its unpadded prompt. A copy of the stored cache, repeated over the batch, is
passed to `generate`, which computes only the suffixes. Greedy answers are token for token those
of the plain left-padded path (tests/consultants/test_prefix.py: the tiny model, batched and
unbatched, thinking phases included). Which models use it (`prefix_reuse_mode`): a cache of plain
full-attention layers takes the layout above ("padded"). A hybrid cache (Qwen3.5, Qwen3-Next:
Gated-DeltaNet layers, whose cache is a recurrent state and a conv window, beside full attention)
cannot: padding after the prefix is not exact for a recurrent layer. transformers zeroes a padded
position's input, but the state still decays there (the gate depends on a bias, not only on the
input) and the conv window still mixes the prefix's last tokens into it; plain left padding is
exact only because the state is zero before any real token. So ("unpadded") rows of equal length
take `[prefix | suffix]` with no padding, and rows of different lengths (`stacked_cache`) run
their own tokens but the last on a copy of the prefix, each length group as one unpadded batch;
the copies are stacked into one batch cache in the plain left-padded layout (attention keys and
values padded on the left and masked; recurrent and conv states carry no positions), and
`generate` computes each row's last token (tests/consultants/test_hybrid_prefix.py: a tiny Qwen3.5).
Models with sliding-window layers take the plain path. The stored batch-1 cache is expanded to a
batch with transformers' `Cache.reorder_cache` (index 0 repeated), which every layer kind
implements. Memory: an entry holds the prefix's keys and values (layers x kv heads x head dim x 2 x
dtype bytes per token; about 28 kB per token for Qwen2.5-1.5B in bf16) plus, for a hybrid model, one
recurrent and one conv state per linear layer (independent of the prefix's length).
`prefill_stats()` counts prompt positions computed, with and without reuse. The stacked path
runs one forward per distinct row length; batching "padded" (`resolve_batching`, a GPU's
default) therefore gives a hybrid model's rows of different lengths no prefix and one plain
left-padded forward instead."""

from __future__ import annotations

import copy
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from benchmark.consultants.attention import NAME as PREFIX_SDPA
from benchmark.consultants.errors import ConsultantError
from benchmark.consultants.runtime import chat_prompt

DEFAULT_PREFIX_CACHE = 8  # prompt prefixes whose key/value caches are kept (module docstring)
# How rows of different prompt lengths share a forward (`slm.backend.batching`; docs/performance.md):
# "padded" = one left-padded batch, "by_length" = one unpadded batch per length, "auto" = by device
BATCHING = ("auto", "padded", "by_length")


@dataclass
class Prompt:
    """A query's prompt ids, the length of its stable prefix (the templated messages before the
    last one; 0 when none) and its sampling seed (None when greedy)."""

    ids: list[int]
    anchor: int = 0
    seed: int | None = None


class PrefixCache:
    """An LRU of key/value caches of token prefixes (batch 1), keyed by the prefix's ids."""

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self.entries: OrderedDict[tuple[int, ...], Any] = OrderedDict()

    def longest(self, ids: list[int], limit: int) -> tuple[int, Any]:
        """(length, cache) of the longest entry that is a prefix of ids[:limit]; (0, None)."""
        best: tuple[int, Any] = (0, None)
        for key in self.entries:
            n = len(key)
            if best[0] < n <= limit and tuple(ids[:n]) == key:
                best = (n, key)
        if best[1] is None:
            return 0, None
        self.entries.move_to_end(best[1])
        return best[0], self.entries[best[1]]

    def put(self, ids: list[int], cache: Any) -> None:
        if self.capacity <= 0:
            return
        self.entries[tuple(ids)] = cache
        self.entries.move_to_end(tuple(ids))
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)

    def clear(self) -> None:
        self.entries.clear()


def prefix_reuse_mode(model: Any) -> str | None:
    """How the model's cache can take a reused prefix (module docstring): "padded" when every
    layer is plain full attention (padding between prefix and suffix is masked out exactly),
    "unpadded" when linear-attention layers (recurrent and conv states) stand beside full
    attention (no padding may follow the prefix: `PrefixReuse.stacked_cache`), None otherwise
    (sliding windows, encoder-decoders, architectures transformers' DynamicCache cannot
    describe)."""
    from transformers import DynamicCache
    from transformers.cache_utils import (
        DynamicLayer,
        LinearAttentionAndFullAttentionLayer,
        LinearAttentionLayer,
    )

    if getattr(model.config, "is_encoder_decoder", False):
        return None
    try:
        cache = DynamicCache(config=model.config)
    except Exception:  # noqa: BLE001 - an architecture transformers cannot describe: no reuse
        return None
    kinds = {type(layer) for layer in cache.layers}
    if kinds == {DynamicLayer}:
        return "padded"
    linear = {LinearAttentionLayer, LinearAttentionAndFullAttentionLayer}
    if kinds and kinds <= {DynamicLayer, *linear}:
        return "unpadded"
    return None


def resolve_batching(setting: Any, device_type: str) -> str:
    """`slm.backend.batching` on a device: "padded" or "by_length". `auto` takes "padded" on an
    accelerator, where a small forward is launch-bound and one forward per step for the whole
    batch should beat one per prompt length (not measured here), and "by_length" on a CPU, where
    the work is per token: there the unpadded groups skip the padding, take the unmasked
    attention kernel and (hybrid models) the stored prefix, and were about twice as fast on the
    tiny models (docs/performance.md, "Batching across prompt lengths")."""
    if setting not in BATCHING:
        raise ConsultantError(f"slm.backend.batching={setting!r} is not one of {list(BATCHING)}")
    if setting == "auto":
        return "by_length" if device_type == "cpu" else "padded"
    return str(setting)


def left_padded(seqs: list[list[int]], p: int, pad_id: int) -> tuple[Any, Any]:
    """(ids, mask) [n, width] of rows laid out `[prefix | pad ... pad | suffix]` (the first `p`
    tokens shared; p = 0: plain left padding), mask 0 on the padding."""
    import torch

    n, width = len(seqs), max(len(s) for s in seqs)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, width - len(s) + p :] = torch.tensor(s[p:], dtype=torch.long)
        mask[r, width - len(s) + p :] = 1
        if p:
            ids[r, :p] = torch.tensor(s[:p], dtype=torch.long)
            mask[r, :p] = 1
    return ids, mask


def mask_positions(mask: Any) -> Any:
    """Each position's index among its row's real tokens (padding: 1), as `generate` derives
    position ids from the attention mask."""
    return (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)


def next_positions(mask: Any, k: int) -> Any:
    """Position ids [n, k] of `k` tokens appended to left-padded rows whose attention `mask`
    [n, width] already covers them (the last k columns): each row's count of real tokens before
    them, onwards."""
    import torch

    before = mask[:, :-k].sum(-1, keepdim=True)
    return before + torch.arange(k, device=mask.device)


class PrefixReuse:
    """The prefill of the hf backend: prompts computed on a stored or shared prefix (module
    docstring), one part of the backend, built on its `ModelRuntime`
    (benchmark.consultants.runtime), whose prefill counters it adds to. Choice scoring and the
    lean loop prefill through `prefill_groups`; `generate` takes `shared_prefix` and
    `stacked_cache`.

    Settings it holds, each readable and settable (the benches switch them on a live backend):
    `cache` (the PrefixCache; capacity 0 = off), `batching` ("padded" or "by_length", resolved
    for the model's device), `reuse_mode` (`prefix_reuse_mode`) and `folds_choices` (choice
    scoring's actions computed in the prefill's own forward)."""

    def __init__(self, runtime: Any, capacity: int, batching: str = "auto") -> None:
        """`capacity`: stored prefixes (`slm.backend.prefix_cache`); `batching`: the setting
        (`resolve_batching`). Reads the reuse mode off the model, and folds choices only with
        "prefix_sdpa" attention (benchmark.consultants.attention) on attention layers alone (a
        branch would run through a recurrent state) and a forward that keeps every position's
        logits: set the model's attention before building this."""
        self.runtime = runtime
        self.cache = PrefixCache(capacity)
        self.batching = resolve_batching(batching, runtime.device.type)
        self.reuse_mode = prefix_reuse_mode(runtime.model)
        attention = getattr(runtime.model.config, "_attn_implementation", None)
        self.folds_choices = (
            self.reuse_mode == "padded" and runtime.logits_to_keep and attention == PREFIX_SDPA
        )
        self._anchors: dict[tuple, list[int] | None] = {}

    @property
    def reuses(self) -> bool:
        """Can the model's cache take a reused prefix at all (`prefix_reuse_mode`)?"""
        return self.reuse_mode is not None

    @property
    def active(self) -> bool:
        """Are prefixes stored and reused (a cache of capacity > 0 on a model that can)?"""
        return self.cache.capacity > 0 and self.reuses

    def anchor(self, query: Any, ids: list[int]) -> int:
        """How many of the prompt `ids` of `query` (a benchmark.consultants.base.Query) are its
        stable prefix: the templated messages before the last one, when they open the prompt
        token for token; 0 when prefixes are not reused or the template cannot say."""
        if not self.active or len(query.messages) <= 1:
            return 0
        head = self._anchor_ids(query)
        if head and len(head) < len(ids) and ids[: len(head)] == head:
            return len(head)
        return 0

    def _anchor_ids(self, query: Any) -> list[int] | None:
        """The token ids of the messages before the last one, as they open the prompt (memoized:
        the system message repeats at every step); None when the template cannot say."""
        tokenizer, thinking = self.runtime.tokenizer, query.decoding.enable_thinking
        head = query.messages[:-1]
        key = (thinking, *((m["role"], m["content"]) for m in head))
        if key not in self._anchors:
            try:
                full = chat_prompt(tokenizer, query.messages, thinking, True)
                text = chat_prompt(tokenizer, head, thinking, False)
            except Exception:  # noqa: BLE001 - a template may refuse a conversation without a user turn
                text, full = None, ""
            ids = None
            if text and full.startswith(text):
                ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(self._anchors) >= 256:
                self._anchors.clear()
            self._anchors[key] = ids
        return self._anchors[key]

    def pads(self, seqs: list[list[int]]) -> bool:
        """Do rows of different lengths go through one left-padded forward (`batching`
        "padded")? Rows of one length never need padding."""
        return self.batching == "padded" and len({len(s) for s in seqs}) > 1

    def prefill_groups(
        self, seqs: list[list[int]], rows: list[Prompt], conts: list[list[list[int]]] | None = None
    ):
        """Yield (row indices, their batch cache, their last position's logits [g, V], their
        attention mask or None); run under torch.inference_mode() (caches are deep-copied,
        which tensors with a grad history refuse). Batching "padded" with rows of different lengths: one group of
        every row, left-padded (`padded_prefill`). Otherwise one group per length, each
        prefilled unpadded on a copy of the shared prefix's cache (or from an empty cache): no
        padding and no mask beyond the causal one, so every row computes exactly what it would
        alone; the suffix costs what it costs. With `conts` (choice scoring) and `folds_choices`,
        a group whose rows share their actions' token sequences has them scored in the same
        forward (`extend`'s branches): its logits are then [g, 1 + branch tokens, V] and its
        cache holds the branches too."""
        import torch

        if self.pads(seqs):
            yield self.padded_prefill(seqs, rows)
            return
        stats, clock = self.runtime.stats, self.runtime.clock
        t0 = time.perf_counter()
        p, prefix = self.shared_prefix(seqs, rows)
        groups: dict[int, list[int]] = {}
        for r, s in enumerate(seqs):
            groups.setdefault(len(s), []).append(r)
        stats["prompt_tokens"] += sum(len(s) for s in seqs)
        stats["prefill_tokens_without_reuse"] += len(seqs) * max(map(len, seqs))
        stats["prefill_seconds"] += clock() - t0
        for members in groups.values():
            t0 = time.perf_counter()
            cache = copy.deepcopy(prefix) if prefix is not None else self.new_cache()
            if prefix is not None and len(members) > 1:
                zeros = torch.zeros(len(members), dtype=torch.long, device=self.runtime.device)
                cache.reorder_cache(zeros)
            branches = None
            if conts is not None and self.folds_choices:
                first = conts[members[0]]
                if all(conts[r] == first for r in members):
                    branches = [c[:-1] for c in first]  # the inputs whose logits score c[1:]
            last = self.extend(cache, [seqs[r][p:] for r in members], branches)
            stats["prefill_seconds"] += clock() - t0
            yield members, cache, last, None

    def padded_prefill(self, seqs: list[list[int]], rows: list[Prompt]):
        """Every row in one forward, left-padded, as `generate` lays a batch out: positions from
        the attention mask, so each row sees the positions and keys of its unpadded prompt. A
        model of attention layers only takes the stored prefix first (`[prefix | pad | suffix]`,
        exact: the padding is masked out); a hybrid one computes the whole prompt (`[pad |
        prompt]`: its recurrent state is zero before the first real token, so left padding is
        exact, while padding after a prefix is not; module docstring). The group of
        `prefill_groups`: (all rows, the batch cache, the last logits [n, V], the mask)."""
        import torch

        rt, stats = self.runtime, self.runtime.stats
        t0 = time.perf_counter()
        n, width = len(seqs), max(map(len, seqs))
        p, cache = self.shared_prefix(seqs, rows) if self.reuse_mode == "padded" else (0, None)
        if cache is None:
            cache = self.new_cache()
        elif n > 1:
            cache.reorder_cache(torch.zeros(n, dtype=torch.long, device=rt.device))
        ids, mask = left_padded(seqs, p, rt.pad_id)
        stats["prompt_tokens"] += sum(len(s) for s in seqs)
        stats["prefill_tokens"] += n * (width - p)
        stats["prefill_tokens_without_reuse"] += n * width
        mask = mask.to(rt.device)
        kwargs: dict[str, Any] = {
            rt.cache_arg: cache,
            "attention_mask": mask,
            "position_ids": mask_positions(mask)[:, p:],
        }
        if rt.logits_to_keep:
            kwargs["logits_to_keep"] = 1
        out = rt.model(input_ids=ids[:, p:].to(rt.device), use_cache=True, **kwargs)
        stats["prefill_seconds"] += rt.clock() - t0
        return list(range(n)), cache, out.logits[:, -1], mask

    def shared_prefix(self, seqs: list[list[int]], prompts: list[Prompt]) -> tuple[int, Any]:
        """(p, a fresh batch-1 cache of seqs[0][:p]) for the prefix every row shares, or (0,
        None). The stored prefix is the rows' common anchor (or, without one, the common prefix
        of a batch of several); what the batch shares beyond it is computed on the copy."""
        if not self.active:
            return 0, None
        first = seqs[0]
        limit = min(len(s) for s in seqs) - 1  # every row keeps at least one token to prefill
        shared = min(len(os.path.commonprefix(seqs)), limit)  # works on any sequences
        anchors = {q.anchor for q in prompts}
        anchor = anchors.pop() if len(anchors) == 1 else 0
        store = anchor if 0 < anchor <= shared else (shared if len(seqs) > 1 else 0)
        have, cache = self.cache.longest(first, shared)
        target = shared if len(seqs) > 1 else max(store, have)
        if target <= 0:
            return 0, None
        self.runtime.stats["prefix_hits" if have >= store else "prefix_misses"] += 1
        cache = copy.deepcopy(cache) if cache is not None else self.new_cache()
        if store > have:
            self.extend(cache, [first[have:store]])
            self.cache.put(first[:store], copy.deepcopy(cache))
            have = store
        if target > have:
            self.extend(cache, [first[have:target]])
        return target, cache

    def stacked_cache(self, prefix: Any, seqs: list[list[int]], p: int) -> Any:
        """A batch cache of every row but its last token, left-padded, from a batch-1 cache of
        the shared `p` tokens, for a hybrid model whose rows differ in length (padding after the
        prefix is not exact for a recurrent state; module docstring). Rows of equal length run
        their own tokens together on a copy of the prefix, unpadded; the copies are then stacked:
        attention keys and values padded on the left (masked out, as in the plain path),
        recurrent and conv states as they are (they carry no positions)."""
        import torch
        import torch.nn.functional as F

        n, width = len(seqs), max(len(s) for s in seqs)
        groups: dict[int, list[int]] = {}
        for r, s in enumerate(seqs):
            groups.setdefault(len(s), []).append(r)
        part: list[tuple[Any, int]] = [(None, 0)] * n  # row -> (its group's cache, index in it)
        for rows in groups.values():
            cache = copy.deepcopy(prefix)
            if len(rows) > 1:
                zeros = torch.zeros(len(rows), dtype=torch.long, device=self.runtime.device)
                cache.reorder_cache(zeros)
            if len(seqs[rows[0]]) - 1 > p:
                self.extend(cache, [seqs[r][p:-1] for r in rows])
            for k, r in enumerate(rows):
                part[r] = (cache, k)
        out = copy.deepcopy(part[0][0])
        for i, layer in enumerate(out.layers):
            for name in ("conv_states", "recurrent_states"):
                for j, state in getattr(layer, name, {}).items():
                    if state is not None:
                        rows = [getattr(c.layers[i], name)[j][k : k + 1] for c, k in part]
                        getattr(layer, name)[j] = torch.cat(rows)
            if getattr(layer, "keys", None) is not None and layer.keys.numel():
                for name in ("keys", "values"):
                    rows = [getattr(c.layers[i], name)[k : k + 1] for c, k in part]
                    padded = [F.pad(t, (0, 0, width - 1 - t.shape[-2], 0)) for t in rows]
                    setattr(layer, name, torch.cat(padded))
        return out

    def new_cache(self) -> Any:
        return self.runtime.new_cache()

    def extend(
        self, cache: Any, rows: list[list[int]], branches: list[list[int]] | None = None
    ) -> Any:
        """Run `rows` (of equal length, unpadded) through the model on top of `cache` (of the
        same batch size), which grows in place; the last position's logits [rows, V].
        `branches` (choice scoring, only where `folds_choices`): token sequences that each
        continue every row from its end, computed in the same forward, each blind to the others
        (attention.branched_attention; positions restart after the row for each); the logits
        are then [rows, 1 + branch tokens, V]: the row's last position, then every branch
        position in order. The cache then holds the branches' keys too (not to be reused)."""
        import torch

        rt = self.runtime
        rt.stats["prefill_tokens"] += sum(len(r) for r in rows)
        kwargs: dict[str, Any] = {rt.cache_arg: cache}
        keep = 1  # only the last position's logits are read
        if branches:
            past, n = cache.get_seq_length(), len(rows[0])
            positions = list(range(past, past + n))
            for b in branches:
                positions += range(past + n, past + n + len(b))
            kwargs["position_ids"] = torch.tensor([positions], device=rt.device)
            kwargs["choice_branches"] = (n, [len(b) for b in branches])
            keep += sum(len(b) for b in branches)
            rows = [r + [t for b in branches for t in b] for r in rows]
        if rt.logits_to_keep:
            kwargs["logits_to_keep"] = keep
        out = rt.model(
            input_ids=torch.tensor(rows, dtype=torch.long, device=rt.device),
            use_cache=True,
            **kwargs,
        )
        return out.logits[:, -keep:] if branches else out.logits[:, -1]
