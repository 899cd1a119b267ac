"""Agent-BRACE's rewards, computed by program against the environment's true state instead of an
LLM judge (the suite knows the true grid, inventory, doors and card history exactly).

R_env (policy model)  = 1 on success, 0 on failure.
R_belief (belief model) = format score x (w_c correctness + w_t tracking + w_d diversity
                                         + w_s gamma^t x success)
R_belief pays only for checked claims: a claim no rule checks (unverifiable) earns nothing, and
the terms that count bullets count only the claims judged correct, so an invented or unchecked
claim never raises it.
- format score (the multiplier; `format_score`: the authors' released code, continuous): count
  (claims judged correct, distinct, / 8, capped at 1) x share of labelled bullets x
  de-duplication x a length penalty above 20;
- correctness: each (subject, predicate, certainty) claim is verified against the true state:
  correct (1), partially correct (0.5: the fact is right but its certainty label is miscalibrated),
  incorrect (0: a false fact, or a name the game does not contain) or unverifiable (no rule
  checks it: left out); the mean over verifiable claims (0 if none);
- tracking: of the facts the new observation changed (the teacher's claims at t that b(t-1) did
  not already hold), the fraction b(t) captures correctly, less the fraction of b(t)'s checked
  claims that are stale (carried over from b(t-1) unchanged and now false);
- diversity: normalized Shannon entropy of the certainty labels of the claims judged correct over
  the scale's levels (7; 2 on the binary scale);
- gamma^t x success: the episode's success, discounted by the step of the update.

The paper's appendix ablations are settings of `BeliefWeights`: a weight of 0 drops a term,
`format_gate=False` drops the multiplier (the authors' task-reward-only ablation: R_belief =
gamma^t x success), `labels="binary"` reads every claim (the model's, the previous belief's and
the teacher's) on the binary scale (`vocabulary.on_scale`) before it is checked."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmark.envs.truth import Truth, Verdict, correctness, verify
from benchmark.prompts.belief import BELIEF_BLOCK, parse_belief
from benchmark.vocabulary import (
    BELIEF_MAX_BULLETS,
    BINARY_LABELS,
    LABELS,
    SCALES,
    on_scale,
    split_claim,
    strip_thinking,
)

# the authors' format score (their released BeliefStateLMTrainer.compute_format_compliance_score)
MIN_BULLETS = 8  # bullets for full count credit
MAX_BULLETS = BELIEF_MAX_BULLETS  # bullets before the length penalty
MAX_CLAIMS = 40  # claims parsed for the other terms (beyond MAX_BULLETS the penalty acts)


def format_score(text: str | None, checked: int | None = None) -> float:
    """The format multiplier of R_belief as the authors' released code computes it, in [0, 1]:
    count (bullets / 8, capped at 1; `checked` given: that many claims judged correct / 8, so
    R_belief's count credit goes to checked, true claims only) x labelled share (bullets that are valid claims of the
    suite's belief format: a label of the 7-level scale) x de-duplication (distinct bullets,
    case-folded, / bullets) x length penalty (1 up to 20 bullets, else 20 / bullets). Bullets
    are the `-` lines of the <belief_state> block; no closed block, no bullet: 0. Where this
    differs from the authors' code: their labelled share matches 8 label words anywhere in the
    line and leaves out `unknown` (their prompt forbids it); here a bullet counts when it
    parses as one claim with one label of the suite's scale, `unknown` included (the suite's
    belief prompt uses it). The paper's text calls it a binary gate; the code is continuous."""
    if not text:
        return 0.0
    visible, _ = strip_thinking(text)
    m = BELIEF_BLOCK.search(visible)
    if not m or "</belief_state>" not in visible.lower():
        return 0.0
    bullets = [ln.strip() for ln in m.group(1).splitlines() if ln.strip().startswith("-")]
    if not bullets:
        return 0.0
    count = min(1.0, (len(bullets) if checked is None else checked) / MIN_BULLETS)
    labelled = sum(len(parse_belief(b, 1)) == 1 for b in bullets) / len(bullets)
    dedup = len({b.lower() for b in bullets}) / len(bullets)
    length = 1.0 if len(bullets) <= MAX_BULLETS else MAX_BULLETS / len(bullets)
    return count * labelled * dedup * length


def format_pass(text: str | None) -> bool:
    """Whether an update is well-formed, the pass/fail reading of `format_score` without its
    count credit: a closed <belief_state> block of 1 to MAX_BULLETS bullets, every bullet one
    labelled claim, none repeated. A short belief passes (the count term rewards informative
    beliefs, not valid ones); the demo's "format pass rate" is the share of updates passing."""
    if not text:
        return False
    visible, _ = strip_thinking(text)
    m = BELIEF_BLOCK.search(visible)
    if not m or "</belief_state>" not in visible.lower():
        return False
    lines = [ln.strip() for ln in m.group(1).splitlines() if ln.strip()]
    return (
        0 < len(lines) <= MAX_BULLETS
        and all(ln.startswith("-") and len(parse_belief(ln, 1)) == 1 for ln in lines)
        and len({ln.lower() for ln in lines}) == len(lines)
    )


def diversity(claims: Sequence[str], levels: int = len(LABELS)) -> float:
    """Normalized Shannon entropy of the certainty labels over the scale's `levels` (7; the
    binary scale 2): 0 with one label, 1 spread evenly over every level."""
    counts = Counter(split_claim(c)[1] for c in claims)
    n = sum(counts.values())
    if n == 0:
        return 0.0
    h = -sum(k / n * math.log(k / n) for k in counts.values())
    return max(0.0, h / math.log(levels))


def tracking(
    previous: Sequence[str], claims: Sequence[str], truth: Truth, teacher: Sequence[str]
) -> float:
    """How well b(t) takes in what the new observation changed: of the teacher's claims at t
    that b(t-1) did not hold, the fraction whose subject b(t) states correctly; minus the
    fraction of b(t)'s checked claims carried over unchanged from b(t-1) and now false (stale:
    unverifiable claims do not dilute it)."""
    prev = {c.strip() for c in previous}
    new_subjects = {verify(c, truth).subject for c in teacher if c.strip() not in prev} - {""}
    verdicts = [verify(c, truth) for c in claims]
    correct = {v.subject for v in verdicts if v.verdict == "correct"}
    captured = len(new_subjects & correct) / len(new_subjects) if new_subjects else 1.0
    stale = sum(
        c.strip() in prev and v.verdict == "incorrect"
        for c, v in zip(claims, verdicts, strict=True)
    )
    checked = sum(v.verdict != "unverifiable" for v in verdicts)
    return max(0.0, captured - stale / max(1, checked))


TERMS = ("correctness", "tracking", "diversity", "success")  # R_belief's weighted terms


@dataclass(frozen=True)
class BeliefWeights:
    """How R_belief is made: the weights of its terms (all 1: the paper sums them), whether the
    format score multiplies the sum (`format_gate`) and the certainty scale claims are read on
    (`labels`: seven, or binary for the binary-label ablation). The defaults are the paper's
    method; the appendix ablations set the others (conf/brace/*.yaml, `brace.reward`)."""

    correctness: float = 1.0
    tracking: float = 1.0
    diversity: float = 1.0
    success: float = 1.0
    gamma: float = 0.99
    format_gate: bool = True
    labels: str = "seven"

    def __post_init__(self) -> None:
        for name in TERMS:
            w = getattr(self, name)
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < math.inf:
                raise ValueError(f"reward {name}={w!r}: must be a number >= 0 (0: the term off)")
        if not any(getattr(self, name) for name in TERMS):
            raise ValueError(
                "reward correctness, tracking, diversity and success all 0: R_belief would be 0 "
                "for every update (to keep the belief model as SFT made it: train_belief=false)"
            )
        if not isinstance(self.format_gate, bool):
            raise ValueError(f"reward format={self.format_gate!r}: allowed true, false")
        if self.labels not in SCALES:
            raise ValueError(f"labels={self.labels!r}: allowed {', '.join(SCALES)}")


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
    max_claims: int = MAX_CLAIMS,
) -> BeliefReward:
    """R_belief of one update `text` (the model's raw answer) at the state `truth`, given the
    previous belief b(t-1), the teacher's claims at t and the episode's success (0/1); `gate`
    is the format score (`format_score`), the multiplier unless `weights.format_gate` is off
    (then the claims are scored whatever the format, and the sum is R_belief). Only claims
    judged correct earn the format's count and the diversity term: an unchecked or invented
    claim never raises R_belief."""
    gate = format_score(text)
    scale = weights.labels
    claims = (
        on_scale(parse_belief(text, max_claims), scale) if gate or not weights.format_gate else []
    )
    verdicts = [verify(c, truth) for c in claims]
    right = [c for c, v in zip(claims, verdicts, strict=True) if v.verdict == "correct"]
    if gate:
        gate = format_score(text, checked=len({c.lower() for c in right}))
    if scale != "seven":
        previous, teacher = on_scale(previous, scale), on_scale(teacher, scale)
    levels = len(BINARY_LABELS) if scale == "binary" else len(LABELS)
    terms = {
        "correctness": correctness(claims, truth) if claims else 0.0,
        "tracking": tracking(previous, claims, truth, teacher) if claims else 0.0,
        "diversity": diversity(right, levels),
        "success": weights.gamma**truth.step * float(success),
    }
    total = (gate if weights.format_gate else 1.0) * sum(
        getattr(weights, k) * v for k, v in terms.items()
    )
    return BeliefReward(total, gate, verdicts=verdicts, **terms)


def env_reward(outcome: dict[str, float]) -> float:
    """R_env of the policy model: +1 for a success, 0 for a failure (HigherLower: a decision
    counts as a success when won; the episode's accuracy is the mean)."""
    if "success" in outcome:
        return float(outcome["success"] > 0)
    if "accuracy" in outcome:
        return float(outcome["accuracy"])
    raise ValueError(f"an outcome without 'success' or 'accuracy': {sorted(outcome)}")


def episode_rewards(rows: Sequence[dict[str, Any]]) -> dict[int, float]:
    """R_env of each episode row the Evaluator returns, by seed."""
    return {
        r["seed"]: env_reward({k: r[k] for k in ("success", "accuracy") if k in r}) for r in rows
    }
