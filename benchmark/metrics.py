"""Per-episode and summary metrics with 95% bootstrap CIs (ASK+ paper definitions):
IR = queried steps / steps, OR = steps whose action differs from PPO's / steps,
invalid_rate = invalid answers / queries."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

SUMMARY_METRICS = ("reward", "success", "accuracy", "length", "ir", "or", "invalid_rate")
N_BOOT = 2000


def bootstrap_ci(
    values: Sequence[float], seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean over episodes."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if x.size == 0:
        return (math.nan, math.nan)
    if x.size == 1:
        return (float(x[0]), float(x[0]))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(N_BOOT, x.size))].mean(axis=1)
    alpha = (1 - level) / 2
    return (float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha)))


def paired_difference(a: Sequence[float], b: Sequence[float], seed: int = 0) -> dict[str, float]:
    """Mean of a - b over the same seeds, with a bootstrap CI of the paired difference."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    low, high = bootstrap_ci(d.tolist(), seed=seed)
    return {"diff_mean": float(d.mean()), "diff_ci95_low": low, "diff_ci95_high": high}


def episode_rates(row: dict) -> dict:
    """Add ir / or / invalid_rate to an episode row from its counts."""
    steps = max(int(row["length"]), 1)
    row["ir"] = row["queries"] / steps
    row["or"] = None if row.get("overwrites") is None else row["overwrites"] / steps
    row["invalid_rate"] = row["invalid"] / row["queries"] if row["queries"] else 0.0
    return row


def summarize(rows: list[dict]) -> dict[str, float]:
    """`<metric>_mean`, `<metric>_ci95_low`, `<metric>_ci95_high` for every metric present, plus
    pooled rates and totals (cost)."""
    out: dict[str, float] = {"n_episodes": len(rows)}
    for metric in SUMMARY_METRICS:
        values = [r.get(metric) for r in rows]
        values = [v for v in values if v is not None]
        if not values:
            continue
        out[f"{metric}_mean"] = float(np.mean(values))
        out[f"{metric}_ci95_low"], out[f"{metric}_ci95_high"] = bootstrap_ci(values)
    steps = sum(r["length"] for r in rows)
    queries = sum(r["queries"] for r in rows)
    out["ir_pooled"] = queries / steps if steps else 0.0
    out["invalid_rate_pooled"] = sum(r["invalid"] for r in rows) / queries if queries else 0.0
    for total in ("queries", "invalid", "prompt_tokens", "generated_tokens", "consultant_seconds"):
        out[f"{total}_total"] = float(sum(r.get(total, 0) for r in rows))
    out["steps_total"] = float(steps)
    return out
