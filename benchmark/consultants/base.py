"""One small interface for every consultant backend: a batch of queries in, a batch of answers out.

Backends import their heavy dependencies lazily so the core installs lean. Caching wraps a backend
from outside (benchmark.consultants.cache). Parsing happens elsewhere, in exactly one place
(benchmark.prompts.parse)."""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Decoding:
    """Every decoding setting that changes an answer (all of it goes into the cache key)."""

    max_new_tokens: int = 16
    enable_thinking: bool = False  # Qwen3-style thinking mode
    thinking_budget: int = 0  # max thinking tokens when enable_thinking (ASK+ rationale: 10)
    temperature: float = 0.0  # 0 = greedy (only greedy answers are cached)


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


class Consultant(abc.ABC):
    """A backend that answers a batch of queries, in order."""

    needs_expert: bool = False

    @classmethod
    def weights_identity(cls, **backend_args: object) -> str | None:
        """The identity of the weights a backend config names, found without loading them (a
        cell's identity must follow the model's content, not where it lies). None when the
        config itself says it all (dice, oracle, a server's URL and model)."""
        return None

    @property
    @abc.abstractmethod
    def identity(self) -> str:
        """Stable identity of the model behind the answers (hub id + revision or weight hash);
        part of every cache key so one model's answers are never served for another's."""

    @abc.abstractmethod
    def answer(self, queries: list[Query]) -> list[Answer]:
        """Answer every query; same length and order as `queries`."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release processes, sockets or GPU memory."""
