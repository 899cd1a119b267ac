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

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmark.envs.truth import Truth, Verdict, correctness, verify
from benchmark.prompts.belief import BELIEF_BLOCK, parse_belief
from benchmark.vocabulary import LABELS, split_claim, strip_thinking


def format_gate(text: str | None, max_claims: int = 12) -> float:
    """1 when the update is a <belief_state> block whose every non-empty line is a valid claim
    (at most max_claims), else 0: a structurally invalid update earns nothing."""
    if not text:
        return 0.0
    visible, _ = strip_thinking(text)
    m = BELIEF_BLOCK.search(visible)
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


def episode_rewards(rows: Sequence[dict[str, Any]]) -> dict[int, float]:
    """R_env of each episode row the Evaluator returns, by seed."""
    return {
        r["seed"]: env_reward({k: r[k] for k in ("success", "accuracy") if k in r}) for r in rows
    }
