"""Aggregates over envs (tasks) and training seeds (runs) the way RL papers now report them
(Agarwal et al. 2021, "Deep RL at the edge of the statistical precipice"): the interquartile mean
(IQM) of a method's scores with a stratified bootstrap CI, and the probability of improvement of
one method over another.

These follow rliable's definitions (aggregate_iqm, probability_of_improvement, its stratified
bootstrap: runs resampled within each task). rliable itself is not used: its bootstrap comes from
`arch<8`, whose 7.x releases fail to import with pandas 3 (the suite's pandas), and rliable 1.2
refuses arch 8. The few lines below are checked against hand computations in
tests/analysis/test_aggregate.py.

A score matrix is (runs, tasks): one row per training seed, one column per env."""

from __future__ import annotations

import numpy as np
from scipy.stats import trim_mean

N_BOOT = 2000


def iqm(scores: np.ndarray) -> float:
    """The mean of the middle 50% of all scores (25% trimmed from each end)."""
    return float(trim_mean(np.asarray(scores, float), 0.25, axis=None))


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) + 1/2 P(X = Y) over the runs of each task, averaged over tasks."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    per_task = [
        float(np.mean((xs[:, None] > ys[None, :]) + 0.5 * (xs[:, None] == ys[None, :])))
        for xs, ys in zip(x.T, y.T, strict=True)
    ]
    return float(np.mean(per_task))


def _resample(scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One stratified bootstrap draw: runs drawn with replacement within each task."""
    runs, tasks = scores.shape
    idx = rng.integers(0, runs, size=(runs, tasks))
    return np.take_along_axis(scores, idx, axis=0)


def iqm_ci(
    scores: np.ndarray, n_boot: int = N_BOOT, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """(IQM, CI low, CI high): percentile CI of a stratified bootstrap."""
    scores = np.asarray(scores, float)
    rng = np.random.default_rng(seed)
    boots = [iqm(_resample(scores, rng)) for _ in range(n_boot)]
    a = (1 - level) / 2
    return iqm(scores), float(np.quantile(boots, a)), float(np.quantile(boots, 1 - a))


def improvement_ci(
    x: np.ndarray, y: np.ndarray, n_boot: int = N_BOOT, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """(P(X > Y), CI low, CI high); both methods resampled, each stratified by task."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    rng = np.random.default_rng(seed)
    boots = [
        probability_of_improvement(_resample(x, rng), _resample(y, rng)) for _ in range(n_boot)
    ]
    a = (1 - level) / 2
    return (
        probability_of_improvement(x, y),
        float(np.quantile(boots, a)),
        float(np.quantile(boots, 1 - a)),
    )
