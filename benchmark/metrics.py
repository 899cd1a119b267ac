"""Per-episode and summary metrics with 95% bootstrap CIs (ASK+ paper definitions):
IR = queried steps / steps, OR = steps whose action differs from PPO's / steps,
invalid_rate = invalid answers / queries.

Each rate is summarised two ways: `<rate>_mean`, the mean over episodes of the per-episode rate,
and `<rate>_pooled`, the ratio of the sums over all episodes (steps or queries pooled), each with
a bootstrap CI over episodes. `MAIN_FIGURE` names the one the report's main tables show
(docs/protocol.md says why): IR and OR as per-episode means, as the ASK+ paper's Table 1 reports
them; the invalid-answer rate pooled over queries. Every metric is declared once, in `METRICS`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Metric:
    """One metric, declared once: the episode row, the summary, the report's tables, the progress
    lines and the dashboards all read this declaration (`METRICS`), so a new metric is one entry.

    `name`: the episode row's key and the summary's prefix (`<name>_mean`, `<name>_ci95_low`...).
    `pooled`: for a rate, the (numerator, denominator) counts of an episode row; the row's rate is
    their ratio and the summary adds `<name>_pooled`, the ratio of their sums. `over`: what a
    pooled figure pools. `main`: the figure the main tables show, "mean" (per-episode) or
    "pooled". `of_queried`: its per-episode figure counts only episodes with a query."""

    name: str
    label: str
    definition: str
    pooled: tuple[str, str] | None = None
    over: str = ""
    main: str = "mean"
    of_queried: bool = False

    @property
    def is_rate(self) -> bool:
        return self.pooled is not None

    @property
    def main_figure(self) -> str:
        """The summary metric the main tables show (`Cell.value` reads `<figure>_mean`, or the
        pooled figure itself, with `<figure>_ci95_low/high`)."""
        return f"{self.name}_pooled" if self.main == "pooled" else self.name

    def summary_key(self) -> str:
        """The summary.json key of the main figure's value."""
        figure = self.main_figure
        return figure if figure.endswith("_pooled") else f"{figure}_mean"


METRICS = (
    Metric("reward", "reward", "episode return"),
    Metric("success", "success", "goal reached"),
    Metric("accuracy", "accuracy", "fraction of correct guesses"),
    Metric("length", "steps", "decisions in the episode"),
    Metric("ir", "IR", "queried steps / steps", pooled=("queries", "length"), over="steps"),
    Metric(
        "or",
        "OR",
        "steps whose action differs from PPO's / steps",
        pooled=("overwrites", "length"),
        over="steps",
    ),
    Metric(
        "invalid_rate",
        "invalid",
        "unparseable answers / queries",
        pooled=("invalid", "queries"),
        over="queries",
        main="pooled",
        of_queried=True,
    ),
)
BY_NAME = {m.name: m for m in METRICS}
SUMMARY_METRICS = tuple(m.name for m in METRICS)
RATES = tuple(m.name for m in METRICS if m.is_rate)
N_BOOT = 2000
# rate -> the summary metric the main tables show for it
MAIN_FIGURE = {m.name: m.main_figure for m in METRICS if m.is_rate}
# pooled rate -> (numerator count, denominator count) of an episode row
POOLED = {m.name: m.pooled for m in METRICS if m.pooled}


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


def ratio_bootstrap_ci(
    num: Sequence[float], den: Sequence[float], seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap CI of a pooled rate sum(num) / sum(den), resampling episodes (pairs
    (num_i, den_i)); resamples whose denominator sums to 0 are left out."""
    n = np.asarray(num, dtype=float)
    d = np.asarray(den, dtype=float)
    if d.sum() <= 0:
        return (math.nan, math.nan)
    if n.size == 1:
        rate = float(n[0] / d[0])
        return (rate, rate)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n.size, size=(N_BOOT, n.size))
    dens = d[idx].sum(axis=1)
    keep = dens > 0
    rates = n[idx].sum(axis=1)[keep] / dens[keep]
    alpha = (1 - level) / 2
    return (float(np.quantile(rates, alpha)), float(np.quantile(rates, 1 - alpha)))


def paired_difference(a: Sequence[float], b: Sequence[float], seed: int = 0) -> dict[str, float]:
    """Mean of a - b over the same seeds, with a bootstrap CI of the paired difference."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    low, high = bootstrap_ci(d.tolist(), seed=seed)
    return {"diff_mean": float(d.mean()), "diff_ci95_low": low, "diff_ci95_high": high}


def episode_rates(row: dict) -> dict:
    """Add every rate of METRICS to an episode row from its counts: None where the numerator is
    not counted (OR without a PPO policy), 0.0 where the denominator is 0 (an episode without
    queries: a placeholder kept so that episodes.jsonl stays byte-identical; summarize() leaves
    such episodes out of an `of_queried` rate's figures)."""
    for rate in RATES:
        num_key, den_key = POOLED[rate]
        num, den = row.get(num_key), row[den_key]
        row[rate] = None if num is None else num / den if den else 0.0
    return row


def summarize(rows: list[dict]) -> dict[str, float]:
    """`<metric>_mean`, `<metric>_ci95_low`, `<metric>_ci95_high` for every metric present (the
    invalid rate over the episodes with at least one query only), pooled rates `<rate>_pooled`
    with their CIs (`or_pooled` over the episodes with a PPO policy, `invalid_rate_pooled` absent
    when nothing was queried), and totals (cost)."""
    out: dict[str, float] = {"n_episodes": len(rows)}
    for metric in SUMMARY_METRICS:
        of = [r for r in rows if r.get("queries")] if BY_NAME[metric].of_queried else rows
        values = [r.get(metric) for r in of]
        values = [v for v in values if v is not None]
        if not values:
            continue
        out[f"{metric}_mean"] = float(np.mean(values))
        out[f"{metric}_ci95_low"], out[f"{metric}_ci95_high"] = bootstrap_ci(values)
    for rate, (num_key, den_key) in POOLED.items():
        of = [r for r in rows if r.get(num_key) is not None]
        num = [float(r[num_key]) for r in of]
        den = [float(r[den_key]) for r in of]
        if sum(den) > 0:
            out[f"{rate}_pooled"] = sum(num) / sum(den)
            low, high = ratio_bootstrap_ci(num, den)
            out[f"{rate}_pooled_ci95_low"], out[f"{rate}_pooled_ci95_high"] = low, high
    out.setdefault("ir_pooled", 0.0)  # no steps at all: nothing queried
    steps = sum(r["length"] for r in rows)
    out["queried_episodes"] = sum(1 for r in rows if r.get("queries"))
    for total in (
        "queries",
        "invalid",
        "prompt_tokens",
        "generated_tokens",
        "consultant_seconds",
        "cache_hits",
    ):
        out[f"{total}_total"] = float(sum(r.get(total, 0) for r in rows))
    out["steps_total"] = float(steps)
    return out


def cache_hit_share(summary: dict) -> float | None:
    """The share of a cell's queries the backend did not answer (`Answer.cached`: from the
    response cache, or copied from an identical query of the same batch), counted as
    episode_costs.jsonl counts them; None without a cache or queries. A summary written before
    `cache_hits_total` existed: from the consultant's counts, whose misses then included the
    in-batch copies."""
    cache = summary.get("cache")
    if not cache:
        return None
    if "cache_hits_total" in summary:
        queries = summary.get("queries_total") or 0
        return summary["cache_hits_total"] / queries if queries else None
    hits, looked = cache.get("hits") or 0, (cache.get("hits") or 0) + (cache.get("misses") or 0)
    return (hits + (cache.get("deduplicated") or 0)) / looked if looked else None
