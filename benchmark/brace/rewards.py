"""Agent-BRACE's rewards, computed by program against the environment's true state instead of an
LLM judge (the suite knows the true grid, inventory, doors and card history exactly).

R_env (policy model)  = 1 on success, 0 on failure.
R_belief (belief model) = format gate x (w_c correctness + w_t tracking + w_d diversity
                                         + w_s gamma^t x success)
- format gate: the update has a <belief_state> block and every non-empty line in it is a valid
  claim of the suite's belief format (benchmark.prompts.belief.parse_belief), at most max_claims;
- correctness: each (subject, predicate, certainty) claim is verified against the true state:
  correct (1), partially correct (0.5: the fact is right but its certainty label is miscalibrated),
  incorrect (0) or unverifiable (left out); the mean over verifiable claims (0 if none);
- tracking: of the facts the new observation changed (the teacher's claims at t that b(t-1) did
  not already hold), the fraction b(t) captures correctly, less the fraction of b(t)'s claims that
  are stale (carried over from b(t-1) unchanged and now false);
- diversity: normalized Shannon entropy of the certainty labels over the 7 levels;
- gamma^t x success: the episode's success, discounted by the step of the update."""

from __future__ import annotations

import copy
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmark.envs.base import Memory
from benchmark.envs.family import Family, available_families, family_of, get_family
from benchmark.prompts.belief import _BELIEF_BLOCK, LABELS, parse_belief
from benchmark.prompts.parse import strip_thinking

# the probability a certainty label stands for ("unknown": no evidence, no probability)
LABEL_P = {
    "confirmed": 1.0,
    "almost certain": 0.9,
    "probable": 0.7,
    "possible": 0.5,
    "unlikely": 0.3,
    "doubtful": 0.1,
}
VERDICT_SCORE = {"correct": 1.0, "partial": 0.5, "incorrect": 0.0}


def label_for(p: float) -> str:
    """The certainty label of a probability (the nearest level of LABEL_P, ties to the surer)."""
    return min(LABEL_P, key=lambda lb: (abs(LABEL_P[lb] - p), -abs(LABEL_P[lb] - 0.5)))


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


_CLAIM = re.compile(r"^-\s*(.*?)\s*\[([a-z ]+)\]$")
POS = r"\(\s*(\d+)\s*,\s*(\d+)\s*\)"


def fact_verdict(true: bool, label: str, observable: bool = True) -> str:
    """Verdict on a deterministic fact: a true fact is correct when held as near-sure, partial
    when held as a coin toss (or unknown although observable), incorrect when doubted; mirrored
    for a false fact."""
    if label == "unknown":
        return "partial" if observable else ("correct" if not true else "partial")
    p = LABEL_P[label]
    if true:
        return "correct" if p >= 0.9 else "partial" if p >= 0.5 else "incorrect"
    return "correct" if p <= 0.3 else "partial" if p == 0.5 else "incorrect"


def prob_verdict(p_true: float, label: str) -> str:
    """Verdict on a claim whose truth is a probability: correct at the calibrated label, partial
    one level away, else incorrect."""
    if label == "unknown":
        return "partial"
    levels = list(LABEL_P)
    gap = abs(levels.index(label) - levels.index(label_for(p_true)))
    return "correct" if gap == 0 else "partial" if gap == 1 else "incorrect"


# a claim rule of a family (Family.brace_rules): (subject, pattern on the lower-cased claim text,
# verdict of a match at the true state and label, None when the match verifies nothing)
Rule = tuple[str, re.Pattern[str], Callable[[re.Match[str], "Truth", str], str | None]]


def split_claim(claim: str) -> tuple[str, str]:
    """(claim text, label) of one '- <claim> [<label>]' line of parse_belief."""
    m = _CLAIM.match(claim.strip())
    if not m or m[2] not in LABELS:
        raise ValueError(f"not a parsed belief claim: {claim!r} (want '- <claim> [<label>]')")
    return m[1], m[2]


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


# ----------------------------------------------------------------------------- the others
def format_gate(text: str | None, max_claims: int = 12) -> float:
    """1 when the update is a <belief_state> block whose every non-empty line is a valid claim
    (at most max_claims), else 0: a structurally invalid update earns nothing."""
    if not text:
        return 0.0
    visible, _ = strip_thinking(text)
    m = _BELIEF_BLOCK.search(visible)
    if not m or "</belief_state>" not in visible.lower():
        return 0.0
    lines = [ln for ln in m.group(1).splitlines() if ln.strip()]
    if not lines or len(lines) > max_claims:
        return 0.0
    return float(len(parse_belief(m.group(1), max_claims)) == len(lines))


def diversity(claims: Sequence[str]) -> float:
    """Normalized Shannon entropy of the certainty labels over the 7 levels (0: one label)."""
    counts = Counter(split_claim(c)[1] for c in claims)
    n = sum(counts.values())
    if n == 0:
        return 0.0
    h = -sum(k / n * math.log(k / n) for k in counts.values())
    return max(0.0, h / math.log(len(LABELS)))


def tracking(
    previous: Sequence[str], claims: Sequence[str], truth: Truth, teacher: Sequence[str]
) -> float:
    """How well b(t) takes in what the new observation changed: of the teacher's claims at t
    that b(t-1) did not hold, the fraction whose subject b(t) states correctly; minus the
    fraction of b(t)'s claims carried over unchanged from b(t-1) and now false (stale)."""
    prev = {c.strip() for c in previous}
    new_subjects = {verify(c, truth).subject for c in teacher if c.strip() not in prev} - {""}
    verdicts = [verify(c, truth) for c in claims]
    correct = {v.subject for v in verdicts if v.verdict == "correct"}
    captured = len(new_subjects & correct) / len(new_subjects) if new_subjects else 1.0
    stale = sum(
        c.strip() in prev and v.verdict == "incorrect"
        for c, v in zip(claims, verdicts, strict=True)
    )
    return max(0.0, captured - stale / max(1, len(claims)))


@dataclass(frozen=True)
class BeliefWeights:
    """Weights of R_belief's terms (all 1: the paper sums them; the format is a gate)."""

    correctness: float = 1.0
    tracking: float = 1.0
    diversity: float = 1.0
    success: float = 1.0
    gamma: float = 0.99


DEFAULT_WEIGHTS = BeliefWeights()


@dataclass
class BeliefReward:
    total: float
    gate: float
    correctness: float
    tracking: float
    diversity: float
    success: float
    verdicts: list[Verdict] = field(default_factory=list)


def belief_reward(
    text: str | None,
    previous: Sequence[str],
    truth: Truth,
    teacher: Sequence[str],
    success: float,
    weights: BeliefWeights = DEFAULT_WEIGHTS,
    max_claims: int = 12,
) -> BeliefReward:
    """R_belief of one update `text` (the model's raw answer) at the state `truth`, given the
    previous belief b(t-1), the teacher's claims at t and the episode's success (0/1)."""
    gate = format_gate(text, max_claims)
    claims = parse_belief(text, max_claims) if gate else []
    terms = {
        "correctness": correctness(claims, truth) if claims else 0.0,
        "tracking": tracking(previous, claims, truth, teacher) if claims else 0.0,
        "diversity": diversity(claims) if claims else 0.0,
        "success": weights.gamma**truth.step * float(success),
    }
    total = gate * sum(getattr(weights, k) * v for k, v in terms.items())
    verdicts = [verify(c, truth) for c in claims]
    return BeliefReward(total, gate, verdicts=verdicts, **terms)


def env_reward(outcome: dict[str, float]) -> float:
    """R_env of the policy model: +1 for a success, 0 for a failure (HigherLower: a decision
    counts as a success when won; the episode's accuracy is the mean)."""
    if "success" in outcome:
        return float(outcome["success"] > 0)
    if "accuracy" in outcome:
        return float(outcome["accuracy"])
    raise ValueError(f"an outcome without 'success' or 'accuracy': {sorted(outcome)}")
