"""The risk objective's guarantee checked on other seeds (tuning.objective=risk): from a cell's
step records on test seeds, the missed-mistake rate (PPO mistakes the gate did not ask about,
over PPO mistakes) and the share of episode-bootstrap resamples in which it stays <= alpha,
which the guarantee says should be at least about 1 - delta."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmark.analysis.quality import episode_counts
from benchmark.analysis.steps import by_episode
from benchmark.metrics import N_BOOT


def missed_mistakes(
    records: Sequence[dict[str, Any]], alpha: float, n_boot: int = N_BOOT, seed: int = 0
) -> dict[str, float | int | None]:
    """miss_rate (pooled), mistakes, and held: the share of resamples (episodes drawn with
    replacement) whose pooled miss rate is <= alpha (resamples without a mistake count as held)."""
    counts = [episode_counts(steps) for steps in by_episode(list(records)).values()]
    wrong = np.array([c["wrong"] for c in counts], float)
    missed = wrong - np.array([c["queried_wrong"] for c in counts], float)
    if wrong.sum() == 0:
        return {"miss_rate": None, "mistakes": 0, "held": None}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(counts), size=(n_boot, len(counts)))
    w, m = wrong[idx].sum(axis=1), missed[idx].sum(axis=1)
    rate = np.divide(m, w, out=np.zeros_like(m), where=w > 0)
    return {
        "miss_rate": float(missed.sum() / wrong.sum()),
        "mistakes": int(wrong.sum()),
        "held": float(np.mean(rate <= alpha + 1e-12)),
    }
