"""Per-step context length and belief quality (Agent-BRACE): the step-record fields
of a queried step and the summary fields of a cell computed from its step records.

Step-record fields (benchmark.analysis.steps.step_record):
    context_tokens      the longest prompt of the step's consultation rounds in tokens (belief:
                        the update round; stateful prompts: the one round), when the backend
                        counts tokens (the oracle and the dice do not: absent)
    belief_updated      belief-style prompts: whether the update was accepted (False: the
                        previous belief was kept)
    belief_score        the mean verdict of the held belief's verifiable claims against the
                        true state (benchmark.brace.rewards.correctness; None if none verifiable)
    belief_claims       [[label, p_true], ...] per claim held: its certainty label and the
                        probability its fact holds (1 true, 0 false, the calibrated level for a
                        probability claim, None unverifiable): calibration data
The belief fields are present only when the env family can verify claims (Family.brace_rules).

Summary fields (`belief_metrics`, only when the records carry them): context_tokens_mean (per
episode mean over queried steps, CI over episodes), context_tokens_first/last_mean (the first
and last queried step of each episode); belief_correctness_mean (per episode mean of
belief_score, CI), belief_update_failure_rate, belief_calibration {label: n, share_true,
nominal}, belief_ece (the n-weighted mean |share_true - nominal| over the labels that name a
probability, i.e. all but 'unknown'); belief_brier (the Brier score of the certainty labels:
the mean over verifiable claims of (nominal - p_true)^2, 'unknown' at nominal 0 as Agent-BRACE
reads it: "unknown corresponds to a nominal probability of approximately 0"), with
belief_brier_first/last_mean (each episode's first and last held step). Per step:
`brier_by_step` (the report's belief_brier plot) and `context_by_step`, each a mean over the
episodes still running at that step (an episode that ended has no records after its end), and
`running_by_step`: how many episodes those are, out of the cell's. A long run's late steps
average the few episodes that have not ended yet (mostly the failing ones), so its curve is read
beside that count."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from benchmark.metrics import bootstrap_ci


def context_tokens(decision: Any) -> int | None:
    """The longest prompt of a queried step's rounds (None when the backend counted none)."""
    if decision is None or not decision.queried or not decision.answers:
        return None
    longest = max(int(a.prompt_tokens) for a in decision.answers)
    return longest or None


def belief_fields(episode: Any, decision: Any) -> dict[str, Any]:
    """The belief fields of a step whose consultation kept a belief (decision.belief), scored
    against the episode's true state now; {} when the env family cannot verify claims."""
    from benchmark.envs.family import family_of
    from benchmark.envs.truth import correctness, snapshot, truth_probability
    from benchmark.vocabulary import split_claim

    if decision is None or decision.belief is None:
        return {}
    if not family_of(episode).supports("brace"):
        return {}
    truth = snapshot(episode)
    claims = list(decision.belief)
    verifiable = [c for c in claims if truth_probability(c, truth) is not None]
    return {
        "belief_updated": bool(decision.belief_updated),
        "belief_score": round(correctness(claims, truth), 4) if verifiable else None,
        "belief_claims": [[split_claim(c)[1], truth_probability(c, truth)] for c in claims],
    }


def _per_episode(records: list[dict], key: str) -> dict[int, list[float]]:
    out: dict[int, list[float]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r["seed"], r["step"])):
        if r.get(key) is not None:
            out[int(r["seed"])].append(float(r[key]))
    return out


def _mean_ci(prefix: str, values: list[float]) -> dict[str, float]:
    low, high = bootstrap_ci(values)
    return {f"{prefix}_mean": float(np.mean(values)), f"{prefix}_ci95_low": low,
            f"{prefix}_ci95_high": high}  # fmt: skip


def calibration(records: list[dict]) -> dict[str, dict[str, float | int | None]]:
    """Per certainty label: how many verifiable claims carried it, the share of them true
    (mean p_true) and the probability the label names (None for 'unknown')."""
    from benchmark.vocabulary import LABEL_P, LABELS

    truths: dict[str, list[float]] = defaultdict(list)
    for r in records:
        for label, p in r.get("belief_claims") or []:
            if p is not None:
                truths[label].append(float(p))
    return {
        lb: {
            "n": len(truths[lb]),
            "share_true": round(float(np.mean(truths[lb])), 4),
            "nominal": LABEL_P.get(lb),
        }
        for lb in LABELS
        if truths[lb]
    }


def claim_brier(label: str, p_true: float) -> float:
    """A claim's squared gap between its label's probability and whether its fact holds."""
    from benchmark.vocabulary import LABEL_P

    return (LABEL_P.get(label, 0.0) - float(p_true)) ** 2


def step_brier(record: dict) -> float | None:
    """The mean Brier score of a step's verifiable claims (None: none verifiable)."""
    gaps = [claim_brier(lb, p) for lb, p in record.get("belief_claims") or [] if p is not None]
    return float(np.mean(gaps)) if gaps else None


def brier_by_step(records: list[dict]) -> tuple[list[int], list[float]]:
    """Mean Brier score per step index over the episodes holding verifiable claims then."""
    return _by_step(records, step_brier)


def belief_metrics(records: list[dict]) -> dict[str, Any]:
    """The cell's context-length and belief summary fields ({} when no record has them)."""
    out: dict[str, Any] = {}
    ctx = _per_episode(records, "context_tokens")
    if ctx:
        out.update(_mean_ci("context_tokens", [float(np.mean(v)) for v in ctx.values()]))
        out["context_tokens_first_mean"] = float(np.mean([v[0] for v in ctx.values()]))
        out["context_tokens_last_mean"] = float(np.mean([v[-1] for v in ctx.values()]))
    held = [r for r in records if "belief_claims" in r]
    if not held:
        return out
    scores = _per_episode(held, "belief_score")
    if scores:
        out.update(_mean_ci("belief_correctness", [float(np.mean(v)) for v in scores.values()]))
    out["belief_steps"] = len(held)
    out["belief_update_failure_rate"] = sum(not r["belief_updated"] for r in held) / len(held)
    cal = calibration(held)
    out["belief_calibration"] = cal
    named = [c for c in cal.values() if c["nominal"] is not None]
    n = sum(c["n"] for c in named)
    if n:
        out["belief_ece"] = sum(c["n"] * abs(c["share_true"] - c["nominal"]) for c in named) / n
    gaps = [claim_brier(lb, p) for r in held for lb, p in r["belief_claims"] if p is not None]
    if gaps:
        out["belief_brier"] = float(np.mean(gaps))
        briers = _per_episode([{**r, "brier": step_brier(r)} for r in held], "brier")
        out["belief_brier_first_mean"] = float(np.mean([v[0] for v in briers.values()]))
        out["belief_brier_last_mean"] = float(np.mean([v[-1] for v in briers.values()]))
    return out


def context_by_step(records: list[dict]) -> tuple[list[int], list[float]]:
    """Mean context_tokens per step index over the episodes queried at that step (the plot)."""
    return _by_step(records, lambda r: r.get("context_tokens"))


def running_by_step(records: list[dict]) -> tuple[list[int], list[int], int]:
    """(steps 0..the last recorded, the episodes still running at each, the cell's episodes):
    an episode runs at step s when it has a record at s or later, so the per-step means above
    rest on these episodes only (fewer when a step was not queried or held no claim)."""
    last: dict[int, int] = {}
    for r in records:
        seed, step = int(r["seed"]), int(r["step"])
        if step < 0:
            raise ValueError(f"step record of seed {seed} has step {step}; steps count from 0")
        last[seed] = max(step, last.get(seed, 0))
    if not last:
        return [], [], 0
    ends = np.bincount(list(last.values()))  # episodes whose last step is s
    running = ends[::-1].cumsum()[::-1]  # whose last step is s or later
    return list(range(len(running))), [int(n) for n in running], len(last)


def _by_step(records: list[dict], value: Any) -> tuple[list[int], list[float]]:
    by: dict[int, list[float]] = defaultdict(list)
    for r in records:
        v = value(r)
        if v is not None:
            by[int(r["step"])].append(float(v))
    steps = sorted(by)
    return steps, [float(np.mean(by[s])) for s in steps]
