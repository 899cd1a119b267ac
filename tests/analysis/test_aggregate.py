"""IQM, probability of improvement and their stratified bootstrap (benchmark.analysis.aggregate)
against hand computations, and the report's aggregate table over training seeds."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark.analysis.aggregate import (
    improvement_ci,
    iqm,
    iqm_ci,
    probability_of_improvement,
)


def test_iqm_is_the_mean_of_the_middle_half():
    scores = np.array([[0.0, 10.0], [1.0, 2.0], [3.0, 100.0], [4.0, 5.0]])  # 8 scores
    assert iqm(scores) == pytest.approx(np.mean([2.0, 3.0, 4.0, 5.0]))


def test_probability_of_improvement_counts_pairs_per_task_and_ties_half():
    x = np.array([[1.0, 0.5], [2.0, 0.5]])
    y = np.array([[0.0, 0.5], [3.0, 0.5]])
    # task 0: pairs (1>0, 1<3, 2>0, 2<3) = 2/4; task 1: all ties = 1/2
    assert probability_of_improvement(x, y) == pytest.approx(0.5)
    assert probability_of_improvement(y + 10, y) == 1.0


def test_bootstrap_cis_bracket_the_estimate_and_vanish_without_spread():
    rng = np.random.default_rng(0)
    scores = rng.random((5, 3))
    m, lo, hi = iqm_ci(scores, n_boot=300)
    assert lo <= m <= hi and hi - lo > 0
    assert iqm_ci(np.ones((4, 2)), n_boot=50) == (1.0, 1.0, 1.0)
    p, plo, phi = improvement_ci(scores + 1, scores, n_boot=100)
    assert p == plo == phi == 1.0


def _cell(d, gate, env, seed, reward):
    from benchmark import results

    d.mkdir(parents=True)
    results.write_json(
        d / "summary.json",
        {
            "complete": True,
            "n_episodes": 1,
            "env": env,
            "gate": gate,
            "slm": None if gate == "never" else "oracle",
            "prompt": None if gate == "never" else "basic",
            "rationale": None if gate == "never" else False,
            "checkpoint": "final",
            "policy_seed": seed,
            "reward_mean": reward,
            "tau": None if gate == "never" else 1.0,
        },
    )
    results.write_jsonl(d / "episodes.jsonl", [{"seed": 100, "reward": reward}])


def test_report_aggregates_methods_over_training_seeds(tmp_path):
    from benchmark.report import build_report

    sweep, k = tmp_path / "sweep", 0
    for env in ("fourrooms", "higherlower"):
        for seed in (0, 1, 2):
            _cell(sweep / str(k), "never", env, seed, 0.2 + 0.1 * seed)
            _cell(sweep / str(k + 1), "entropy", env, seed, 0.9 + 0.01 * seed)
            k += 2
    table = build_report(sweep).table("aggregate")
    rows = {r[0][0]: dict(zip(table.header(), r[0] + r[1], strict=True)) for r in table.rows}
    assert rows["ASK oracle"]["P(better than PPO-only)"] == "1.00 [1.00, 1.00]"
    assert rows["ASK oracle"]["training seeds"] == "3" and rows["PPO"]["envs"] == "2"
    assert rows["PPO"]["reward IQM"].startswith("0.300")
