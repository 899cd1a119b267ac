"""The contract between prompt variants and the evaluation loop.

A prompt variant (conf/prompt/<name>.yaml, built with hydra.utils.instantiate) makes one
`PromptSession` per episode. At a gated step the evaluator calls `session.consult(ppo_action)`,
a generator: it yields rounds of `Query`s (usually one round of one query; the belief variant
yields two rounds: update the belief, then act), receives the consultant's `Answer`s for each
round via `send`, and finally returns a `Decision`. All gated episodes' generators advance in
lockstep, so every round is one batched consultant call."""

from __future__ import annotations

import abc
from collections.abc import Generator
from dataclasses import dataclass, field

from benchmark.consultants.base import Answer, Query
from benchmark.envs.base import Episode, Task

# yield list[Query] -> receive list[Answer] -> ... -> return Decision
Consultation = Generator[list[Query], list[Answer], "Decision"]


@dataclass
class Decision:
    """The outcome of one consultation. `action` is None when the answer was invalid
    (unparseable); the evaluator then keeps the PPO action (or the documented SLM-only fallback)
    and counts it as invalid."""

    action: int | None
    answers: list[Answer] = field(default_factory=list)  # every call made (tokens, seconds)
    reason: str = ""
    queried: bool = True  # False when the session answered from state (e.g. an open-loop plan)
    # belief-style sessions: the belief held after this consultation's update (the one the act
    # round saw) and whether the update was accepted (False: the previous belief was kept);
    # None for other prompts. The step records score it against the true state.
    belief: list[str] | None = None
    belief_updated: bool | None = None


class PromptSession(abc.ABC):
    """Per-episode prompt state (belief, policy summary, plan...)."""

    @abc.abstractmethod
    def consult(self, ppo_action: int | None) -> Consultation:
        """`ppo_action` is the PPO suggestion ("autopilot"), None in SLM-only (never shown then)."""


class PromptVariant(abc.ABC):
    """A prompt variant for one or more environment families."""

    name: str
    # True when episodes must run one after another in seed order (state carried across episodes)
    sequential_episodes: bool = False

    @abc.abstractmethod
    def check(self, task: Task) -> None:
        """Raise ValueError naming the variant and the supported envs when `task` is unsupported."""

    @abc.abstractmethod
    def session(self, episode: Episode, with_expert: bool) -> PromptSession:
        """A fresh session; `with_expert` asks it to fill Query.expert (for the oracle)."""
