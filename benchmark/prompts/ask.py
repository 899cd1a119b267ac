"""ASK / ASK+ prompt variants: basic, enriched, stateful_min, stateful, each with or without the
rationale augmentation (ASK+ paper, Table 2 and appendix 9), with or without the policy hint.

One query per consultation, the six-block prompt: blocks (i)-(iii) in the system message (static
per config: prefix-cache friendly), blocks (iv)-(vi) in the user message. Without rationale the
answer is a single action token; with rationale, thinking mode with a 10-token budget and a
two-line answer `Reason: ...` / `Action: ...`.

The PPO suggestion is shown as the state block's `Autopilot:` line, with the rule that refers
to it; `autopilot=False` (prompt.autopilot=false, the policy-hint ablation) drops both, as
SLM-only (no PPO action) always does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmark.consultants.base import Decoding, sampling_fields
from benchmark.envs.base import Episode, Task
from benchmark.envs.family import family_of
from benchmark.envs.navfeatures import PLANNER_HINTS
from benchmark.prompts import blocks
from benchmark.prompts.base import (
    ActionSession,
    PromptSession,
    PromptVariant,
    act_decoding,
)
from benchmark.prompts.parse import parse_action
from benchmark.prompts.released import ReleasedSession, check_released
from benchmark.vocabulary import LEVELS

STYLES = ("appendix", "released")


def history_block(episode: Episode) -> str:
    """Every step since the episode began, one line each, oldest first."""
    lines = family_of(episode).belief_steps(episode, 0, episode.steps)
    if not lines:
        return "HISTORY: (no step taken yet)"
    return "HISTORY (oldest first):\n" + "\n".join(f"{t}: {x}" for t, x in enumerate(lines))


class AskPrompt(PromptVariant):
    """One ASK/ASK+ prompt level, for every env family (its blocks: benchmark.envs.family)."""

    def __init__(
        self,
        name: str,
        level: str,
        rationale: bool = False,
        map_radius: int = 5,
        thinking_budget: int = 10,
        max_new_tokens: int = 8,
        rationale_max_new_tokens: int = 64,
        autopilot: bool = True,
        sampling: Mapping[str, Any] | None = None,
        planner_hint: str = "frontier",
        history: bool = False,
        style: str = "appendix",
    ):
        """`sampling`: the SLM's sampling settings (`slm.decoding`: temperature, top_p, top_k,
        seed), part of every query's Decoding; None = greedy. `planner_hint`: what the stateful
        levels' `Planner hint:` searches for (seen_target | frontier | none, navfeatures).
        `history`: add the raw history, one line per step since the episode began (the env
        family's step lines: action -> position, or bet -> outcome), never summarised, so the
        context grows with the episode (Agent-BRACE's raw-history baseline, prompt=history).
        `style`: `appendix`, the paper's six-block template (above), or `released`, the released
        code's prompts, parser and answer limits (protocol=official, benchmark.prompts.released)."""
        if level not in LEVELS:
            raise ValueError(f"unknown ASK level {level!r}; allowed: {list(LEVELS)}")
        if int(map_radius) < 1:
            raise ValueError(f"map_radius must be >= 1, got {map_radius!r}")
        self.name = name
        self.level = level
        self.rationale = bool(rationale)
        self.map_radius = int(map_radius)
        if not isinstance(autopilot, bool):
            raise ValueError(f"autopilot must be true or false, got {autopilot!r}")
        self.autopilot = autopilot
        if planner_hint not in PLANNER_HINTS:
            raise ValueError(
                f"prompt.planner_hint={planner_hint!r} is unknown: allowed {list(PLANNER_HINTS)}"
            )
        self.planner_hint = planner_hint
        if not isinstance(history, bool):
            raise ValueError(f"prompt.history must be true or false, got {history!r}")
        self.history = history
        if style not in STYLES:
            raise ValueError(f"prompt.style={style!r} is unknown: allowed {list(STYLES)}")
        self.style = style
        # the history's lines are the family's belief-prompt step lines
        self.parts = ("ask", "belief") if history else ("ask",)
        self.sample = sampling_fields(sampling)
        self.decoding = act_decoding(
            self.rationale, max_new_tokens, rationale_max_new_tokens, thinking_budget, sampling
        )

    def check(self, task: Task) -> None:
        if self.style == "released":
            return check_released(self, task)
        return super().check(task)

    def session(self, episode: Episode, with_expert: bool) -> PromptSession:
        if self.style == "released":
            return ReleasedSession(self, episode, with_expert)
        return AskSession(self, episode, with_expert)


class AskSession(ActionSession):
    """ASK prompts are stateless across queries: everything comes from the view and memory."""

    v: AskPrompt

    def messages(self, ppo_action: int | None) -> list[dict[str, str]]:
        ep, v = self.episode, self.v
        actions = ep.action_names
        shown = ppo_action is not None and v.autopilot
        autopilot = actions[int(ppo_action)] if shown else None
        fam = self.family
        system = fam.system(self.task, actions, v.level, v.rationale, autopilot is not None)
        state = fam.state(
            ep.view(), ep.memory, actions, v.level, autopilot, v.map_radius, v.planner_hint
        )
        if v.history:
            state += "\n\n" + history_block(ep)
        examples = fam.examples(self.task, actions, v.level)
        user = "\n\n".join([state, examples, blocks.output_format(actions, v.rationale)])
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    @property
    def decoding(self) -> Decoding:
        return self.v.decoding

    def parse(self, text: str, actions: tuple[str, ...]) -> str | None:
        return parse_action(text, actions)
