"""The contract between prompt variants and the evaluation loop.

A prompt variant (conf/prompt/<name>.yaml, built with hydra.utils.instantiate) makes one
`PromptSession` per episode. At a gated step the evaluator calls `session.consult(ppo_action)`,
a generator: it yields rounds of `Query`s (usually one round of one query; the belief variant
yields two rounds: update the belief, then act), receives the consultant's `Answer`s for each
round via `send`, and finally returns a `Decision`. All gated episodes' generators advance in
lockstep, so every round is one batched consultant call."""

from __future__ import annotations

import abc
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from benchmark.consultants.base import Answer, Decoding, Query, sampling_fields
from benchmark.envs.base import Episode, Task
from benchmark.envs.family import available_families, family_of, get_family
from benchmark.prompts.blocks import render_line
from benchmark.prompts.parse import parse_reason

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
    # the action SLM-only takes on an invalid answer where the prompt says so (the released
    # code's: FORWARD, HIGHER); None: the evaluator's seeded random valid action
    fallback: int | None = None


def act_decoding(
    rationale: bool,
    max_new_tokens: int,
    rationale_max_new_tokens: int,
    thinking_budget: int,
    sampling: Mapping[str, Any] | None,
) -> Decoding:
    """How a query for the action decodes: a short answer, or with the rationale a longer one
    after a thinking budget; `sampling`: the SLM's sampling settings (`slm.decoding`)."""
    sample = sampling_fields(sampling)
    if rationale:
        return Decoding(
            max_new_tokens=int(rationale_max_new_tokens),
            enable_thinking=True,
            thinking_budget=int(thinking_budget),
            **sample,
        )
    return Decoding(max_new_tokens=int(max_new_tokens), **sample)


class PromptSession(abc.ABC):
    """Per-episode prompt state (belief, policy summary, plan...). Every session words its
    prompts from its variant, its episode and the episode's env family, so they are held here."""

    def __init__(self, variant: PromptVariant, episode: Episode, with_expert: bool):
        self.v = variant
        self.episode = episode
        self.with_expert = with_expert
        self.task = getattr(episode, "task", None)
        self.family = family_of(episode)

    @abc.abstractmethod
    def consult(self, ppo_action: int | None) -> Consultation:
        """`ppo_action` is the PPO suggestion ("autopilot"), None in SLM-only (never shown then)."""


class ActionSession(PromptSession):
    """A session that asks one query per consultation and reads the action from its answer: the
    ASK prompts, in the appendix's wording and in the released code's. Subclasses word the
    messages, say how the query decodes and parse the answer."""

    decoding: Decoding
    # the action SLM-only takes on an unparseable answer where the prompt says so; None: the
    # evaluator's seeded random valid action
    fallback_action: str | None = None

    @abc.abstractmethod
    def messages(self, ppo_action: int | None) -> list[dict[str, str]]:
        """The chat messages of the query; `ppo_action` as in `consult`."""

    @abc.abstractmethod
    def parse(self, text: str, actions: tuple[str, ...]) -> str | None:
        """The action an answer names, None where it names none."""

    def consult(self, ppo_action: int | None) -> Consultation:
        ep = self.episode
        actions = tuple(ep.action_names)
        query = Query(
            messages=self.messages(ppo_action),
            actions=actions,
            render_answer=render_line(self.v.rationale),
            decoding=self.decoding,
            expert=[actions[ep.expert_action()]] if self.with_expert else None,
            rng_key=(ep.seed, ep.steps, 0),
        )
        answers = yield [query]
        text = answers[0].text
        name = self.parse(text, actions)
        fallback = self.fallback_action
        return Decision(
            action=None if name is None else actions.index(name),
            answers=list(answers),
            reason=parse_reason(text),
            fallback=None if fallback is None else actions.index(fallback),
        )


class PromptVariant(abc.ABC):
    """A prompt variant for one or more environment families."""

    name: str
    # True when episodes must run one after another in seed order (state carried across episodes)
    sequential_episodes: bool = False

    parts: tuple[str, ...] = ()  # the env family's prompt parts it words its prompts from

    def check(self, task: Task) -> None:
        """Raise ValueError naming the variant and the supported envs when `task` is unsupported
        (its family lacks one of the `parts`)."""
        for part in self.parts:
            check_family(self, task, part)

    @abc.abstractmethod
    def session(self, episode: Episode, with_expert: bool) -> PromptSession:
        """A fresh session; `with_expert` asks it to fill Query.expert (for the oracle)."""


def check_family(variant: PromptVariant, task: Task, part: str) -> None:
    """Fail unless the task's env family has the prompts of `part` (ask, belief, feedback)."""
    fam = family_of(task)
    if not fam.supports(part):
        families = [f for f in available_families() if get_family(f).supports(part)]
        raise ValueError(
            f"prompt variant {variant.name!r} does not support env {getattr(task, 'name', task)!r} "
            f"(family {fam.name!r}); supported families: {families}"
        )


def consult_all(
    consultations: list[Consultation], answer: Callable[[list[Query]], list[Answer]] | None
) -> list[Decision]:
    """The one consultation driver: advance every consultation generator in lockstep; each
    round is ONE batched `answer` call (a consultant's, or the prompt showcase's scripted one)."""
    decisions: list[Decision | None] = [None] * len(consultations)
    pending: dict[int, list] = {}
    for k, gen in enumerate(consultations):
        _advance(k, gen, None, pending, decisions)
    while pending:
        order = list(pending)
        flat = [q for k in order for q in pending[k]]
        answers = answer(flat) if flat else []
        cursor, rounds = 0, {}
        for k in order:
            n = len(pending[k])
            rounds[k] = answers[cursor : cursor + n]
            cursor += n
        pending = {}
        for k in order:
            _advance(k, consultations[k], rounds[k], pending, decisions)
    return decisions  # type: ignore[return-value]


def _advance(
    k: int, gen: Consultation, answers: list[Answer] | None, pending: dict, out: list
) -> None:
    try:
        pending[k] = next(gen) if answers is None else gen.send(answers)
    except StopIteration as stop:
        out[k] = stop.value


HYDRA_KEYS = frozenset({"_target_", "_recursive_", "_convert_", "_partial_"})


def prompt_keys(prompt: Any) -> frozenset[str]:
    """The keys the `prompt` node may hold: its variant's constructor arguments, and Hydra's."""
    import inspect

    from hydra.utils import get_class

    params = inspect.signature(get_class(str(prompt.get("_target_"))).__init__).parameters
    return (
        frozenset(k for k, p in params.items() if k != "self" and p.kind != p.VAR_KEYWORD)
        | HYDRA_KEYS
    )


def check_choice_scoring(prompt: Any, task: Task) -> None:
    """slm.decoding.mode=choices needs a prompt with an answer choice scoring can score
    (`scores_choices`, asked of the queries of one real consultation); else every answer would
    silently be generated."""
    from hydra.utils import instantiate

    from benchmark.consultants.base import scores_choices

    variant = instantiate(prompt)
    variant.check(task)
    consultation = variant.session(task.episode(0), False).consult(0)
    queries, rounds = [], next(consultation)
    try:
        while True:  # every round of one consultation, answered in the prompt's own format
            queries += rounds
            rounds = consultation.send([Answer(q.render_answer(q.actions[0], "x")) for q in rounds])
    except StopIteration:
        pass
    if any(scores_choices(q) for q in queries):
        return
    rationale = prompt.get("rationale")
    raise ValueError(
        f"slm.decoding.mode=choices cannot score any answer of prompt={prompt.get('name')}"
        + (f" with prompt.rationale={str(rationale).lower()}" if rationale else "")
        + ": choice scoring answers a query whose answer is one bare action, and this prompt's "
        "answers carry a reason, a belief update or a plan; allowed slm.decoding.mode=generate, "
        "or a prompt whose answer is one action (an ASK prompt with prompt.rationale=false)"
    )
