"""Local transformers backend: batched generation with a thinking budget, prefix reuse and
per-query sampling streams.

Requests are grouped by decoding settings, sorted by prompt length (longest first, so an
out-of-memory error shows up on the first batch), generated in left-padded batches of at most
`max_batch_size`, and returned in the original order. A CUDA out-of-memory error halves the
batch and retries. Weights load from safetensors only; remote code runs only when configured.

Thinking budget (Qwen3-style `enable_thinking`): generation first runs for at most
`thinking_budget` new tokens, stopping early at `</think>` or end of text; a thinking block that
is still open is then closed by appending "</think>\\n\\n", and the answer gets its own
`max_new_tokens`. Every appended token counts in `generated_tokens`. Any thinking block, closed
or not, is stripped from the returned text.

On CPU, attention is "prefix_sdpa" (benchmark.consultants.attention): an unpadded suffix on a
cached prefix is attended without the masked rectangle. HFConsultant is composed of parts, each
an object built with what it needs and used through its public methods: the loaded model, its
tokenizer, stops and counters (`runtime`: benchmark.consultants.runtime.ModelRuntime), prefix
reuse and the prefill (`prefix`: benchmark.consultants.prefix.PrefixReuse), choice scoring
(`scorer`: benchmark.consultants.choices.ChoiceScorer) and the lean greedy loop (`lean`:
benchmark.consultants.lean.LeanDecoder); per-query sampling streams (.sampling), the kernel
report (.kernels) and the weights' identity (.fingerprint) are functions beside them. Prompts of
different lengths share a forward or not by `batching`
(benchmark.consultants.prefix.resolve_batching)."""

from __future__ import annotations

import copy
import logging
import os
import secrets
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmark.consultants import attention
from benchmark.consultants.base import (
    Answer,
    Consultant,
    Decoding,
    Query,
    query_seed,
    scores_choices,
)
from benchmark.consultants.choices import ChoiceScorer, choice_answer, token_counts
from benchmark.consultants.errors import ConsultantError
from benchmark.consultants.fingerprint import (
    checked_weights,
    offline_hint,
    resolve_source,
    weights_folder,
)
from benchmark.consultants.finite import finite_watch, raise_nonfinite
from benchmark.consultants.kernels import describe_kernels, kernel_report
from benchmark.consultants.lean import DEFAULT_LEAN_MAX_NEW_TOKENS, LeanDecoder
from benchmark.consultants.penalty import row_penalty
from benchmark.consultants.prefix import (
    DEFAULT_PREFIX_CACHE,
    PrefixReuse,
    Prompt,
    left_padded,
    resolve_batching,
)
from benchmark.consultants.runtime import (
    ModelRuntime,
    chat_prompt,
    neutral_generation_config,
    prompt_ids,
    stop_ids,
)
from benchmark.consultants.sampling import HF_SAMPLING_DEFAULTS, row_sampler
from benchmark.vocabulary import THINK_END, THINK_START, released_answer
from benchmark.vocabulary import strip_thinking as split_thinking

# the prompt and stop helpers live with the runtime; fine-tuning, Agent-BRACE and the benches
# import them from here, as the backend renders and stops (docs/architecture.md)
__all__ = [
    "DTYPES",
    "Generation",
    "HFConsultant",
    "chat_prompt",
    "check_settings",
    "neutral_generation_config",
    "prompt_ids",
    "stop_ids",
    "strip_thinking",
]
DTYPES = ("auto", "bfloat16", "float16", "float32")
THINK_CLOSE = THINK_END + "\n\n"
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


class HFConsultant(Consultant):
    """A causal LM from the Hugging Face hub (`model`, cached locally) or a local `path`.

    Composed of parts that share one `runtime` (benchmark.consultants.runtime.ModelRuntime: the
    model, tokenizer, stops, counters): `prefix` (PrefixReuse: stored prefixes, the prefill of
    length groups), `scorer` (ChoiceScorer) and `lean` (LeanDecoder); the backend renders
    prompts, groups and batches queries, runs `generate` with the thinking budget, and answers."""

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
        batching: str = "auto",
        digests: str | None = None,
    ) -> None:
        """`digests`: the results store's digest cache (benchmark.store; make_consultant passes
        it), so a multi-GB local model is not hashed again on every job. `num_threads` (process-wide torch.set_num_threads; None leaves it alone): on a
        small shared CPU one thread is several times faster than OpenMP threads that contend
        with other processes for the same cores. `prefix_cache`: how many prompt prefixes'
        key/value caches to keep (LRU; 0 = no prefix reuse; benchmark.consultants.prefix).
        `batching`: how prompts of different lengths share a forward (`resolve_batching`:
        auto, padded, by_length)."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if dtype not in DTYPES:
            raise ConsultantError(f"slm.backend.dtype={dtype!r} is not one of {list(DTYPES)}")
        settings = dict(
            max_batch_size=max_batch_size,
            prefix_cache=prefix_cache,
            lean_max_new_tokens=lean_max_new_tokens,
            batching=batching,
        )
        check_settings(**settings)  # fails early on a bad value, before the model loads
        if num_threads is not None:
            torch.set_num_threads(int(num_threads))
        source, local_only, identity = resolve_source(model, path, revision, digests)
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
        folder = weights_folder(source, revision)
        checked_weights(folder, None, source)  # an unreadable or lying header: before loading
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, **common)
            loaded = AutoModelForCausalLM.from_pretrained(
                source, dtype=torch_dtype, device_map=device_map, use_safetensors=True, **common
            )
        except (OSError, ValueError) as exc:
            if path is None and not local_only:
                raise ConsultantError(offline_hint(model, exc)) from exc
            raise ConsultantError(f"cannot load the model at {source!r}: {exc}") from exc
        checked_weights(folder or weights_folder(source, revision), loaded, source)
        loaded.eval()
        self.setup(loaded, tokenizer, identity, **settings)

    uses_digests = True  # make_consultant passes the results store's digest cache
    label = "hf"
    reads_generation_config = True  # model_sampling: the model's generation_config.json
    # prefix KV reuse, the lean decode loop and batching across prompt lengths give token-identical
    # answers (tests/consultants/test_prefix.py, tests/consultants/test_choices.py,
    # tests/consultants/test_batching.py)
    execution_keys = ("prefix_cache", "lean_max_new_tokens", "batching")
    protocol_fields = ("slm_dtype",)  # a hub model's dtype is the protocol's (docs/protocol.md)

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
        **_: object,
    ) -> str | None:
        return resolve_source(model, path, revision, digests)[2]

    # ----------------------------------------------------------------------------- setup
    def setup(
        self,
        model: Any,
        tokenizer: Any,
        identity: str,
        max_batch_size: int = 32,
        prefix_cache: int = DEFAULT_PREFIX_CACHE,
        lean_max_new_tokens: int = DEFAULT_LEAN_MAX_NEW_TOKENS,
        batching: str = "auto",
    ) -> None:
        """Compose the backend on a loaded `model` (in eval mode) and its `tokenizer`, whose
        weights are `identity`: what __init__ does after loading, for a caller that builds the
        model itself (the GPU bench's model in memory). The settings are __init__'s."""
        check_settings(max_batch_size, prefix_cache, lean_max_new_tokens, batching)
        self.max_batch_size = int(max_batch_size)
        self.runtime = ModelRuntime(model, tokenizer, identity)
        vocab = tokenizer.get_vocab()
        self.think_start = vocab.get(THINK_START)
        self.think_end = vocab.get(THINK_END)
        self.close_ids = (
            tokenizer.encode(THINK_CLOSE, add_special_tokens=False)
            if self.think_end is not None
            else []
        )
        attention.install(model)
        self.prefix = PrefixReuse(self.runtime, int(prefix_cache), batching)
        self.scorer = ChoiceScorer(self.runtime, self.prefix)
        self.lean = LeanDecoder(self.runtime, self.prefix, int(lean_max_new_tokens))
        self.kernels = kernel_report(model)
        log.info("%s: %s", self.identity, describe_kernels(self.kernels))

    # the runtime's and the parts' state, as callers have always read (and the benches set) it
    model = property(lambda self: self.runtime.model)
    tokenizer = property(lambda self: self.runtime.tokenizer)
    eos_ids = property(lambda self: self.runtime.eos_ids)
    pad_id = property(lambda self: self.runtime.pad_id)
    prefix_cache = property(lambda self: self.prefix.cache)
    reuses_prefixes = property(lambda self: self.prefix.reuses)

    @property
    def identity(self) -> str:
        return self.runtime.identity

    @property
    def device(self) -> Any:
        return self.runtime.device

    @property
    def batching(self) -> str:
        """How rows of different lengths share a forward ("padded" or "by_length")."""
        return self.prefix.batching

    @batching.setter
    def batching(self, value: str) -> None:
        self.prefix.batching = value

    @property
    def reuse_mode(self) -> str | None:
        """How a reused prefix is laid out (benchmark.consultants.prefix.prefix_reuse_mode)."""
        return self.prefix.reuse_mode

    @reuse_mode.setter
    def reuse_mode(self, value: str | None) -> None:
        self.prefix.reuse_mode = value

    @property
    def lean_max_new_tokens(self) -> int:
        """Greedy answers up to this long take the lean loop (benchmark.consultants.lean)."""
        return self.lean.max_new_tokens

    @lean_max_new_tokens.setter
    def lean_max_new_tokens(self, value: int) -> None:
        self.lean.max_new_tokens = int(value)

    def prefill_stats(self) -> dict[str, int]:
        """Prompt positions the model computed in prefill (`prefill_tokens`, padding included,
        stored-prefix computations included) and what the same calls would have computed without
        prefix reuse (`prefill_tokens_without_reuse`: rows x padded width); `prompt_tokens` counts
        the prompts' own tokens (thinking phase 2 re-reads its prompt); `prefix_hits` /
        `prefix_misses` count batches whose stored prefix was found / had to be computed;
        `prefill_seconds` / `decode_seconds` the time of choice scoring and the lean loop in
        each."""
        return dict(self.runtime.stats)

    def reset_prefill_stats(self) -> None:
        self.runtime.reset_stats()

    def model_sampling(self) -> dict[str, Any]:
        """What `generate` would sample with given no sampling argument
        (slm.decoding.source=model): greedy unless the model's
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
        return prompt_ids(self.tokenizer, query.messages, query.decoding.enable_thinking)

    def choice_ids(self, action: str) -> list[int]:
        """An action's continuation tokens (benchmark.consultants.choices.ChoiceScorer)."""
        return self.scorer.choice_ids(action)

    def choice_logprobs(
        self, queries: list[Query], conts: list[list[list[int]]] | None = None
    ) -> list[tuple[list[float], int, float]]:
        """Per query: the log-likelihood of each valid action's continuation (`choice_ids`; given
        as `conts` where the caller has them) after its prompt, the prompt's length and the
        query's share of its batch's seconds (`ChoiceScorer.logprobs`, in batches of
        `max_batch_size`)."""
        prompts = [self.prompt(q) for q in queries]
        if conts is None:
            conts = [[self.scorer.choice_ids(a) for a in q.actions] for q in queries]
        penalties = [q.decoding.repetition_penalty for q in queries]
        return self.scorer.logprobs(prompts, conts, penalties, self.max_batch_size)

    def score_choices(self, queries: list[Query]) -> list[Answer]:
        """Each query answered with its most likely valid action (benchmark.consultants.choices);
        `Answer.choices` holds every action's probability over the valid set."""
        conts = [[self.scorer.choice_ids(a) for a in q.actions] for q in queries]
        scored = self.choice_logprobs(queries, conts)
        return [
            choice_answer(q.actions, logp, n, seconds, token_counts(q.decoding, c))
            for q, c, (logp, n, seconds) in zip(queries, conts, scored, strict=True)
        ]

    def greedy_config(self, **changes: Any) -> Any:
        """A copy of the generation config this backend decodes greedily with (its stop and pad
        tokens, no sampling), with `changes` applied: for callers that run `model.generate`
        themselves on this backend's model (the bench's rebuilt reference loop)."""
        gc = copy.deepcopy(self.runtime.generation_config)
        gc.update(**changes)
        return gc

    def prompt(self, query: Query) -> Prompt:
        """The prompt ids, the length of its stable prefix and its sampling seed."""
        ids = self.encode(query)
        seed = None
        if query.decoding.sampling:
            seed = query_seed(query)
            if seed is None:
                seed = secrets.randbits(63)
        return Prompt(ids, self.prefix.anchor(query, ids), seed)

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
            Generation(prompts[i], new[i], thinking[i], self._answer_text(prompts[i], new[i], d))
            for i in range(n)
        ]

    def _open(self, ids: list[int]) -> bool:
        """Is a thinking block open at the end of `ids`?"""
        if self.think_start is None:
            return False
        last_start = _rindex(ids, self.think_start)
        return last_start >= 0 and last_start > _rindex(ids, self.think_end)

    def _answer_text(self, prompt: list[int], new: list[int], d: Decoding | None = None) -> str:
        ids = [t for t in new if t not in self.eos_ids]
        if d is not None and d.answer_text == "released":
            return released_answer(self.tokenizer.decode(ids, skip_special_tokens=True))
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
        left-padded, after the shared prefix when one is reused (benchmark.consultants.prefix).
        `offsets`: how many tokens each row has generated before (its sampling stream's
        position)."""
        import torch

        if self.lean.takes(d, max_new):
            return self.lean.decode(seqs, max_new, stop, prompts, d.repetition_penalty)
        n = len(seqs)
        width = max(len(s) for s in seqs)
        # a hybrid model batched "padded" computes rows of different lengths whole (one
        # left-padded forward) rather than one forward per length on the prefix (stacked_cache)
        prefix, stats = self.prefix, self.runtime.stats
        reuse = not (prefix.reuse_mode == "unpadded" and prefix.pads(seqs))
        with torch.inference_mode():
            p, cache = prefix.shared_prefix(seqs, prompts) if reuse else (0, None)
            computed = n * (width - p)
            if (
                cache is not None
                and prefix.reuse_mode == "unpadded"
                and min(map(len, seqs)) < width
            ):
                cache = prefix.stacked_cache(cache, seqs, p)  # plain left padding from here
                p, computed = 0, n  # generate computes each row's last token
            elif cache is not None and n > 1:  # batch 1 -> n (linear layers: no repeat_interleave)
                cache.reorder_cache(torch.zeros(n, dtype=torch.long, device=self.device))
            ids, mask = left_padded(seqs, p, self.pad_id)
            stats["prompt_tokens"] += sum(len(s) for s in seqs)
            stats["prefill_tokens"] += computed
            stats["prefill_tokens_without_reuse"] += n * width
            gc = self.greedy_config(max_new_tokens=max_new, eos_token_id=stop)
            kwargs: dict[str, Any] = {}
            watch = finite_watch(n, self.device)  # first: it sees the model's own logits
            processors: list[Any] = [watch]
            if d.repetition_penalty != 1.0:  # per row, before sampling (as generate orders it)
                gc.update(repetition_penalty=1.0)  # the decoding's penalty, not the model's
                processors.append(row_penalty(d.repetition_penalty, mask))
            if d.sampling:
                seeds = [int(q.seed) for q in prompts]  # type: ignore[arg-type]
                processors.extend(row_sampler(d, seeds, offsets, width))
            from transformers import LogitsProcessorList

            kwargs["logits_processor"] = LogitsProcessorList(processors)
            if cache is not None:
                kwargs[self.runtime.cache_arg] = cache
            out = self.model.generate(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                generation_config=gc,
                **kwargs,
            )
        new_ids, bad = out[:, width:].tolist(), watch.bad.tolist()
        bad_rows = [r for r in range(n) if bad[r]]
        raise_nonfinite(self.runtime, prefix.batching, "generate", bad_rows, seqs)
        rows = []
        for row in new_ids:
            cut = next((k for k, t in enumerate(row) if t in stop), None)
            rows.append(row if cut is None else row[: cut + 1])
        return rows

    def close(self) -> None:
        import torch

        self.prefix.cache.clear()
        self.runtime.model = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def check_settings(
    max_batch_size: Any, prefix_cache: Any, lean_max_new_tokens: Any, batching: Any
) -> None:
    """Refuse a bad execution setting of the hf backend, naming it and what is allowed."""
    if max_batch_size < 1:
        raise ConsultantError(f"slm.backend.max_batch_size={max_batch_size} must be >= 1")
    if isinstance(prefix_cache, bool) or int(prefix_cache) < 0:
        raise ConsultantError(f"slm.backend.prefix_cache={prefix_cache!r} must be >= 0")
    if isinstance(lean_max_new_tokens, bool) or int(lean_max_new_tokens) < 0:
        raise ConsultantError(
            f"slm.backend.lean_max_new_tokens={lean_max_new_tokens!r} must be >= 0"
        )
    resolve_batching(batching, "cpu")


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
