"""The released code's ASK prompts (protocol=official, `prompt.style=released`): the prompt its
eval scripts build for the env (its env family's `released` texts), sent as one user message
without a system message and without thinking, its answer lengths, its parser, and the action its
SLM-only loop takes on an unparseable answer. tests/test_official_parity.py runs the released
code beside it on the same states."""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchmark.consultants.base import Decoding
from benchmark.prompts.base import ActionSession
from benchmark.prompts.parse import parse_released

if TYPE_CHECKING:
    from benchmark.prompts.ask import AskPrompt

HISTORY = 8  # --prompt-history: the recent actions / decisions its stateful prompts show
STATEFUL = ("stateful_min", "stateful")


class ReleasedSession(ActionSession):
    """One episode's prompts as the released code words them; its stateful levels keep the
    released episodic state from the session's start (the episode's, in an evaluation)."""

    v: AskPrompt

    def __init__(self, variant: AskPrompt, episode, with_expert: bool):
        super().__init__(variant, episode, with_expert)
        self.text = self.family.released(self.task)
        if self.text is None:
            raise ValueError(f"the released code has no prompts for env {self.task.name!r}")
        self.state = self.text.start(episode) if variant.level in STATEFUL else None
        limit = (
            self.text.rationale_max_new_tokens if variant.rationale else self.text.max_new_tokens
        )
        self.decoding = Decoding(
            max_new_tokens=limit, enable_thinking=False, answer_text="released", **variant.sample
        )
        self.fallback_action = self.text.fallback

    def messages(self, ppo_action: int | None) -> list[dict[str, str]]:
        ep, v = self.episode, self.v
        shown = ppo_action is not None and v.autopilot
        autopilot = ep.action_names[int(ppo_action)] if shown else None
        text = self.text.prompt(
            ep, self.state, v.level, v.rationale, autopilot, v.map_radius, HISTORY
        )
        return [{"role": "user", "content": text}]

    def parse(self, text: str, actions: tuple[str, ...]) -> str | None:
        return parse_released(text, self.text.tokens, self.v.rationale)


def check_released(variant: AskPrompt, task) -> None:
    """Fail unless the released code has prompts for `task` at the variant's level."""
    from benchmark.envs.family import family_of

    text = family_of(task).released(task)
    name = getattr(task, "name", task)
    if text is None:
        raise ValueError(
            f"prompt.style=released: the released code has no prompts for env {name!r} "
            "(it has FourRooms, DoorKey-8x8 and HigherLower)"
        )
    if variant.level not in text.levels:
        raise ValueError(
            f"prompt.style=released: the released code has no level {variant.level!r} for env "
            f"{name!r}; it has {list(text.levels)}"
        )
    if variant.history:
        raise ValueError("prompt.style=released has no raw-history block (prompt.history)")
