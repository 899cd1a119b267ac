"""One small interface for every consultant backend: a batch of queries in, a batch of answers out.

Backends import their heavy dependencies lazily so the core installs lean. Caching wraps a backend
from outside (benchmark.consultants.cache). Parsing happens elsewhere, in exactly one place
(benchmark.prompts.parse)."""

from __future__ import annotations

import abc
import hashlib
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmark.consultants.errors import ConsultantError
from benchmark.settings import FINETUNED, FINETUNED_PROMPT, added

SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "seed")
# what `slm.decoding` may set
DECODING_FIELDS = (*SAMPLING_FIELDS, "mode", "source", "repetition_penalty", "choice_score")
MODES = ("generate", "choices")  # Decoding.mode
CHOICE_SCORES = ("sum", "mean")  # Decoding.choice_score
SOURCES = ("config", "model")  # Decoding.source
ANSWER_TEXTS = ("suite", "released")  # Decoding.answer_text


@dataclass(frozen=True)
class Decoding:
    """Every decoding setting that changes an answer.

    The prompt variant sets the lengths and thinking mode; the sampling fields come from the
    SLM's config (`slm.decoding`, merged in by the prompt: `sampling_fields`). temperature 0 is
    greedy decoding: top_p, top_k and seed have no effect then and stay out of the response
    cache's key (benchmark.consultants.cache), so keys made before they existed still hit.
    Sampled answers (temperature > 0) are never cached. Each sampled query draws from its own
    stream, seeded from (seed, the query's rng_key, its messages): `query_seed`.

    `mode`, `choice_score`, `source` and `repetition_penalty` came after cells existed: at the
    value those cells used they stay out of a cell's identity (benchmark.settings.added); the
    fine-tuned consultant's cells came after all but `choice_score`, and keep the others. How a
    model is asked (`mode`, `choice_score`, `source`) is no part of a fine-tuned model's key: it
    does not change what the model is trained on."""

    max_new_tokens: int = 16
    enable_thinking: bool = False  # Qwen3-style thinking mode
    thinking_budget: int = 0  # max thinking tokens when enable_thinking (ASK+ rationale: 10)
    temperature: float = 0.0  # 0 = greedy (only greedy answers are cached)
    top_p: float = 1.0  # nucleus sampling: keep the smallest set of tokens with this mass (1 = off)
    top_k: int = 0  # keep the k most likely tokens (0 = off)
    seed: int | None = None  # None: sampled answers are not reproducible
    # "choices": a query whose answer is one bare action is answered by scoring every valid
    # action as a continuation of the prompt (backends that can; docs/protocol.md, "Choice
    # scoring"); other queries (rationale, belief updates, plans) still generate
    mode: str = added("generate", old="generate", outside=(FINETUNED,), kept_in=(FINETUNED_PROMPT,))
    # what "choices" ranks the actions by: "sum", the log-likelihood of the whole continuation
    # (its tokens and the end of the reply), or "mean", that sum over its token count (a long
    # command is not penalised for its length; lm-evaluation-harness's length-normalised score)
    choice_score: str = added("sum", old="sum", outside=(FINETUNED,))
    # where temperature, top_p and top_k come from: "config" (the fields above, from
    # slm.decoding) or "model" (the model's own generation_config.json, as `generate` reads it
    # given no sampling argument: `Consultant.resolve_decoding` replaces them before anything else
    # reads the query, so a resolved decoding is always "config")
    source: str = added("config", old="config", outside=(FINETUNED,), kept_in=(FINETUNED_PROMPT,))
    # transformers' repetition penalty (RepetitionPenaltyLogitsProcessor, vLLM's
    # `repetition_penalty`): the logit of every token already in the prompt or the answer is
    # divided by it (multiplied where negative) before the next token is chosen; 1.0 = off
    repetition_penalty: float = added(1.0, old=1.0, kept_in=(FINETUNED_PROMPT, FINETUNED))
    # how a backend turns generated tokens into the answer text: "suite" drops every thinking
    # block (closed, unterminated, or closed by the prompt); "released" is the released code's
    # (src/ask/slm/model.py): the decoded text, stripped, and only what follows a first
    # `</think>` if one appears (protocol=official, benchmark.prompts.released)
    answer_text: str = "suite"

    def __post_init__(self) -> None:
        if isinstance(self.repetition_penalty, bool) or not (
            isinstance(self.repetition_penalty, (int, float)) and self.repetition_penalty > 0
        ):
            raise ValueError(
                f"slm.decoding.repetition_penalty={self.repetition_penalty!r} must be a number "
                "> 0 (1.0 = off)"
            )
        if self.mode not in MODES:
            raise ValueError(f"slm.decoding.mode={self.mode!r} is not one of {list(MODES)}")
        if self.choice_score not in CHOICE_SCORES:
            raise ValueError(
                f"slm.decoding.choice_score={self.choice_score!r} is not one of "
                f"{list(CHOICE_SCORES)}"
            )
        if self.answer_text not in ANSWER_TEXTS:
            raise ValueError(f"answer_text={self.answer_text!r} is not one of {list(ANSWER_TEXTS)}")
        if self.source not in SOURCES:
            raise ValueError(f"slm.decoding.source={self.source!r} is not one of {list(SOURCES)}")
        if self.mode == "choices" and self.source == "model":
            raise ValueError(
                "slm.decoding.mode=choices answers with the most likely action; it needs "
                "slm.decoding.source=config (source=model samples where the model's own "
                "generation config does)"
            )
        if self.mode == "choices" and self.temperature > 0:
            raise ValueError(
                f"slm.decoding.mode=choices answers with the most likely action; it needs "
                f"temperature=0, got temperature={self.temperature!r}"
            )
        if not self.temperature >= 0:
            raise ValueError(f"decoding temperature={self.temperature!r} must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"decoding top_p={self.top_p!r} must be in (0, 1]")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"decoding top_k={self.top_k!r} must be an integer >= 0")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise ValueError(f"decoding seed={self.seed!r} must be an integer or null")

    @staticmethod
    def check_config(decoding: Mapping[str, Any], backend: type[Consultant] | None) -> None:
        """`slm.decoding` against its `backend` (None: no slm.backend node), before any work.
        source: config or model, model only where the backend reads the model's generation
        config (`Consultant.reads_generation_config`); mode: generate or choices, choices only
        greedy and where the backend can score (`choice_scoring`)."""
        source = decoding.get("source")
        if source is not None and source not in SOURCES:
            raise ValueError(
                f"slm.decoding.source={source!r} is invalid: allowed {list(SOURCES)} "
                "(docs/protocol.md)"
            )
        if backend is None:
            return
        name = backend.label or backend.__name__
        if source == "model" and backend.uses_lm and not backend.reads_generation_config:
            raise ValueError(
                f"slm.decoding.source=model: the {name} backend cannot read the served model's "
                "generation config; set slm.decoding.source=config and slm.decoding.temperature/"
                "top_p/top_k to the model's values"
            )
        penalty = decoding.get("repetition_penalty")
        if penalty is not None and (
            isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not penalty > 0
        ):
            raise ValueError(
                f"slm.decoding.repetition_penalty={penalty!r} is invalid: allowed a number > 0 "
                "(1.0 = off; docs/protocol.md)"
            )
        _check_mode(decoding, backend)

    @property
    def sampling(self) -> bool:
        return self.temperature > 0


def _check_mode(decoding: Mapping[str, Any], backend: type[Consultant]) -> None:
    mode, score = decoding.get("mode"), decoding.get("choice_score")
    if score is not None and score not in CHOICE_SCORES:
        raise ValueError(
            f"slm.decoding.choice_score={score!r} is invalid: allowed {list(CHOICE_SCORES)} "
            "(docs/choices.md)"
        )
    if score not in (None, "sum") and mode != "choices":
        raise ValueError(
            f"slm.decoding.choice_score={score!r} ranks the valid actions of "
            f"slm.decoding.mode=choices; with mode={mode or 'generate'!r} it changes nothing: "
            "set slm.decoding.mode=choices or leave choice_score at sum"
        )
    if mode is None or mode == "generate":
        return
    if mode == "choices" and decoding.get("source") == "model":
        raise ValueError(
            "slm.decoding.mode=choices answers with the most likely action: it needs "
            "slm.decoding.source=config (source=model samples where the model's generation "
            "config does)"
        )
    if mode != "choices":
        raise ValueError(
            f"slm.decoding.mode={mode!r} is invalid: allowed generate, choices (docs/protocol.md)"
        )
    temperature = decoding.get("temperature") or 0
    if temperature > 0:
        raise ValueError(
            f"slm.decoding.mode=choices answers with the most likely action: it needs "
            f"slm.decoding.temperature=0, got {temperature!r}"
        )
    if not backend.choice_scoring:
        raise ValueError(
            f"slm.decoding.mode=choices: the {backend.label or backend.__name__} backend cannot "
            "score the valid actions; allowed slm.decoding.mode=generate"
        )


def sampling_fields(sampling: Mapping[str, Any] | None) -> dict[str, Any]:
    """The `slm.decoding` fields of a `Decoding` from a config mapping (temperature, top_p,
    top_k, seed, mode, source, repetition_penalty, choice_score; missing ones keep their defaults, null = default). Unknown keys fail."""
    if sampling is None:
        return {}
    items = dict(sampling.items())
    unknown = sorted(set(items) - set(DECODING_FIELDS))
    if unknown:
        raise ValueError(
            f"slm.decoding: unknown key(s) {unknown}; allowed: {list(DECODING_FIELDS)}"
        )
    out: dict[str, Any] = {}
    for key, value in items.items():
        if value is None:
            continue
        if key in ("mode", "source", "choice_score"):
            allowed = {"mode": MODES, "source": SOURCES, "choice_score": CHOICE_SCORES}[key]
            if value not in allowed:
                raise ValueError(f"slm.decoding.{key}={value!r} is not one of {list(allowed)}")
            out[key] = str(value)
        elif key == "repetition_penalty":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(
                    f"slm.decoding.repetition_penalty={value!r} must be a number > 0 (1.0 = off)"
                )
            out[key] = float(value)
        elif key in ("temperature", "top_p"):
            out[key] = float(value)
        elif key == "top_k" or key == "seed":
            if isinstance(value, bool) or int(value) != value:
                raise ValueError(f"slm.decoding.{key}={value!r} must be an integer")
            out[key] = int(value)
    return out


def query_seed(query: Query) -> int | None:
    """A sampled query's own seed: a hash of (decoding seed, rng_key, messages), so its draws
    depend on nothing else in its batch (None when the decoding has no seed). rng_key (episode
    seed, step, call) keeps two visits of the same state apart; it is the same in lockstep and
    sequential evaluation."""
    seed = query.decoding.seed
    if seed is None:
        return None
    blob = json.dumps(
        [seed, list(query.rng_key), query.messages],
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return int.from_bytes(hashlib.blake2b(blob.encode("utf-8"), digest_size=8).digest(), "big") >> 1


@dataclass
class Query:
    """One consultant call.

    `messages` is an OpenAI-style chat ([{"role": ..., "content": ...}]). `actions` are the valid
    action tokens. `render_answer(action_name, reason)` writes an answer in the prompt variant's
    output format: the oracle and random consultants answer through it, so the parser reads
    their answers back exactly as it reads an LM's. `expert` (filled only for consultants whose
    `needs_expert` is true) holds the expert's action names: one for a step decision, the whole
    plan for a one-shot plan prompt."""

    messages: list[dict[str, str]]
    actions: tuple[str, ...]
    render_answer: Callable[[str, str], str]
    decoding: Decoding = field(default_factory=Decoding)
    expert: list[str] | None = None
    rng_key: tuple[int, ...] = ()  # (episode seed, step, call) for seeded stochastic consultants
    # which model answers it when a consultant has several (benchmark.brace.roles: "belief" for
    # a belief update, "" = the policy); never part of a cache key (the consultant's identity is)
    role: str = ""


@dataclass
class Answer:
    """One reply. `complete=False` marks a reply the backend does not stand behind (e.g. a
    server's reply cut by max_tokens before any answer text): it is used as it is (counted
    invalid when it does not parse) but never written to the response cache."""

    text: str
    prompt_tokens: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    cached: bool = False
    complete: bool = True
    # choice scoring (Decoding.mode "choices"): each valid action's probability, normalized over
    # the valid actions, in the query's action order; None for a generated answer
    choices: dict[str, float] | None = None


def scores_choices(query: Query) -> bool:
    """Does `query` take choice scoring: mode "choices", no thinking phase, and an answer format
    that is the bare action (render_answer(a, "") == a for every valid action; a rationale, a
    belief update or a JSON answer keeps generation)."""
    d = query.decoding
    if d.mode != "choices" or d.enable_thinking or not query.actions:
        return False
    return all(query.render_answer(a, "") == a for a in query.actions)


class Consultant(abc.ABC):
    """A backend that answers a batch of queries, in order."""

    needs_expert: bool = False
    # whether a cell's episodes may run in several processes with this consultant (eval.workers):
    # False where a model in this process answers (its batches stay whole on one copy)
    shards_episodes: bool = False

    # What the rest of the suite asks of a backend, declared here and nowhere else (docs/
    # consultants.md, "Adding a backend"): cell.py, validate.py, plan.py and protocol.py read
    # these from the class `slm.backend._target_` names, so a backend in another package needs
    # no edit outside its own files.
    # how messages name it ("the openai backend"); its class name when empty
    label: str = ""
    # whether a language model answers (False: the dice, the oracle): the plan counts LM calls
    # and tokens and projects their time only for such cells; decoding settings mean nothing
    uses_lm: bool = True
    # whether `model_sampling` reads the model's own generation config (slm.decoding.source=model)
    reads_generation_config: bool = False
    # whether it can answer slm.decoding.mode=choices by scoring the valid actions
    choice_scoring: bool = True
    # slm.backend keys that never change an answer (how long to wait, what to cache, how to
    # batch): left out of a cell's identity, so setting one never splits a cell
    execution_keys: tuple[str, ...] = ()
    # protocol fields (conf/protocol) whose config key this backend reads (benchmark.protocol)
    protocol_fields: tuple[str, ...] = ()
    # slm keys beside `backend` that its option files set (e.g. a label or a base's name)
    slm_keys: tuple[str, ...] = ()

    @classmethod
    def config_keys(cls) -> frozenset[str]:
        """The slm.backend keys it takes: its constructor's arguments, and those of the class
        it passes `**kwargs` on to, plus Hydra's own. A class that consumes more keys from its
        `**kwargs` than its signature names adds them here."""
        keys = {"_target_", "_recursive_", "_convert_", "_partial_"}
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if klass is object or init is None:
                continue
            params = inspect.signature(init).parameters.values()
            keys.update(p.name for p in params if p.name != "self" and p.kind != p.VAR_KEYWORD)
            if not any(p.kind == p.VAR_KEYWORD for p in params):
                return frozenset(keys)
        return frozenset(keys)

    @classmethod  # noqa: B027 - an optional hook
    def check_config(cls, slm: Mapping[str, Any]) -> None:
        """Fail, naming the bad value and what is allowed, on a value of the `slm` config
        (its `backend` and `decoding`) this backend cannot serve; `consultants.check_slm` calls
        it after the checks every backend shares (`Decoding.check_config`). Nothing to check by
        default."""

    def check_decoding(self, decoding: Decoding) -> None:  # noqa: B027 - an optional hook
        """Fail, naming the setting to change, on decoding settings (the cell's `slm.decoding`)
        that this backend cannot send: make_consultant calls it once, before any work. A
        server that refuses a field does so here (the openai backend); nothing by default."""

    @classmethod
    def weights_identity(cls, **backend_args: object) -> str | None:
        """The identity of the weights a backend config names, found without loading them (a
        cell's identity must follow the model's content, not where it lies). None when the
        config itself says it all (dice, oracle). Never builds, trains or downloads: a model
        made on first use that is not there yet raises `ModelNotBuilt` (the job calls
        `make_weights` first). A served model (the openai backend) is asked of its server."""
        return None

    @classmethod
    def identity_warning(cls, weights: str | None, **backend_args: object) -> str | None:
        """One line saying why a cell of this backend config could be reused for other weights
        (its identity `weights`, from `weights_identity`, does not follow their content), with
        how to give them one; None when it does. The plan and each job show it."""
        return None

    @classmethod  # noqa: B027 - an optional hook
    def make_weights(cls, **backend_args: object) -> None:
        """Make the weights a backend config names when they are made on first use (the tiny
        model, a fine-tuned one); nothing for the others."""

    @classmethod
    def local_dir(cls, **backend_args: object) -> Path | None:
        """The local directory of the weights a backend config names, None when there is none
        (a hub model, a server, the dice); a model not made yet has none either."""
        return None

    @property
    @abc.abstractmethod
    def identity(self) -> str:
        """Stable identity of the model behind the answers (hub id + revision or weight hash);
        part of every cache key so one model's answers are never served for another's."""

    @abc.abstractmethod
    def answer(self, queries: list[Query]) -> list[Answer]:
        """Answer every query; same length and order as `queries`."""

    def model_sampling(self) -> dict[str, Any]:
        """The Decoding sampling fields (temperature, top_p, top_k) that the model's own
        generation config sets, for `slm.decoding.source=model`. A backend that cannot read
        one refuses (the dice and the oracle never ask: they decode nothing)."""
        raise ConsultantError(
            f"slm.decoding.source=model: the {type(self).__name__} backend cannot read the "
            "model's own generation config; set slm.decoding.source=config and "
            "slm.decoding.temperature/top_p/top_k to the model's values"
        )

    def resolve_decoding(self, queries: list[Query]) -> list[Query]:
        """`queries` with every `source="model"` decoding replaced by the model's own sampling
        (`model_sampling`) and marked "config": from here on (cache key, query seed, sampler)
        it is the decoding one would get by writing those values in slm.decoding."""
        if all(q.decoding.source == "config" for q in queries):
            return queries
        own = self.model_sampling()
        return [
            replace(q, decoding=replace(q.decoding, source="config", **own))
            if q.decoding.source == "model"
            else q
            for q in queries
        ]

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release processes, sockets or GPU memory."""
