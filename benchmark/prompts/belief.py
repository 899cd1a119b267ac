"""Belief-state prompting (after Agent-BRACE): the consultant keeps a verbalized belief instead
of the raw history, so the context stays near-constant however long the episode runs.

The belief is a list of atomic claims, one per line, each carrying exactly one certainty label
from a 7-level scale. It covers location, map/exits, goal-relevant objects, inventory and
subtask progress, and never holds plans. Every consultation has two rounds:
1. update: (task, previous belief, observations since the last consultation, current view)
   -> new belief, written inside <belief_state> tags;
2. act: (task, belief, current view) -> action (one token, or Reason/Action with rationale).
An update with no valid claim keeps the previous belief (counted in `update_failures`).

Two switches serve Agent-BRACE's appendix ablations (their defaults are the paper's method):
`labels="binary"` shows the binary scale (confirmed / unknown) and reads every parsed claim on
it; `coverage=False` drops the domain-specific MANDATORY COVERAGE line (the belief prompt
without task-specific structure)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from benchmark.consultants.base import Decoding, Query, sampling_fields
from benchmark.envs.base import Episode
from benchmark.envs.family import family_of
from benchmark.prompts import blocks
from benchmark.prompts.base import (
    Consultation,
    Decision,
    PromptSession,
    PromptVariant,
    act_decoding,
)
from benchmark.prompts.blocks import render_line
from benchmark.prompts.parse import parse_action, parse_reason
from benchmark.vocabulary import LABELS, SCALES, on_scale, strip_thinking

LABEL_MEANING = {
    "confirmed": "directly observed and not contradicted since",
    "almost certain": "inferred from strong evidence",
    "probable": "more likely than not",
    "possible": "plausible, little evidence either way",
    "unlikely": "less likely than not",
    "doubtful": "evidence points against it",
    "unknown": "no evidence yet",
}
# the binary scale's two levels (the binary-label ablation: certain / unknown)
BINARY_MEANING = {
    "confirmed": "certain: observed, or inferred from strong evidence",
    "unknown": "not certain: little or no evidence, or evidence either way",
}
COVERAGE = "location, map and exits, goal-relevant objects, inventory, subtask progress"
_LABEL_RE = re.compile(r"\b(" + "|".join(re.escape(lb) for lb in LABELS) + r")\b", re.IGNORECASE)
_BRACKETED = re.compile(
    r"[\[(]\s*(" + "|".join(re.escape(lb) for lb in LABELS) + r")\s*[\])]", re.IGNORECASE
)
_PLAN_WORDS = re.compile(
    r"\b(should|plan|plans|planning|next action|intend|going to|recommend|will (?:go|move|turn))\b",
    re.IGNORECASE,
)
_BULLET = re.compile(r"^\s*(?:[-*•]+|\d+[.)])\s*")
BELIEF_BLOCK = re.compile(r"<belief_state>(.*?)(?:</belief_state>|$)", re.IGNORECASE | re.DOTALL)
INITIAL_BELIEF = ["- nothing has been observed yet [unknown]"]
BELIEF_ROLE = "belief"  # Query.role of the update round (a two-model consultant routes on it)


def parse_belief(text: str | None, max_claims: int = 12) -> list[str]:
    """Valid claims as '- <claim> [<label>]' lines ([] if none). A line is valid when it carries
    exactly one label (a bracketed one wins over label words in the prose), has a claim left
    after removing the label, and states no plan."""
    if not text:
        return []
    visible, _ = strip_thinking(text)
    m = BELIEF_BLOCK.search(visible)
    body = m.group(1) if m else visible
    claims: list[str] = []
    for raw in body.splitlines():
        line = _BULLET.sub("", raw).strip()
        if not line or _PLAN_WORDS.search(line):
            continue
        bracketed = _BRACKETED.findall(line)
        if len(bracketed) == 1:
            label = bracketed[0].lower()
            claim = _BRACKETED.sub(" ", line)
        elif not bracketed:
            found = _LABEL_RE.findall(line)
            if len(found) != 1:
                continue
            label = found[0].lower()
            claim = _LABEL_RE.sub(" ", line)
        else:
            continue
        claim = re.sub(r"\s+", " ", claim).strip(" :-—,;").strip()
        if len(claim) < 3:
            continue
        claims.append(f"- {claim} [{label}]")
        if len(claims) == max_claims:
            break
    return claims


def observed_claims(episode: Episode) -> list[str]:
    """Claims that the current view and memory establish (what the oracle writes as its belief
    update): exact where observed, 'unknown' where nothing was seen (the env family's claims)."""
    return family_of(episode).belief_claims(episode)


def observations_since(episode: Episode, since: int, limit: int = 20) -> str:
    """What happened between the previous consultation (at step `since`) and now."""
    mem = episode.memory
    actions = mem.actions[since:]
    if not actions:
        return "(no new steps since the last update)"
    skipped = max(0, len(actions) - limit)
    parts = family_of(episode).belief_steps(episode, since, limit)
    more = f"(+{skipped} earlier steps) " if skipped else ""
    reward = sum(mem.rewards[since:])
    return f"steps {since}..{episode.steps}: {more}" + "; ".join(parts) + f"; reward {reward:g}"


class BeliefPrompt(PromptVariant):
    """Two-round belief-state prompting, for the env families that declare belief claims."""

    parts = ("belief",)

    def __init__(
        self,
        name: str,
        rationale: bool = False,
        thinking_budget: int = 10,
        max_new_tokens: int = 8,
        rationale_max_new_tokens: int = 64,
        belief_max_new_tokens: int = 192,
        max_claims: int = 12,
        map_radius: int = 5,  # unused: the belief replaces the map window
        sampling: Mapping[str, Any] | None = None,  # slm.decoding (temperature, top_p, top_k, seed)
        labels: str = "seven",  # the certainty scale: seven (the paper's) | binary
        coverage: bool = True,  # the MANDATORY COVERAGE line (false: no task-specific structure)
    ):
        if labels not in SCALES:
            raise ValueError(f"prompt labels={labels!r}: allowed {', '.join(SCALES)}")
        if not isinstance(coverage, bool):
            raise ValueError(f"prompt coverage={coverage!r}: allowed true, false")
        self.name = name
        self.rationale = bool(rationale)
        self.max_claims = int(max_claims)
        self.labels = labels
        self.coverage = coverage
        sample = sampling_fields(sampling)
        self.update_decoding = Decoding(max_new_tokens=int(belief_max_new_tokens), **sample)
        self.act_decoding = act_decoding(
            self.rationale, max_new_tokens, rationale_max_new_tokens, thinking_budget, sampling
        )

    def session(self, episode: Episode, with_expert: bool) -> BeliefSession:
        return BeliefSession(self, episode, with_expert)


class BeliefSession(PromptSession):
    v: BeliefPrompt
    header = "BELIEF"  # what the act round calls the kept state

    def __init__(self, variant: BeliefPrompt, episode: Episode, with_expert: bool):
        super().__init__(variant, episode, with_expert)
        self.belief: list[str] = list(INITIAL_BELIEF)
        self.last_step = 0
        self.update_failures = 0

    def task_text(self) -> str:
        return self.family.belief_task(self.task)

    def current_view(self, autopilot: str | None) -> str:
        ep = self.episode
        return self.family.state(ep.view(), ep.memory, ep.action_names, "basic", autopilot)

    def update_messages(self) -> list[dict[str, str]]:
        meaning = BINARY_MEANING if self.v.labels == "binary" else LABEL_MEANING
        scale = "\n".join(f"- {lb}: {meaning[lb]}" for lb in meaning)
        coverage = f"MANDATORY COVERAGE: {COVERAGE}. " if self.v.coverage else ""
        system = (
            "You are the belief-state tracker of an agent acting under partial observability. "
            "Keep a compact belief: what the agent knows about the environment, with how certain "
            "it is.\n\n"
            "STRICT RULES:\n"
            "- Record only observed facts or facts directly inferred from observations.\n"
            "- Never write plans, intentions, recommendations or next actions.\n\n"
            f"CERTAINTY SCALE (use exactly one label per claim):\n{scale}\n\n"
            "UPDATE RULES:\n"
            "- A new observation overrides any older claim it contradicts; drop stale claims.\n"
            "- Upgrade a claim when new evidence confirms it; downgrade it when evidence weakens it.\n\n"
            f"{coverage}At most {self.v.max_claims} claims.\n\n"
            "FORMAT: one claim per line as '- <claim> [<label>]', all inside "
            "<belief_state> ... </belief_state>. No JSON, no percentages, no key-value pairs."
        )
        user = "\n\n".join(
            [
                self.task_text(),
                "PREVIOUS BELIEF:\n" + "\n".join(self.belief),
                "NEW OBSERVATIONS:\n" + observations_since(self.episode, self.last_step),
                "CURRENT VIEW:\n" + self.current_view(None),
                "Write the updated belief state now.",
            ]
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def act_messages(self, autopilot: str | None) -> list[dict[str, str]]:
        ep = self.episode
        actions = ep.action_names
        system = self.family.system(
            self.task, actions, "basic", self.v.rationale, autopilot is not None
        )
        system += f"\n- Decide from the {self.header} ({self.header_meaning}) and the CURRENT VIEW."
        user = "\n\n".join(
            [
                self.task_text(),
                f"{self.header}:\n" + "\n".join(self.belief),
                "CURRENT VIEW:\n" + self.current_view(autopilot),
                blocks.output_format(actions, self.v.rationale),
            ]
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    header_meaning = "what is known and how surely"

    def parse_update(self, text: str | None) -> list[str]:
        """The new belief of an update's answer ([]: none; the previous one is kept), its
        labels read on the prompt's scale."""
        return on_scale(parse_belief(text, self.v.max_claims), self.v.labels)

    def held_claims(self) -> list[str] | None:
        """The belief as claims to score against the true state (None: no claims)."""
        return list(self.belief)

    def render_belief(self, action_name: str, reason: str) -> str:
        """A valid belief update for the oracle/dice consultants: the observed claims (the
        action name is ignored: a belief holds no plans)."""
        claims = on_scale(observed_claims(self.episode), self.v.labels)
        return "<belief_state>\n" + "\n".join(claims) + "\n</belief_state>"

    def consult(self, ppo_action: int | None) -> Consultation:
        ep = self.episode
        actions = tuple(ep.action_names)
        expert = [actions[ep.expert_action()]] if self.with_expert else None
        update = Query(self.update_messages(), actions, self.render_belief, self.v.update_decoding,
                       expert, (ep.seed, ep.steps, 0), role=BELIEF_ROLE)  # fmt: skip
        first = yield [update]
        claims = self.parse_update(first[0].text)
        if claims:
            self.belief = claims
        else:
            self.update_failures += 1
        self.last_step = ep.steps
        autopilot = None if ppo_action is None else actions[int(ppo_action)]
        act = Query(self.act_messages(autopilot), actions, render_line(self.v.rationale),
                    self.v.act_decoding, expert, (ep.seed, ep.steps, 1))  # fmt: skip
        second = yield [act]
        text = second[0].text
        name = parse_action(text, actions)
        return Decision(
            None if name is None else actions.index(name),
            [*first, *second],
            parse_reason(text),
            belief=self.held_claims(),
            belief_updated=bool(claims),
        )
