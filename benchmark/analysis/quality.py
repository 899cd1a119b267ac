"""Gate quality against the expert, from a cell's per-step records (benchmark.analysis.steps).

A step is *judged* when PPO acted and the expert has an answer there (`ppo_optimal` is not None);
PPO is *wrong* there when its action is not in the expert's optimal set. Over the judged steps
of a cell, pooled over its episodes:

    ppo_error_rate   wrong / judged
    precision        queried and wrong / queried           (None when nothing was queried)
    recall           queried and wrong / wrong             (0 for PPO-only)
    help_rate        queried, wrong, final action optimal / queried and wrong
    harm_rate        queried, right, final action not optimal / queried and right
    fixed, broken    the same two counts per judged step: ASK's change of the optimal-action
                     rate is fixed - broken, and fixed = ppo_error_rate x recall x help_rate
    auroc_total, auroc_aleatoric, auroc_epistemic
                     the AUROC of each MC-dropout entropy as a detector of a wrong PPO action
                     (the probability that a random wrong step has a higher entropy than a
                     random right one, ties counting one half); only where the gate computed
                     them
    auroc_gate_score the same for a trained gate's own score (gate=learned)

Each comes with a 95% percentile bootstrap CI that resamples episodes (steps of one episode are
not independent). AUROC is the Mann-Whitney rank statistic, computed with numpy (sklearn is not a
dependency); the bootstrap reuses one episode x episode matrix of pair counts, so 2000 resamples
cost a few matrix products."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmark.analysis.steps import by_episode
from benchmark.metrics import N_BOOT, ratio_bootstrap_ci

PREFIX = "gate_"  # summary.json keys: gate_precision, gate_precision_ci95_low, ...
ENTROPIES = ("total", "aleatoric", "epistemic")
SIGNALS = (*ENTROPIES, "gate_score")  # step-record fields whose AUROC is reported
# rate -> (numerator count, denominator count) of `episode_counts`
RATES = {
    "ppo_error_rate": ("wrong", "judged"),
    "precision": ("queried_wrong", "queried"),
    "recall": ("queried_wrong", "wrong"),
    "help_rate": ("helped", "queried_wrong"),
    "harm_rate": ("harmed", "queried_right"),
    "fixed": ("helped", "judged"),
    "broken": ("harmed", "judged"),
}
COUNTS = ("judged", "wrong", "queried", "queried_wrong", "queried_right", "helped", "harmed")


def episode_counts(steps: Sequence[dict[str, Any]]) -> dict[str, int]:
    """The counts of one episode's judged steps (see the module docstring)."""
    c = dict.fromkeys(COUNTS, 0)
    for r in steps:
        if r.get("ppo_optimal") is None:
            continue
        wrong, queried = not r["ppo_optimal"], bool(r["queried"])
        c["judged"] += 1
        c["wrong"] += wrong
        c["queried"] += queried
        c["queried_wrong"] += queried and wrong
        c["queried_right"] += queried and not wrong
        c["helped"] += queried and wrong and bool(r["action_optimal"])
        c["harmed"] += queried and not wrong and not r["action_optimal"]
    return c


def auroc(scores: Sequence[float], positive: Sequence[bool]) -> float | None:
    """P(score of a random positive > score of a random negative) + 1/2 P(equal); None when
    either class is empty."""
    value, _, _ = auroc_ci([scores], [positive], n_boot=0)
    return value


def auroc_ci(
    scores: Sequence[Sequence[float]],
    positive: Sequence[Sequence[bool]],
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float | None, float | None, float | None]:
    """AUROC of the pooled steps of all episodes (one sequence of scores and labels per
    episode) and its percentile bootstrap CI over episodes.

    With C[e, f] = sum over positives i of episode e and negatives j of episode f of
    [s_i > s_j] + 1/2 [s_i = s_j], a resample that takes episode e w_e times has AUROC
    w'Cw / ((w'P)(w'N)), P and N the episodes' positive and negative counts."""
    pos = [np.asarray(s, float)[np.asarray(y, bool)] for s, y in zip(scores, positive, strict=True)]
    neg = [
        np.sort(np.asarray(s, float)[~np.asarray(y, bool)])
        for s, y in zip(scores, positive, strict=True)
    ]
    n_pos = np.array([p.size for p in pos], float)
    n_neg = np.array([n.size for n in neg], float)
    if n_pos.sum() == 0 or n_neg.sum() == 0:
        return (None, None, None)
    e = len(pos)
    all_pos = np.concatenate(pos)
    owner = np.repeat(np.arange(e), [p.size for p in pos])
    pairs = np.zeros((e, e))
    for f, negatives in enumerate(neg):
        if negatives.size == 0:
            continue
        below = np.searchsorted(negatives, all_pos, side="left")
        upto = np.searchsorted(negatives, all_pos, side="right")
        pairs[:, f] = np.bincount(owner, weights=below + 0.5 * (upto - below), minlength=e)
    value = float(pairs.sum() / (n_pos.sum() * n_neg.sum()))
    if n_boot <= 0 or e == 1:
        return (value, value, value)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, e, size=(n_boot, e))
    w = np.zeros((n_boot, e))
    np.add.at(w, (np.arange(n_boot)[:, None], idx), 1.0)
    num = np.einsum("be,ef,bf->b", w, pairs, w)
    den = (w @ n_pos) * (w @ n_neg)
    keep = den > 0
    if not keep.any():
        return (value, None, None)
    values = num[keep] / den[keep]
    alpha = (1 - level) / 2
    return (value, float(np.quantile(values, alpha)), float(np.quantile(values, 1 - alpha)))


def roc_curve(scores: Sequence[float], positive: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    """(false positive rates, true positive rates) of the rule `score >= t` as t falls through
    every distinct score, from (0, 0) to (1, 1)."""
    s = np.asarray(scores, float)
    y = np.asarray(positive, bool)
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last = np.r_[np.diff(s) != 0, True]  # the last index of each run of equal scores
    tp = np.cumsum(y)[last]
    fp = np.cumsum(~y)[last]
    p, n = max(int(y.sum()), 1), max(int((~y).sum()), 1)
    return np.r_[0.0, fp / n], np.r_[0.0, tp / p]


def _rate(num: list[int], den: list[int]) -> tuple[float | None, float | None, float | None]:
    if sum(den) == 0:
        return (None, None, None)
    low, high = ratio_bootstrap_ci(num, den)
    return (sum(num) / sum(den), _finite(low), _finite(high))


def _finite(x: float) -> float | None:
    return None if x is None or math.isnan(x) else float(x)


def gate_quality(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The summary fields (`gate_<rate>`, `gate_<rate>_ci95_low/high`, `gate_auroc_<signal>`
    with its CI, `gate_<count>` totals) of a cell's step records; rates are None where their
    denominator is 0."""
    episodes = list(by_episode(list(records)).values())
    counts = [episode_counts(steps) for steps in episodes]
    out: dict[str, Any] = {f"{PREFIX}{k}": sum(c[k] for c in counts) for k in COUNTS}
    for rate, (num_key, den_key) in RATES.items():
        value, low, high = _rate([c[num_key] for c in counts], [c[den_key] for c in counts])
        out[f"{PREFIX}{rate}"] = value
        out[f"{PREFIX}{rate}_ci95_low"], out[f"{PREFIX}{rate}_ci95_high"] = low, high
    for signal in SIGNALS:
        scores, labels = [], []
        for steps in episodes:
            judged = [r for r in steps if r.get("ppo_optimal") is not None]
            if any(r.get(signal) is None for r in judged):
                scores = None
                break
            scores.append([r[signal] for r in judged])
            labels.append([not r["ppo_optimal"] for r in judged])
        if not scores and signal not in ENTROPIES:
            continue  # only a trained gate's records have a gate_score
        value, low, high = auroc_ci(scores, labels) if scores else (None, None, None)
        key = f"{PREFIX}auroc_{signal}"
        out[key], out[f"{key}_ci95_low"], out[f"{key}_ci95_high"] = value, low, high
    return out


def entropy_detection(records: Sequence[dict[str, Any]], entropy: str):
    """(scores, PPO wrong) of the judged steps that have `entropy`, for ROC curves."""
    rows = [r for r in records if r.get("ppo_optimal") is not None and r.get(entropy) is not None]
    return [r[entropy] for r in rows], [not r["ppo_optimal"] for r in rows]
