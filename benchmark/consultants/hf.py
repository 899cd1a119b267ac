"""Local transformers backend: batched generation with a thinking budget, prefix reuse and
per-query sampling streams.

Requests are grouped by decoding settings, sorted by prompt length (longest first, so an
out-of-memory error shows up on the first batch), generated in left-padded batches of at most
`max_batch_size`, and returned in the original order. Weights load from safetensors only;
remote code runs only when configured. A batch is generated, with the thinking budget (Qwen3-style
`enable_thinking`), by benchmark.consultants.generation.

On CPU, attention is "prefix_sdpa" (benchmark.consultants.attention): an unpadded suffix on a
cached prefix is attended without the masked rectangle. HFConsultant is composed of parts, each
an object built with what it needs and used through its public methods: the loaded model, its
tokenizer, stops and counters (`runtime`: benchmark.consultants.runtime.ModelRuntime), prefix
reuse and the prefill (`prefix`: benchmark.consultants.prefix.PrefixReuse), choice scoring
(`scorer`: benchmark.consultants.choices.ChoiceScorer), the lean greedy loop (`lean`:
benchmark.consultants.lean.LeanDecoder) and the generation loop with the thinking budget
(`generator`: benchmark.consultants.generation.ThinkingGenerator); per-query sampling streams (.sampling), the kernel
report (.kernels) and the weights' identity (.fingerprint) are functions beside them. Prompts of
different lengths share a forward or not by `batching`
(benchmark.consultants.prefix.resolve_batching)."""

from __future__ import annotations

import logging
import os
import secrets
from dataclasses import replace
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
from benchmark.consultants.generation import Generation, ThinkingGenerator, strip_thinking
from benchmark.consultants.kernels import describe_kernels, kernel_report
from benchmark.consultants.lean import DEFAULT_LEAN_MAX_NEW_TOKENS, LeanDecoder
from benchmark.consultants.prefix import (
    DEFAULT_PREFIX_CACHE,
    PrefixReuse,
    Prompt,
    resolve_batching,
)
from benchmark.consultants.runtime import (
    ModelRuntime,
    chat_prompt,
    neutral_generation_config,
    prompt_ids,
    stop_ids,
)
from benchmark.consultants.sampling import HF_SAMPLING_DEFAULTS

# the prompt and stop helpers live with the runtime, strip_thinking with the generation loop;
# fine-tuning, Agent-BRACE and the benches import them from here, as the backend renders, stops
# and strips (docs/architecture.md)
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
log = logging.getLogger(__name__)


class HFConsultant(Consultant):
    """A causal LM from the Hugging Face hub (`model`, cached locally) or a local `path`.

    Composed of parts that share one `runtime` (benchmark.consultants.runtime.ModelRuntime: the
    model, tokenizer, stops, counters): `prefix` (PrefixReuse: stored prefixes, the prefill of
    length groups), `scorer` (ChoiceScorer), `lean` (LeanDecoder) and `generator`
    (ThinkingGenerator: `generate` with the thinking budget); the backend renders prompts,
    groups and batches queries, and answers."""

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
        attention.install(model)
        self.prefix = PrefixReuse(self.runtime, int(prefix_cache), batching)
        self.scorer = ChoiceScorer(self.runtime, self.prefix)
        self.lean = LeanDecoder(self.runtime, self.prefix, int(lean_max_new_tokens))
        self.generator = ThinkingGenerator(self.runtime, self.prefix, self.lean)
        self.kernels = kernel_report(model)
        log.info("%s: %s", self.identity, describe_kernels(self.kernels))

    # the runtime's and the parts' state, as callers have always read (and the benches set) it
    model = property(lambda self: self.runtime.model)
    tokenizer = property(lambda self: self.runtime.tokenizer)
    eos_ids = property(lambda self: self.runtime.eos_ids)
    pad_id = property(lambda self: self.runtime.pad_id)
    think_start = property(lambda self: self.generator.think_start)
    think_end = property(lambda self: self.generator.think_end)
    close_ids = property(lambda self: self.generator.close_ids)
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
                results = self.generator.run([prompts[i] for i in chunk], decoding)
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
        return self.generator.greedy_config(**changes)

    def prompt(self, query: Query) -> Prompt:
        """The prompt ids, the length of its stable prefix and its sampling seed."""
        ids = self.encode(query)
        seed = None
        if query.decoding.sampling:
            seed = query_seed(query)
            if seed is None:
                seed = secrets.randbits(63)
        return Prompt(ids, self.prefix.anchor(query, ids), seed)

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
