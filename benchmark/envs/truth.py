"""The true state of an episode at one step, and belief claims checked against it: the ground
truth that Agent-BRACE's rewards, the belief analysis and the families' claim rules share (the
suite knows the true grid, inventory, doors and card history exactly, so claims are verified by
program, not by an LLM judge)."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from benchmark.envs.base import Memory
from benchmark.envs.family import Family, available_families, family_of, get_family
from benchmark.vocabulary import LABEL_P, VERDICT_SCORE, split_claim


@dataclass
class Truth:
    """The true state at one step, frozen (the episode moves on): the simulator's view, a copy of
    the episodic memory (what was observed so far) and the action names."""

    view: Any  # the family's view (NavView, CardView, ...)
    memory: Memory
    action_names: tuple[str, ...]
    step: int
    family: str  # the env family's name: its teacher and claim rules (Family.brace_*)

    @property
    def brace(self) -> Family:
        """The family that builds the teacher's belief and verifies claims at this state."""
        fam = get_family(self.family)
        if not fam.supports("brace"):
            able = [f for f in available_families() if get_family(f).supports("brace")]
            raise NotImplementedError(
                f"env family {self.family!r} has no Agent-BRACE support (Family.brace_teacher "
                f"and Family.brace_rules); families with it: {able}"
            )
        return fam


def snapshot(episode: Any) -> Truth:
    """The episode's true state now, copied."""
    return Truth(
        copy.deepcopy(episode.view()),
        copy.deepcopy(episode.memory),
        tuple(episode.action_names),
        int(episode.steps),
        family_of(episode).name,
    )


# ----------------------------------------------------------------------------- verifiers
@dataclass(frozen=True)
class Verdict:
    subject: str
    predicate: str
    label: str
    verdict: str  # correct | partial | incorrect | unverifiable


# a claim rule of a family (Family.brace_rules): (subject, pattern on the lower-cased claim text,
# verdict of a match at the true state and label, None when the match verifies nothing)
Rule = tuple[str, re.Pattern[str], Callable[[re.Match[str], "Truth", str], str | None]]


def verify(claim: str, truth: Truth) -> Verdict:
    """One claim against the true state: its (subject, predicate, certainty) and verdict."""
    text, label = split_claim(claim)
    low = text.lower()
    for subject, pattern, rule in truth.brace.brace_rules():
        m = pattern.search(low)
        if m:
            verdict = rule(m, truth, label)
            if verdict is not None:
                return Verdict(subject, text, label, verdict)
    return Verdict("", text, label, "unverifiable")


def truth_probability(claim: str, truth: Truth) -> float | None:
    """The probability that the claim's fact holds at the true state, whatever its label: 1 for
    a true fact, 0 for a false one, the calibrated level (LABEL_P) for a probabilistic claim
    (HigherLower's next card); None when no rule verifies it. The calibration of the labels
    compares these with the labels' nominal probabilities."""
    text, _ = split_claim(claim)
    low = text.lower()
    for _subject, pattern, rule in truth.brace.brace_rules():
        m = pattern.search(low)
        if not m:
            continue
        probe = {lb: rule(m, truth, lb) for lb in LABEL_P}
        if all(v is None for v in probe.values()):
            continue  # this rule verifies only an 'unknown' claim: as verify, try the next
        if probe["confirmed"] == "correct":
            return 1.0
        if probe["doubtful"] == "correct":
            return 0.0
        right = [lb for lb, v in probe.items() if v == "correct"]
        return LABEL_P[right[0]] if right else None
    return None


def correctness(claims: Sequence[str], truth: Truth) -> float:
    """Mean verdict score over the verifiable claims (0 when none is verifiable)."""
    scores = [
        VERDICT_SCORE[v.verdict]
        for v in (verify(c, truth) for c in claims)
        if v.verdict != "unverifiable"
    ]
    return sum(scores) / len(scores) if scores else 0.0
