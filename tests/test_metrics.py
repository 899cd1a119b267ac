"""The summary statistics the report's tables print: bootstrap CIs of the right width and
reproducible, pooled rates with their edge cases, and totals, checked against what they mean
rather than against the code's own arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmark.metrics import (
    bootstrap_ci,
    cache_hit_share,
    episode_rates,
    paired_difference,
    ratio_bootstrap_ci,
    summarize,
)

# 0..99: mean 49.5, standard error of the mean (plug-in sd / sqrt(n)) about 2.87
SAMPLE = [float(v) for v in range(100)]
SE = float(np.std(SAMPLE) / math.sqrt(len(SAMPLE)))


@pytest.mark.parametrize(("level", "z"), [(0.95, 1.96), (0.5, 0.674)])
def test_a_bootstrap_ci_spans_its_level_of_standard_errors(level, z):
    low, high = bootstrap_ci(SAMPLE, level=level)
    assert low < 49.5 < high
    assert (high - low) / 2 / SE == pytest.approx(z, rel=0.05)


def test_bootstrap_ci_edge_cases_and_reproducibility():
    assert bootstrap_ci(SAMPLE) == bootstrap_ci(SAMPLE)  # results files are byte-stable
    assert bootstrap_ci(SAMPLE, seed=1) != bootstrap_ci(SAMPLE)
    assert all(math.isnan(v) for v in bootstrap_ci([]))
    assert all(math.isnan(v) for v in bootstrap_ci([None, math.nan]))
    assert bootstrap_ci([0.25]) == (0.25, 0.25)
    # missing values are left out, not counted as 0
    assert bootstrap_ci([1.0, None, 3.0, math.nan]) == bootstrap_ci([1.0, 3.0])
    # every episode can be drawn: one success among failures lifts the upper bound
    low, high = bootstrap_ci([1.0, 0.0, 0.0, 0.0, 0.0])
    assert low == 0.0 and 0.2 < high <= 1.0


def test_a_pooled_rate_of_one_step_episodes_has_the_means_ci():
    """With one step per episode the pooled rate is the mean, and so is its CI (same draws)."""
    assert ratio_bootstrap_ci(SAMPLE, [1.0] * 100) == bootstrap_ci(SAMPLE)
    assert ratio_bootstrap_ci(SAMPLE, [1.0] * 100, seed=3) == bootstrap_ci(SAMPLE, seed=3)
    wide = ratio_bootstrap_ci(SAMPLE, [1.0] * 100, level=0.99)
    narrow = ratio_bootstrap_ci(SAMPLE, [1.0] * 100, level=0.5)
    assert wide[0] < narrow[0] < 49.5 < narrow[1] < wide[1]


def test_ratio_ci_edge_cases():
    assert ratio_bootstrap_ci([1.0], [4.0]) == (0.25, 0.25)  # one episode: its own rate
    assert ratio_bootstrap_ci([1.0], [1.0]) == (1.0, 1.0)  # one query, answered invalid
    assert all(math.isnan(v) for v in ratio_bootstrap_ci([0.0, 0.0], [0.0, 0.0]))
    # resamples of query-free episodes only are left out, not read as 0 / 0
    low, high = ratio_bootstrap_ci([1.0, 0.0, 0.0], [2.0, 0.0, 0.0])
    assert (low, high) == (0.5, 0.5)


def test_paired_difference_is_the_mean_difference_with_its_ci():
    a, b = [3.0, 5.0, 7.0, 6.0], [1.0, 2.0, 3.0, 6.0]
    d = [2.0, 3.0, 4.0, 0.0]
    out = paired_difference(a, b, seed=5)
    low, high = bootstrap_ci(d, seed=5)
    assert out == {"diff_mean": 2.25, "diff_ci95_low": low, "diff_ci95_high": high}
    assert paired_difference(a, b) == paired_difference(a, b)


def test_a_one_step_episode_has_its_own_rates():
    row = episode_rates({"length": 1, "queries": 1, "overwrites": 1, "invalid": 0})
    assert (row["ir"], row["or"], row["invalid_rate"]) == (1.0, 1.0, 0.0)
    empty = episode_rates({"length": 0, "queries": 0, "overwrites": 0, "invalid": 0})
    assert (empty["ir"], empty["or"]) == (0.0, 0.0)


def test_every_episode_counts_in_the_means_and_totals():
    rows = [
        episode_rates({"length": 1, "queries": 1, "overwrites": 0, "invalid": 1}),
        episode_rates({"length": 4, "queries": 0, "overwrites": 1, "invalid": 0}),
    ]
    rows[0].update(reward=1.0, prompt_tokens=10, generated_tokens=3, consultant_seconds=0.5)
    rows[1].update(reward=0.0, cache_hits=0)
    rows[0]["cache_hits"] = 1
    s = summarize(rows)
    # an episode without queries still counts in the reward and IR means
    assert s["reward_mean"] == 0.5 and s["ir_mean"] == 0.5
    # one query in all, answered invalid: a pooled rate over a single query is still a rate
    assert s["invalid_rate_pooled"] == 1.0 and s["ir_pooled"] == pytest.approx(1 / 5)
    totals = {k: v for k, v in s.items() if k.endswith("_total")}
    assert totals == {
        "queries_total": 1.0,
        "invalid_total": 1.0,
        "prompt_tokens_total": 10.0,
        "generated_tokens_total": 3.0,
        "consultant_seconds_total": 0.5,
        "cache_hits_total": 1.0,
        "steps_total": 5.0,
    }
    nothing = summarize([])
    assert nothing["n_episodes"] == 0 and nothing["ir_pooled"] == 0.0
    assert nothing["steps_total"] == 0.0 and nothing["queries_total"] == 0.0


def test_cache_hit_share():
    assert cache_hit_share({}) is None  # no cache
    assert cache_hit_share({"cache": {"hits": 0, "misses": 0}, "cache_hits_total": 0}) is None
    now = {"cache": {"hits": 2}, "cache_hits_total": 3.0, "queries_total": 4.0}
    assert cache_hit_share(now) == 0.75
    assert cache_hit_share({"cache": {"hits": 2}, "cache_hits_total": 3.0}) is None
    # a summary written before cache_hits_total: hits and in-batch copies over all lookups
    old = {"cache": {"hits": 1, "misses": 3, "deduplicated": 1}}
    assert cache_hit_share(old) == 0.5
    assert cache_hit_share({"cache": {"hits": 1, "misses": 3}}) == 0.25
    assert cache_hit_share({"cache": {"hits": None, "misses": None}}) is None


def test_every_reader_takes_the_rates_from_their_declaration():
    """A metric is declared once (benchmark.metrics.METRICS): the episode row, the summary, the
    report's details columns and csv fields, the progress block and the dashboards' default
    panels follow the declarations, not lists of their own."""
    from benchmark.dashboard_design import Question, family_metrics
    from benchmark.metrics import BY_NAME, METRICS, RATES, episode_rates, summarize
    from benchmark.progress import result_block

    rows = [
        episode_rates(
            {
                "reward": 1.0,
                "success": 1.0,
                "length": 4,
                "queries": 2,
                "overwrites": 1,
                "invalid": 1,
            }
        ),
        episode_rates(
            {
                "reward": 0.0,
                "success": 0.0,
                "length": 6,
                "queries": 0,
                "overwrites": 0,
                "invalid": 0,
            }
        ),
    ]
    assert [rows[0][r] for r in RATES] == [0.5, 0.25, 0.5]
    assert rows[1]["invalid_rate"] == 0.0  # the placeholder of an episode without queries
    summary = summarize(rows)
    for m in METRICS:
        if m.is_rate:
            num, den = m.pooled
            assert summary[f"{m.name}_pooled"] == pytest.approx(
                sum(r[num] for r in rows) / sum(r[den] for r in rows)
            )
    # of_queried: the episode without queries does not count in the per-episode figure
    assert summary["invalid_rate_mean"] == pytest.approx(0.5)
    assert summary["ir_mean"] == pytest.approx(0.25)
    block = result_block({**summary, "metric": "success", "cell": "c", "cell_hash": "h"}, {})
    for rate in RATES:
        assert BY_NAME[rate].main_figure in block
    assert Question("t", "x").metrics == ("reward", "metric", *RATES)
    panels = family_metrics("fourrooms", ("reward", "metric", *RATES))
    assert list(panels.values())[2:] == [BY_NAME[r].summary_key() for r in RATES]
    assert panels["invalid (unparseable answers / queries)"] == "invalid_rate_pooled"
