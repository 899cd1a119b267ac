"""Local transformers backend: batched generation with a thinking budget, prefix reuse and
per-query sampling streams.

Requests are grouped by decoding settings, sorted by prompt length (longest first, so an
out-of-memory error shows up on the first batch), generated in left-padded batches of at most
`max_batch_size`, and returned in the original order. A CUDA out-of-memory error halves the
batch and retries. Weights load from safetensors only; remote code runs only when configured.

Prefix reuse (`prefix_cache`: LRU entries, 0 = off). The key/value cache of a prompt prefix is
computed once (batch 1, unpadded) and kept: the chat-templated messages before the last one (the
system message of every prompt variant) are the stored prefix, reused across the queries of a
batch and across steps; a batch that shares more than that (the longest common token prefix)
computes the rest once per batch on a copy. Generation then gets, per row, the prefix, then left
padding, then the row's own suffix: `[prefix | pad ... pad | suffix]`, attention mask 0 on the
padding. Positions come from the mask (transformers' cumsum), so each row sees exactly the
positions and keys of its unpadded prompt. A copy of the stored cache, repeated over the batch, is
passed to `generate`, which computes only the suffixes. Greedy answers are token for token those
of the plain left-padded path (tests/test_prefix_cache.py: the tiny model, batched and unbatched,
thinking phases included). Which models use it (`prefix_reuse_mode`): a cache of plain
full-attention layers takes the layout above ("padded"). A hybrid cache (Qwen3.5, Qwen3-Next:
Gated-DeltaNet layers, whose cache is a recurrent state and a conv window, beside full attention)
cannot: padding after the prefix is not exact for a recurrent layer. transformers zeroes a padded
position's input, but the state still decays there (the gate depends on a bias, not only on the
input) and the conv window still mixes the prefix's last tokens into it; plain left padding is
exact only because the state is zero before any real token. So ("unpadded") rows of equal length
take `[prefix | suffix]` with no padding, and rows of different lengths (`_stacked_cache`) run
their own tokens but the last on a copy of the prefix, each length group as one unpadded batch;
the copies are stacked into one batch cache in the plain left-padded layout (attention keys and
values padded on the left and masked; recurrent and conv states carry no positions), and
`generate` computes each row's last token (tests/test_hybrid_prefix.py: a tiny Qwen3.5). Models
with sliding-window layers take the plain path. The stored batch-1 cache is expanded to a batch
with transformers' `Cache.reorder_cache` (index 0 repeated), which every layer kind implements.
Memory: an entry holds the prefix's keys and values (layers x kv heads x head dim x 2 x dtype
bytes per token; about 28 kB per token for Qwen2.5-1.5B in bf16) plus, for a hybrid model, one
recurrent and one conv state per linear layer (independent of the prefix's length).
`prefill_stats()` counts prompt positions computed, with and without reuse. On a GPU the stacked
path runs one forward per distinct row length instead of one for the batch (not measured yet).

Choice scoring (Decoding.mode "choices", `score_choices`; docs/choices.md): a query whose answer
is one bare valid action is answered by prefilling its prompt (each group of equal-length rows
unpadded on a copy of the stored prefix: `_prefill_groups`) and scoring every valid action's
continuation (`choice_ids`: its tokens and the first stop token): on CPU with attention layers
only, as branches after the prompt in the prefill's own forward (`_extend`'s branches,
attention.branched_attention); otherwise in one batched forward on that cache. The most likely
action is the answer, every action's probability goes in
`Answer.choices`. Short greedy answers (at most `lean_max_new_tokens`) take the same prefill and
a plain argmax loop instead of `generate` (`_lean_ids`), only where generation would apply no
logits processor (`plain_greedy`): the same tokens (tests/test_choices.py). On CPU, attention is
"prefix_sdpa" (benchmark.consultants.attention): an unpadded suffix on a cached prefix is
attended without the masked rectangle.

Kernels (`kernel_report`): which implementation the model's attention and its linear-attention
and conv functions resolved to (the fast `flash-linear-attention` / `causal-conv1d` kernels, or
transformers' reference PyTorch code, correct but much slower on a GPU); logged once at load, and
reported by `make bench-gpu`.

Sampling (Decoding.temperature > 0; temperature, top_p, top_k from `slm.decoding`, or from the
model's own generation config with `slm.decoding.source=model`: `model_sampling`): generation
stays greedy on logits that a processor has already sampled from. The k-th new token of a query
is drawn by inverse CDF with a uniform number hashed from (the query's seed, k): no random state is
shared between the rows of a batch or carried from one batch to the next, so a query's draws do
not depend on which queries it is batched with, nor on whether it ran in a lockstep or a
sequential evaluation. The query's seed is `query_seed` (decoding seed, rng_key, messages), a
fresh random one when the decoding has no seed. Sampled answers are therefore identical between
lockstep and sequential evaluation, up to the floating-point effects of batching that greedy
answers share (a draw changes only when its uniform number falls within rounding distance of a
boundary of the cumulative distribution).

Thinking budget (Qwen3-style `enable_thinking`): generation first runs for at most
`thinking_budget` new tokens, stopping early at `</think>` or end of text; a thinking block that
is still open is then closed by appending "</think>\\n\\n", and the answer gets its own
`max_new_tokens`. Every appended token counts in `generated_tokens`. Any thinking block, closed
or not, is stripped from the returned text."""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import logging
import math
import os
import secrets
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmark.consultants.base import (
    Answer,
    Consultant,
    Decoding,
    Query,
    query_seed,
    scores_choices,
)
from benchmark.consultants.errors import ConsultantError
from benchmark.vocabulary import THINK_END, THINK_START
from benchmark.vocabulary import strip_thinking as split_thinking

DTYPES = ("auto", "bfloat16", "float16", "float32")
THINK_CLOSE = THINK_END + "\n\n"
DEFAULT_PREFIX_CACHE = 8  # prompt prefixes whose key/value caches are kept (module docstring)
DEFAULT_LEAN_MAX_NEW_TOKENS = 16  # greedy answers up to this long take the lean decode loop
# what transformers' generate() samples with where a generation config leaves a field unset
# (GenerationConfig._get_default_generation_params; the same in transformers 4.x)
HF_SAMPLING_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": 50}
_MB = 1 << 20
GPU_EXTRA_HINT = "pip install -e '.[gpu]' on a CUDA machine"
log = logging.getLogger(__name__)


def strip_thinking(text: str) -> str:
    """Remove leaked thinking: `<think>...</think>` blocks, an unterminated `<think>...`, and
    anything before a stray `</think>` (the template opened the block inside the prompt); the
    literal reading of the parser's split (benchmark.vocabulary.strip_thinking), trimmed."""
    return split_thinking(text, literal=True)[0].strip()


@dataclass
class Generation:
    """Token-level result of one query (the test and benchmark scripts look inside)."""

    prompt_ids: list[int]
    new_ids: list[int]  # everything appended after the prompt, forced `</think>` included
    thinking_tokens: int  # tokens generated while the thinking block was open
    text: str


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


class HFConsultant(Consultant):
    """A causal LM from the Hugging Face hub (`model`, cached locally) or a local `path`."""

    def __init__(
        self,
        model: str | None = None,
        path: str | None = None,
        revision: str | None = None,
        dtype: str = "auto",
        device_map: str | dict | None = "auto",
        trust_remote_code: bool = False,
        max_batch_size: int = 32,
        num_threads: int | None = None,
        prefix_cache: int = 8,  # DEFAULT_PREFIX_CACHE
        lean_max_new_tokens: int = 16,  # DEFAULT_LEAN_MAX_NEW_TOKENS
        digests: str | None = None,
    ) -> None:
        """`digests`: the results store's digest cache (benchmark.store; make_consultant passes
        it), so a multi-GB local model is not hashed again on every job. `num_threads` (process-wide torch.set_num_threads; None leaves it alone): on a
        small shared CPU one thread is several times faster than OpenMP threads that contend
        with other processes for the same cores. `prefix_cache`: how many prompt prefixes'
        key/value caches to keep (LRU; 0 = no prefix reuse; module docstring)."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if dtype not in DTYPES:
            raise ConsultantError(f"slm.backend.dtype={dtype!r} is not one of {list(DTYPES)}")
        if max_batch_size < 1:
            raise ConsultantError(f"slm.backend.max_batch_size={max_batch_size} must be >= 1")
        self.max_batch_size = int(max_batch_size)
        if isinstance(prefix_cache, bool) or int(prefix_cache) < 0:
            raise ConsultantError(f"slm.backend.prefix_cache={prefix_cache!r} must be >= 0")
        self.prefix_cache = PrefixCache(int(prefix_cache))
        if isinstance(lean_max_new_tokens, bool) or int(lean_max_new_tokens) < 0:
            raise ConsultantError(
                f"slm.backend.lean_max_new_tokens={lean_max_new_tokens!r} must be >= 0"
            )
        self.lean_max_new_tokens = int(lean_max_new_tokens)
        if num_threads is not None:
            torch.set_num_threads(int(num_threads))
        source, local_only, self._identity = _resolve_source(model, path, revision, digests)
        cuda = torch.cuda.is_available()
        if dtype == "auto":  # the weights' own dtype on GPU; bf16/fp16 matmuls crawl on CPU
            torch_dtype: Any = "auto" if cuda else torch.float32
        else:
            torch_dtype = getattr(torch, dtype)
        if device_map in ("auto", "cpu") and not cuda:
            device_map = None
        common = dict(
            revision=revision, trust_remote_code=trust_remote_code, local_files_only=local_only
        )
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source, **common)
            self.model = AutoModelForCausalLM.from_pretrained(
                source, dtype=torch_dtype, device_map=device_map, use_safetensors=True, **common
            )
        except (OSError, ValueError) as exc:
            if path is None and not local_only:
                raise ConsultantError(_offline_hint(model, exc)) from exc
            raise ConsultantError(f"cannot load the model at {source!r}: {exc}") from exc
        self.model.eval()
        self._setup_tokens()

    uses_digests = True  # make_consultant passes the results store's digest cache

    @classmethod
    def local_dir(cls, path: str | None = None, **_: object) -> Path | None:
        p = Path(os.path.expanduser(str(path))) if path else None
        return p if p is not None and p.is_dir() else None

    @classmethod
    def weights_identity(
        cls,
        model: str | None = None,
        path: str | None = None,
        revision: str | None = None,
        digests: str | None = None,
        legacy: bool = False,
        **_: object,
    ) -> str | None:
        """`legacy`: the identity cells of IDENTITY_VERSION 2 recorded (benchmark.migrate)."""
        return _resolve_source(model, path, revision, digests, legacy)[2]

    # ----------------------------------------------------------------------------- setup
    def _setup_tokens(self) -> None:
        tok, vocab = self.tokenizer, self.tokenizer.get_vocab()
        eos: list[int] = []
        gen_eos = self.model.generation_config.eos_token_id
        for e in [*(gen_eos if isinstance(gen_eos, list) else [gen_eos]), tok.eos_token_id]:
            if e is not None and e not in eos:
                eos.append(int(e))
        if "<|im_end|>" in vocab and vocab["<|im_end|>"] not in eos:
            eos.append(vocab["<|im_end|>"])
        if not eos:
            raise ConsultantError(f"{self.identity}: the tokenizer defines no end-of-text token")
        self.eos_ids = eos
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else eos[0]
        self.think_start = vocab.get(THINK_START)
        self.think_end = vocab.get(THINK_END)
        self.close_ids = (
            tok.encode(THINK_CLOSE, add_special_tokens=False) if self.think_end is not None else []
        )
        if not hasattr(self, "prefix_cache"):  # a subclass that builds its model without __init__
            self.prefix_cache = PrefixCache(DEFAULT_PREFIX_CACHE)
        if not hasattr(self, "lean_max_new_tokens"):
            self.lean_max_new_tokens = DEFAULT_LEAN_MAX_NEW_TOKENS
        gc = copy.deepcopy(self.model.generation_config)
        gc.update(temperature=None, top_p=None, top_k=None, min_p=None, do_sample=False)
        gc.pad_token_id, gc.eos_token_id = self.pad_id, self.eos_ids
        self._base_gc = gc
        self._lean_ok = self.lean_max_new_tokens > 0 and plain_greedy(gc)
        params = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"  # renamed in 5.x
        self._logits_to_keep = "logits_to_keep" in params
        self._prefix_attention()
        self.reuse_mode = prefix_reuse_mode(self.model)
        # choice scoring in the prefill's forward: needs prefix_sdpa and only attention layers
        # (a branch would run through a recurrent state); the logits of every position kept
        self._folds_choices = (
            self.reuse_mode == "padded"
            and self._logits_to_keep
            and getattr(self.model.config, "_attn_implementation", None) == attention_name()
        )
        self.reuses_prefixes = self.reuse_mode is not None
        self.kernels = kernel_report(self.model)
        log.info("%s: %s", self.identity, describe_kernels(self.kernels))
        self._anchors: dict[tuple, list[int] | None] = {}
        self._choice_memo: dict[str, list[int]] = {}
        self._stats = dict.fromkeys(PREFILL_STATS, 0)

    def _prefix_attention(self) -> None:
        """On CPU, sdpa becomes "prefix_sdpa" (benchmark.consultants.attention): a suffix on a
        cached prefix is prefilled without the masked rectangle; every other call is sdpa's."""
        from benchmark.consultants import attention

        config = self.model.config
        if self.device.type == "cpu" and getattr(config, "_attn_implementation", None) == "sdpa":
            self.model.set_attn_implementation(attention.register())

    @property
    def identity(self) -> str:
        return self._identity

    def model_sampling(self) -> dict[str, Any]:
        """What `generate` would sample with given no sampling argument, as the ASK+ authors'
        released code calls it (slm.decoding.source=model): greedy unless the model's
        generation config sets `do_sample`; then its temperature, top_p and top_k, transformers'
        own defaults where it sets none (HF_SAMPLING_DEFAULTS). A `min_p`, which Decoding cannot
        express, is refused rather than dropped."""
        gc = self.model.generation_config
        if not gc.do_sample:
            return {"temperature": 0.0, "top_p": 1.0, "top_k": 0}
        if getattr(gc, "min_p", None):
            raise ConsultantError(
                f"slm.decoding.source=model: {self.identity}'s generation config samples with "
                f"min_p={gc.min_p}, which the suite's sampler does not apply; set "
                "slm.decoding.source=config and slm.decoding.temperature/top_p/top_k"
            )
        out = {}
        for name, default in HF_SAMPLING_DEFAULTS.items():
            value = getattr(gc, name, None)
            out[name] = type(default)(default if value is None else value)
        return out

    @property
    def device(self) -> Any:
        return self.model.device

    # ----------------------------------------------------------------------------- answer
    def answer(self, queries: list[Query]) -> list[Answer]:
        """Choice-scored queries (`scores_choices`) by `score_choices`, the rest generated."""
        queries = self.resolve_decoding(queries)
        out: list[Answer | None] = [None] * len(queries)
        scored = [i for i, q in enumerate(queries) if scores_choices(q)]
        generated = sorted(set(range(len(queries))) - set(scored))
        if generated:
            gens = self.generate_with_times([queries[i] for i in generated])
            for i, (g, s) in zip(generated, gens, strict=True):
                out[i] = Answer(g.text, len(g.prompt_ids), len(g.new_ids), s)
        if scored:
            for i, a in zip(scored, self.score_choices([queries[i] for i in scored]), strict=True):
                out[i] = a
        return out  # type: ignore[return-value]

    def score_choices(self, queries: list[Query]) -> list[Answer]:
        """Each query answered with its most likely valid action (module docstring, "Choice
        scoring"); `Answer.choices` holds every action's probability over the valid set."""
        out = []
        for q, (logp, n, seconds) in zip(queries, self.choice_logprobs(queries), strict=True):
            best = max(range(len(q.actions)), key=lambda k: (logp[k], -k))  # ties: first action
            top = max(logp)
            weights = [math.exp(v - top) for v in logp]
            total = sum(weights)
            probs = {a: w / total for a, w in zip(q.actions, weights, strict=True)}
            text = q.actions[best]
            out.append(Answer(text, n, 0, seconds, choices=probs))
        return out

    def choice_ids(self, action: str) -> list[int]:
        """An action's continuation: its tokens, then the end of the answer (the first stop
        token: the token greedy generation would end an answer of exactly this action with);
        memoized (the same few actions come at every step)."""
        if action not in self._choice_memo:
            ids = self.tokenizer.encode(action, add_special_tokens=False)
            self._choice_memo[action] = [*ids, self.eos_ids[0]]
        return list(self._choice_memo[action])

    def choice_logprobs(self, queries: list[Query]) -> list[tuple[list[float], int, float]]:
        """Per query: the log-likelihood of each valid action's continuation (`choice_ids`, all
        its tokens) after the prompt, the prompt's length and the query's share of its batch's
        seconds. Batches of
        `max_batch_size` prompts, longest first; the prompt's prefix cache is reused and each
        length group is prefilled unpadded (`_prefill_groups`)."""
        prompts = [self.prompt(q) for q in queries]
        conts = [[self.choice_ids(a) for a in q.actions] for q in queries]
        out: list[tuple[list[float], int, float] | None] = [None] * len(queries)
        order = sorted(range(len(queries)), key=lambda i: -len(prompts[i].ids))
        for s in range(0, len(order), self.max_batch_size):
            chunk = order[s : s + self.max_batch_size]
            t0 = time.perf_counter()
            scores = self._score_batch([prompts[i] for i in chunk], [conts[i] for i in chunk])
            per = (time.perf_counter() - t0) / len(chunk)
            for i, v in zip(chunk, scores, strict=True):
                out[i] = (v, len(prompts[i].ids), per)
        return out  # type: ignore[return-value]

    def _score_batch(self, rows: list[Prompt], conts: list[list[list[int]]]) -> list[list[float]]:
        import torch

        seqs = [r.ids for r in rows]
        out: list[list[float]] = [[] for _ in rows]
        with torch.inference_mode():
            for members, cache, last in self._prefill_groups(seqs, rows, conts):
                t0 = time.perf_counter()
                if last.dim() == 3:  # folded: the prompt's last position, then every branch's
                    logp = torch.log_softmax(last.float(), dim=-1)  # [g, 1 + branch tokens, V]
                    for j, r in enumerate(members):
                        at = 1
                        for c in conts[r]:
                            v = float(logp[j, 0, c[0]])
                            for t in range(1, len(c)):
                                v += float(logp[j, at + t - 1, c[t]])
                            out[r].append(v)
                            at += len(c) - 1
                    self._stats["decode_seconds"] += time.perf_counter() - t0
                    continue
                first = torch.log_softmax(last.float(), dim=-1)  # [g, V]: each action's 1st token
                pairs = [(j, c) for j, r in enumerate(members) for c in conts[r]]
                width = max(len(c) for _, c in pairs) - 1
                rest = None
                if width > 0:  # the actions' later tokens, right-padded: padding comes after
                    index = torch.tensor([j for j, _ in pairs], device=self.device)
                    cache.reorder_cache(index)
                    ids = torch.full((len(pairs), width), self.pad_id, dtype=torch.long)
                    for m, (_, c) in enumerate(pairs):
                        ids[m, : len(c) - 1] = torch.tensor(c[:-1], dtype=torch.long)
                    logits = self.model(
                        input_ids=ids.to(self.device), use_cache=True, **{self._cache_arg: cache}
                    ).logits
                    rest = torch.log_softmax(logits.float(), dim=-1)
                for m, (j, c) in enumerate(pairs):
                    v = float(first[j, c[0]])
                    for t in range(1, len(c)):
                        v += float(rest[m, t - 1, c[t]])  # type: ignore[index]
                    out[members[j]].append(v)
                self._stats["decode_seconds"] += time.perf_counter() - t0
        return out

    def _prefill_groups(
        self, seqs: list[list[int]], rows: list[Prompt], conts: list[list[list[int]]] | None = None
    ):
        """Yield (row indices, their batch cache, their last position's logits [g, V]) per group
        of equal-length rows, each group prefilled unpadded on a copy of the shared prefix's
        cache (or from an empty cache): no padding and no mask beyond the causal one, so every
        row computes exactly what it would alone; the suffix costs what it costs. With `conts`
        (choice scoring) and `_folds_choices`, a group whose rows share their actions' token
        sequences has them scored in the same forward (`_extend`'s branches): its logits are
        then [g, 1 + branch tokens, V] and its cache holds the branches too."""
        import torch

        t0 = time.perf_counter()
        p, prefix = self._shared_prefix(seqs, rows)
        groups: dict[int, list[int]] = {}
        for r, s in enumerate(seqs):
            groups.setdefault(len(s), []).append(r)
        self._stats["prompt_tokens"] += sum(len(s) for s in seqs)
        self._stats["prefill_tokens_without_reuse"] += len(seqs) * max(map(len, seqs))
        self._stats["prefill_seconds"] += time.perf_counter() - t0
        for members in groups.values():
            t0 = time.perf_counter()
            cache = copy.deepcopy(prefix) if prefix is not None else self._new_cache()
            if prefix is not None and len(members) > 1:
                cache.reorder_cache(torch.zeros(len(members), dtype=torch.long, device=self.device))
            branches = None
            if conts is not None and self._folds_choices:
                first = conts[members[0]]
                if all(conts[r] == first for r in members):
                    branches = [c[:-1] for c in first]  # the inputs whose logits score c[1:]
            last = self._extend(cache, [seqs[r][p:] for r in members], branches)
            self._stats["prefill_seconds"] += time.perf_counter() - t0
            yield members, cache, last

    def generate(self, queries: list[Query]) -> list[Generation]:
        return [g for g, _ in self.generate_with_times(queries)]

    def generate_with_times(self, queries: list[Query]) -> list[tuple[Generation, float]]:
        """Group by decoding, sort by prompt length, batch, restore the original order."""
        queries = self.resolve_decoding(queries)
        prompts = [self.prompt(q) for q in queries]
        out: list[tuple[Generation, float] | None] = [None] * len(queries)
        groups: dict[Decoding, list[int]] = {}
        for i, q in enumerate(queries):
            d = q.decoding
            if not d.sampling:  # greedy: the sampling fields change nothing
                d = replace(d, top_p=1.0, top_k=0, seed=None)
            groups.setdefault(d, []).append(i)
        for decoding, idx in groups.items():
            idx.sort(key=lambda i: -len(prompts[i].ids))
            for s in range(0, len(idx), self.max_batch_size):
                chunk = idx[s : s + self.max_batch_size]
                results = self._run_splitting([prompts[i] for i in chunk], decoding)
                for i, r in zip(chunk, results, strict=True):
                    out[i] = r
        return out  # type: ignore[return-value]

    def encode(self, query: Query) -> list[int]:
        """The prompt's token ids under the model's chat template."""
        return self.tokenizer(
            self._template(query.messages, query, True), add_special_tokens=False
        )["input_ids"]

    def _template(self, messages: list[dict[str, str]], query: Query, generation: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages,
            add_generation_prompt=generation,
            tokenize=False,
            enable_thinking=query.decoding.enable_thinking,
        )

    def prompt(self, query: Query) -> Prompt:
        """The prompt ids, the length of its stable prefix and its sampling seed."""
        ids = self.encode(query)
        seed = None
        if query.decoding.sampling:
            seed = query_seed(query)
            if seed is None:
                seed = secrets.randbits(63)
        anchor = 0
        if self.prefix_cache.capacity > 0 and self.reuses_prefixes and len(query.messages) > 1:
            head = self._anchor_ids(query)
            if head and len(head) < len(ids) and ids[: len(head)] == head:
                anchor = len(head)
        return Prompt(ids, anchor, seed)

    def _anchor_ids(self, query: Query) -> list[int] | None:
        """The token ids of the messages before the last one, as they open the prompt (memoized:
        the system message repeats at every step); None when the template cannot say."""
        head = query.messages[:-1]
        key = (query.decoding.enable_thinking, *((m["role"], m["content"]) for m in head))
        if key not in self._anchors:
            try:
                full = self._template(query.messages, query, True)
                text = self._template(head, query, False)
            except Exception:  # noqa: BLE001 - a template may refuse a conversation without a user turn
                text, full = None, ""
            ids = None
            if text and full.startswith(text):
                ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(self._anchors) >= 256:
                self._anchors.clear()
            self._anchors[key] = ids
        return self._anchors[key]

    def prefill_stats(self) -> dict[str, int]:
        """Prompt positions the model computed in prefill (`prefill_tokens`, padding included,
        stored-prefix computations included) and what the same calls would have computed without
        prefix reuse (`prefill_tokens_without_reuse`: rows x padded width); `prompt_tokens` counts
        the prompts' own tokens (thinking phase 2 re-reads its prompt); `prefix_hits` /
        `prefix_misses` count batches whose stored prefix was found / had to be computed."""
        return dict(self._stats)

    def reset_prefill_stats(self) -> None:
        self._stats = dict.fromkeys(PREFILL_STATS, 0)

    def _run_splitting(
        self, prompts: list[Prompt], decoding: Decoding
    ) -> list[tuple[Generation, float]]:
        import torch

        try:
            t0 = time.perf_counter()
            gens = self._generate_batch(prompts, decoding)
            per = (time.perf_counter() - t0) / len(prompts)
            return [(g, per) for g in gens]
        except torch.cuda.OutOfMemoryError:
            if len(prompts) == 1:
                raise
            torch.cuda.empty_cache()
            half = len(prompts) // 2
            return self._run_splitting(prompts[:half], decoding) + self._run_splitting(
                prompts[half:], decoding
            )

    def _generate_batch(self, rows: list[Prompt], d: Decoding) -> list[Generation]:
        n = len(rows)
        prompts = [r.ids for r in rows]
        new: list[list[int]] = [[] for _ in range(n)]
        thinking = [0] * n
        budget = d.thinking_budget if d.enable_thinking and self.think_end is not None else 0
        allowance = [d.max_new_tokens] * n  # answer tokens still allowed per row
        if budget > 0:
            phase1 = self._generate_ids(
                prompts, budget, d, [*self.eos_ids, self.think_end], rows, [0] * n
            )
            todo = []
            for i, ids in enumerate(phase1):
                new[i] = list(ids)
                was_open = self._open(prompts[i])
                is_open = self._open(prompts[i] + ids)
                if was_open or self.think_start in ids:
                    thinking[i] = _thinking_count(ids, was_open, self.think_start, self.think_end)
                if ids and ids[-1] in self.eos_ids:
                    continue  # finished inside phase 1
                if is_open:
                    new[i] += self.close_ids
                elif not (was_open or self.think_start in ids):
                    allowance[i] = d.max_new_tokens - len(ids)  # it never thought: all answer
                if allowance[i] > 0:
                    todo.append(i)
        else:
            todo = list(range(n))
        if todo:
            seqs = [prompts[i] + new[i] for i in todo]
            phase2 = self._generate_ids(
                seqs,
                max(allowance[i] for i in todo),
                d,
                self.eos_ids,
                [rows[i] for i in todo],
                [len(new[i]) for i in todo],
            )
            for i, ids in zip(todo, phase2, strict=True):
                new[i] += list(ids[: allowance[i]])
        return [
            Generation(prompts[i], new[i], thinking[i], self._answer_text(prompts[i], new[i]))
            for i in range(n)
        ]

    def _open(self, ids: list[int]) -> bool:
        """Is a thinking block open at the end of `ids`?"""
        if self.think_start is None:
            return False
        last_start = _rindex(ids, self.think_start)
        return last_start >= 0 and last_start > _rindex(ids, self.think_end)

    def _answer_text(self, prompt: list[int], new: list[int]) -> str:
        ids = [t for t in new if t not in self.eos_ids]
        if self.think_start is not None:
            end = _rindex(ids, self.think_end)
            if end >= 0:
                ids = ids[end + 1 :]
            elif self._open(prompt):
                ids = []  # never closed: all of it was thinking
            if self.think_start in ids:
                ids = ids[: ids.index(self.think_start)]
        return strip_thinking(self.tokenizer.decode(ids, skip_special_tokens=True))

    def _generate_ids(
        self,
        seqs: list[list[int]],
        max_new: int,
        d: Decoding,
        stop: list[int],
        prompts: list[Prompt],
        offsets: list[int],
    ) -> list[list[int]]:
        """Batched generate; each row's new tokens up to and including its stop. Rows are
        left-padded, after the shared prefix when one is reused (module docstring). `offsets`:
        how many tokens each row has generated before (its sampling stream's position)."""
        import torch

        if not d.sampling and self._lean_ok and max_new <= self.lean_max_new_tokens:
            return self._lean_ids(seqs, max_new, stop, prompts)
        n = len(seqs)
        width = max(len(s) for s in seqs)
        with torch.inference_mode():
            p, cache = self._shared_prefix(seqs, prompts)
            computed = n * (width - p)
            if cache is not None and self.reuse_mode == "unpadded" and min(map(len, seqs)) < width:
                cache = self._stacked_cache(cache, seqs, p)  # plain left padding from here
                p, computed = 0, n  # generate computes each row's last token
            elif cache is not None and n > 1:  # batch 1 -> n (linear layers: no repeat_interleave)
                cache.reorder_cache(torch.zeros(n, dtype=torch.long, device=self.device))
            ids = torch.full((n, width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((n, width), dtype=torch.long)
            for r, s in enumerate(seqs):
                ids[r, width - len(s) + p :] = torch.tensor(s[p:], dtype=torch.long)
                mask[r, width - len(s) + p :] = 1
                if p:
                    ids[r, :p] = torch.tensor(s[:p], dtype=torch.long)
                    mask[r, :p] = 1
            self._stats["prompt_tokens"] += sum(len(s) for s in seqs)
            self._stats["prefill_tokens"] += computed
            self._stats["prefill_tokens_without_reuse"] += n * width
            gc = copy.deepcopy(self._base_gc)
            gc.update(max_new_tokens=max_new, eos_token_id=stop)
            kwargs: dict[str, Any] = {}
            if d.sampling:
                seeds = [int(q.seed) for q in prompts]  # type: ignore[arg-type]
                kwargs["logits_processor"] = _row_sampler(d, seeds, offsets, width)
            if cache is not None:
                kwargs[self._cache_arg] = cache
            out = self.model.generate(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                generation_config=gc,
                **kwargs,
            )
        rows = []
        for row in out[:, width:].tolist():
            cut = next((k for k, t in enumerate(row) if t in stop), None)
            rows.append(row if cut is None else row[: cut + 1])
        return rows

    def _lean_ids(
        self, seqs: list[list[int]], max_new: int, stop: list[int], prompts: list[Prompt]
    ) -> list[list[int]]:
        """Greedy decoding without `generate`: each length group prefilled unpadded on the
        shared prefix (`_prefill_groups`), then one forward per new token on the group's own
        cache; a row leaves the batch at its stop token. Only taken when greedy generation
        would apply no logits processor (`_lean_ok`), so argmax of the logits is its choice:
        the same tokens as `generate` (tests/test_choices.py)."""
        import torch

        out: list[list[int]] = [[] for _ in seqs]
        stops = torch.tensor(stop, device=self.device)
        with torch.inference_mode():
            for members, cache, last in self._prefill_groups(seqs, prompts):
                t0 = time.perf_counter()
                alive = list(members)
                for step in range(max_new):
                    token = last.argmax(-1)
                    for r, t in zip(alive, token.tolist(), strict=True):
                        out[r].append(t)
                    keep = ~torch.isin(token, stops)
                    if step == max_new - 1 or not bool(keep.any()):
                        break
                    if not bool(keep.all()):
                        index = keep.nonzero().flatten()
                        cache.reorder_cache(index)
                        alive = [alive[k] for k in index.tolist()]
                        token = token[index]
                    last = self.model(
                        input_ids=token[:, None], use_cache=True, **{self._cache_arg: cache}
                    ).logits[:, -1]
                self._stats["decode_seconds"] += time.perf_counter() - t0
        return out

    def _shared_prefix(self, seqs: list[list[int]], prompts: list[Prompt]) -> tuple[int, Any]:
        """(p, a fresh batch-1 cache of seqs[0][:p]) for the prefix every row shares, or (0,
        None). The stored prefix is the rows' common anchor (or, without one, the common prefix
        of a batch of several); what the batch shares beyond it is computed on the copy."""
        if self.prefix_cache.capacity <= 0 or not self.reuses_prefixes:
            return 0, None
        first = seqs[0]
        limit = min(len(s) for s in seqs) - 1  # every row keeps at least one token to prefill
        shared = min(len(os.path.commonprefix(seqs)), limit)  # works on any sequences
        anchors = {q.anchor for q in prompts}
        anchor = anchors.pop() if len(anchors) == 1 else 0
        store = anchor if 0 < anchor <= shared else (shared if len(seqs) > 1 else 0)
        have, cache = self.prefix_cache.longest(first, shared)
        target = shared if len(seqs) > 1 else max(store, have)
        if target <= 0:
            return 0, None
        self._stats["prefix_hits" if have >= store else "prefix_misses"] += 1
        cache = copy.deepcopy(cache) if cache is not None else self._new_cache()
        if store > have:
            self._extend(cache, [first[have:store]])
            self.prefix_cache.put(first[:store], copy.deepcopy(cache))
            have = store
        if target > have:
            self._extend(cache, [first[have:target]])
        return target, cache

    def _stacked_cache(self, prefix: Any, seqs: list[list[int]], p: int) -> Any:
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
                cache.reorder_cache(torch.zeros(len(rows), dtype=torch.long, device=self.device))
            if len(seqs[rows[0]]) - 1 > p:
                self._extend(cache, [seqs[r][p:-1] for r in rows])
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

    def _new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _extend(
        self, cache: Any, rows: list[list[int]], branches: list[list[int]] | None = None
    ) -> Any:
        """Run `rows` (of equal length, unpadded) through the model on top of `cache` (of the
        same batch size), which grows in place; the last position's logits [rows, V].
        `branches` (choice scoring, only where `_folds_choices`): token sequences that each
        continue every row from its end, computed in the same forward, each blind to the others
        (attention.branched_attention; positions restart after the row for each); the logits
        are then [rows, 1 + branch tokens, V]: the row's last position, then every branch
        position in order. The cache then holds the branches' keys too (not to be reused)."""
        import torch

        self._stats["prefill_tokens"] += sum(len(r) for r in rows)
        kwargs: dict[str, Any] = {self._cache_arg: cache}
        keep = 1  # only the last position's logits are read
        if branches:
            past, n = cache.get_seq_length(), len(rows[0])
            positions = list(range(past, past + n))
            for b in branches:
                positions += range(past + n, past + n + len(b))
            kwargs["position_ids"] = torch.tensor([positions], device=self.device)
            kwargs["choice_branches"] = (n, [len(b) for b in branches])
            keep += sum(len(b) for b in branches)
            rows = [r + [t for b in branches for t in b] for r in rows]
        if self._logits_to_keep:
            kwargs["logits_to_keep"] = keep
        out = self.model(
            input_ids=torch.tensor(rows, dtype=torch.long, device=self.device),
            use_cache=True,
            **kwargs,
        )
        return out.logits[:, -keep:] if branches else out.logits[:, -1]

    def close(self) -> None:
        import torch

        self.prefix_cache.clear()
        self.model = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


# --------------------------------------------------------------------------------- helpers
PREFILL_STATS = (
    "prompt_tokens",
    "prefill_tokens",
    "prefill_tokens_without_reuse",
    "prefix_hits",
    "prefix_misses",
    "prefill_seconds",  # choice scoring and the lean path: time in prefill
    "decode_seconds",  # ... and in scoring the continuations / the greedy decode loop
)


# generation settings under which greedy `generate` would transform the logits before argmax
_PROCESSOR_FIELDS = {
    "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "bad_words_ids": (None,),
    "min_length": (None, 0),
    "min_new_tokens": (None, 0),
    "suppress_tokens": (None,),
    "begin_suppress_tokens": (None,),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "sequence_bias": (None,),
    "exponential_decay_length_penalty": (None,),
    "guidance_scale": (None, 1.0),
    "watermarking_config": (None,),
    "num_beams": (None, 1),
    "diversity_penalty": (None, 0.0),
    "low_memory": (None, False),
    "max_time": (None,),
    "stop_strings": (None,),
    "assistant_model": (None,),
    "prompt_lookup_num_tokens": (None,),
}


def attention_name() -> str:
    """The name prefix_sdpa registers under (benchmark.consultants.attention)."""
    from benchmark.consultants.attention import NAME

    return NAME


def plain_greedy(gc: Any) -> bool:
    """Is greedy generation under `gc` the argmax of the raw logits (no logits processor, no
    beam search, no extra stopping rule)? Then the lean decode loop gives its tokens."""
    return all(getattr(gc, k, None) in allowed for k, allowed in _PROCESSOR_FIELDS.items())


def prefix_reuse_mode(model: Any) -> str | None:
    """How the model's cache can take a reused prefix (module docstring): "padded" when every
    layer is plain full attention (padding between prefix and suffix is masked out exactly),
    "unpadded" when linear-attention layers (recurrent and conv states) stand beside full
    attention (no padding may follow the prefix: `_stacked_cache`), None otherwise (sliding windows,
    encoder-decoders, architectures transformers' DynamicCache cannot describe)."""
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


def kernel_report(model: Any) -> dict[str, str]:
    """Which implementation each optional fast kernel of the model resolved to, read from the
    model's own modeling modules (not from a list of package names): transformers wraps each
    such function (`use_kernel_func_from_hub_with_fallback`: chunk_gated_delta_rule,
    fused_recurrent_gated_delta_rule, causal_conv1d_fn, ...) at import, binding either the
    package's kernel or its reference PyTorch code. Values: the package name (`fla`,
    `causal_conv1d`) when its kernel is bound, "reference" otherwise; `attention` is the
    attention implementation (sdpa, eager, flash_attention_2, ...), `prefix_reuse` the cache
    mode (`prefix_reuse_mode`, or "off")."""
    out: dict[str, str] = {
        "attention": str(getattr(model.config, "_attn_implementation", None) or "default")
    }
    modules = {type(m).__module__ for m in model.modules()}
    for name in sorted(modules):
        for value in vars(sys.modules[name]).values() if name in sys.modules else ():
            closure = getattr(value, "__closure__", None)
            if not callable(value) or not closure:
                continue
            free = dict(
                zip(value.__code__.co_freevars, (c.cell_contents for c in closure), strict=True)
            )
            if "is_new_implementation" in free and "func_name" in free and "package" in free:
                fast = bool(free["is_new_implementation"])
                out[str(free["func_name"])] = str(free["package"]) if fast else "reference"
    out["prefix_reuse"] = prefix_reuse_mode(model) or "off"
    return out


def describe_kernels(report: dict[str, str]) -> str:
    """One log line for `kernel_report`, with the install hint when a kernel falls back."""
    parts = [f"{k}={v}" for k, v in report.items()]
    slow = [k for k, v in report.items() if v == "reference"]
    line = "kernels: " + ", ".join(parts)
    if slow:
        line += (
            f" ({', '.join(slow)}: transformers' reference PyTorch code, much slower on a GPU; "
            f"for the fast kernels: {GPU_EXTRA_HINT})"
        )
    return line


def _uniform(seed: int, k: int) -> float:
    """The uniform number in [0, 1) of draw k of the stream `seed` (stateless)."""
    digest = hashlib.blake2b(f"{seed}/{k}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def _row_sampler(d: Decoding, seeds: list[int], offsets: list[int], width: int) -> Any:
    """A logits processor that samples each row's next token (temperature, top-k, top-p, as
    transformers' warpers do) from its own stateless stream and leaves only that token, so that
    greedy generation picks it. Row r's draw at generation step t is draw offsets[r] + t of the
    stream seeds[r]."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    warpers: list[Any] = [TemperatureLogitsWarper(d.temperature)]
    if d.top_k > 0:
        warpers.append(TopKLogitsWarper(d.top_k))
    if d.top_p < 1.0:
        warpers.append(TopPLogitsWarper(d.top_p))

    class RowSampler(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            step = input_ids.shape[1] - width
            for warp in warpers:
                scores = warp(input_ids, scores)
            cdf = torch.softmax(scores.double(), dim=-1).cumsum(-1)
            u = torch.tensor(
                [_uniform(s, o + step) for s, o in zip(seeds, offsets, strict=True)],
                dtype=torch.float64,
                device=scores.device,
            )
            x = (u * cdf[:, -1]).unsqueeze(1)
            token = torch.searchsorted(cdf, x, right=True).clamp_(max=scores.shape[-1] - 1)
            out = torch.full_like(scores, -float("inf"))
            return out.scatter_(1, token, 0.0)

    return LogitsProcessorList([RowSampler()])


def _rindex(ids: list[int], token: int | None) -> int:
    if token is None:
        return -1
    for k in range(len(ids) - 1, -1, -1):
        if ids[k] == token:
            return k
    return -1


def _thinking_count(ids: list[int], was_open: bool, start: int | None, end: int | None) -> int:
    """Tokens of `ids` inside the thinking block (opening tag included, closing tag excluded)."""
    inside = was_open
    count = 0
    for t in ids:
        if t == start:
            inside = True
        if t == end:
            inside = False
        elif inside:
            count += 1
    return count


def _resolve_source(
    model: str | None,
    path: str | None,
    revision: str | None,
    digests: str | None = None,
    legacy: bool = False,
) -> tuple[str, bool, str]:
    """(what to pass to from_pretrained, local_files_only, identity)."""
    if path is not None:
        p = Path(os.path.expanduser(str(path)))
        if not p.is_dir():
            raise ConsultantError(
                f"slm.backend.path={str(path)!r} does not exist or is not a directory; point it "
                "at a model directory (config.json + *.safetensors + tokenizer files)"
            )
        if not (p / "config.json").is_file():
            raise ConsultantError(f"slm.backend.path={str(path)!r} has no config.json")
        fingerprint = legacy_fingerprint(p) if legacy else local_fingerprint(p, digests)
        return str(p), True, "hf-local:" + fingerprint
    if not model:
        raise ConsultantError("the hf backend needs slm.backend.model (hub id) or slm.backend.path")
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(model, "config.json", revision=revision)
    if isinstance(cached, str):  # snapshots/<commit>/config.json
        return model, True, f"hf:{model}@{Path(cached).parent.name}"
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise ConsultantError(_offline_hint(model, "HF_HUB_OFFLINE is set"))
    return model, False, f"hf:{model}@{revision or 'main'}"


def _offline_hint(model: str | None, cause: object) -> str:
    from huggingface_hub.constants import HF_HUB_CACHE

    return (
        f"slm.backend.model={model!r} is not in the local Hugging Face cache ({HF_HUB_CACHE}) "
        f"and could not be downloaded ({cause}). Set slm.backend.path to a local copy of the "
        f"model, or pre-download it on a machine with network: `huggingface-cli download "
        f"{model}` (HF_HOME chooses the cache directory; runs then work with HF_HUB_OFFLINE=1)."
    )


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")
CONFIG_SUFFIXES = (".json", ".jinja", ".txt", ".model")
# files beside the weights that never change an output: fine-tuning's record (its timings and
# held-out measurement) and the Trainer's own logs
NOT_MODEL_FILES = frozenset({"finetune.json", "trainer_state.json", "training_args.bin"})
WHOLE_ABOVE = 2 * _MB  # a file this small is covered whole by its first and last MB


def local_fingerprint(directory: Path, digests: str | os.PathLike | None = None) -> str:
    """Hash of the bytes that determine a local model's outputs: every weight file whole, the
    config, generation config, tokenizer and chat template; never logs or statistics
    (NOT_MODEL_FILES). A weight file of at most 2 MB enters by its size and its first and last
    MB, which is every byte of it (so the identities of the tiny models are those of earlier
    releases); a larger one by the SHA-256 of its whole content, cached in the results store
    (`digests`) by (path, inode, size, mtime_ns, ctime_ns): read once, not on every job."""
    from benchmark.store import cached_digest

    h = hashlib.sha256()
    for f in sorted(directory.iterdir()):
        if not f.is_file() or f.name in NOT_MODEL_FILES:
            continue
        size = f.stat().st_size
        if f.suffix in CONFIG_SUFFIXES and size < 64 * _MB:
            h.update(json.dumps([f.name, size]).encode())
            h.update(f.read_bytes())
        elif f.suffix in WEIGHT_SUFFIXES:
            h.update(json.dumps([f.name, size]).encode())
            if size <= WHOLE_ABOVE:
                with f.open("rb") as fh:
                    h.update(fh.read(_MB))
                    fh.seek(max(0, size - _MB))
                    h.update(fh.read(_MB))
            else:
                h.update(b"sha256:" + cached_digest(f, digests).encode())
    return h.hexdigest()[:16]


def legacy_fingerprint(directory: Path) -> str:
    """The fingerprint of IDENTITY_VERSION 2 (every config-like file, finetune.json included,
    and of each weight file only its size and first and last MB), for the migration of cells
    named by it (benchmark.migrate). Not an identity: a change in the middle of a large weight
    file goes unseen."""
    h = hashlib.sha256()
    for f in sorted(directory.iterdir()):
        if not f.is_file():
            continue
        if f.suffix in CONFIG_SUFFIXES and f.stat().st_size < 64 * _MB:
            h.update(json.dumps([f.name, f.stat().st_size]).encode())
            h.update(f.read_bytes())
        elif f.suffix in WEIGHT_SUFFIXES:
            size = f.stat().st_size
            h.update(json.dumps([f.name, size]).encode())
            with f.open("rb") as fh:
                h.update(fh.read(_MB))
                fh.seek(max(0, size - _MB))
                h.update(fh.read(_MB))
    return h.hexdigest()[:16]
