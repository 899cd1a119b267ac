"""The reward-IR frontier (benchmark.analysis.frontier) on hand-built frontiers."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark.analysis.frontier import Point, at_budget, envelope, normalised_area

PPO, SLM = 0.3, 0.9


def test_a_linear_rise_from_ppo_only_to_slm_only_has_normalised_area_one_half():
    points = [Point(x, PPO + x * (SLM - PPO)) for x in np.linspace(0.1, 0.9, 9)]
    assert normalised_area(points, PPO, SLM) == pytest.approx(0.5)
    assert normalised_area([], PPO, SLM) == pytest.approx(0.5)  # the two ends alone


@pytest.mark.parametrize("ir", [0.1, 0.01, 0.001])
def test_a_gate_reaching_slm_only_reward_at_an_ir_near_zero_tends_to_one(ir):
    area = normalised_area([Point(ir, SLM)], PPO, SLM)
    assert area == pytest.approx(1 - ir / 2)


def test_dominated_points_do_not_lower_the_frontier_and_a_better_gate_exceeds_one():
    good = [Point(0.2, 0.8), Point(0.5, 0.85)]
    worse = [*good, Point(0.3, 0.4), Point(0.6, 0.5)]  # below points at lower IR
    assert normalised_area(worse, PPO, SLM) == normalised_area(good, PPO, SLM)
    assert envelope(worse, PPO, SLM) == [(0.0, PPO), (0.2, 0.8), (0.5, 0.85), (1.0, SLM)]
    assert normalised_area([Point(0.1, 1.0)], PPO, SLM) > 1  # beats SLM-only: flat at 1.0
    assert normalised_area([Point(0.1, 0.5)], PPO, PPO) is None  # SLM-only no better: undefined


def test_at_budget_takes_the_point_with_the_largest_ir_within_it():
    points = [Point(0.04, 0.5, precision=0.9, recall=0.1), Point(0.09, 0.6), Point(0.3, 0.8)]
    assert at_budget(points, 0.05).precision == 0.9
    assert at_budget(points, 0.10).ir == 0.09
    assert at_budget(points, 0.20).ir == 0.09
    assert at_budget(points, 0.01) is None


def _job(d, gate, reward, ir, tau=None, slm="oracle", **extra):
    from benchmark import results

    d.mkdir(parents=True)
    summary = {
        "complete": True,
        "env": "empty5x5_random",
        "metric": "success",
        "gate": gate,
        "slm": None if gate == "never" else slm,
        "prompt": None if gate == "never" else "basic",
        "rationale": None if gate == "never" else False,
        "checkpoint": None if gate == "always" else "final",
        "policy_seed": None if gate == "always" else 0,
        "reward_mean": reward,
        "ir_pooled": ir,
        "tau": tau,
        "n_episodes": 1,
        **extra,
    }
    results.write_json(d / "summary.json", summary)
    results.write_jsonl(d / "episodes.jsonl", [{"seed": 100, "reward": reward}])


def test_report_draws_each_gates_frontier_and_tabulates_area_and_budgets(tmp_path):
    """A hand-built sweep: PPO-only 0.3, SLM-only 0.9, an entropy gate on a tau grid rising
    linearly (area 0.5) and a tuned cell marked on it (not part of the frontier)."""
    from benchmark.report import build_report

    sweep = tmp_path / "sweep"
    _job(sweep / "0", "never", PPO, 0.0)
    _job(sweep / "1", "always", SLM, 1.0)
    for k, x in enumerate([0.05, 0.1, 0.2, 0.5, 0.8]):
        _job(
            sweep / str(2 + k),
            "entropy",
            PPO + x * (SLM - PPO),
            x,
            tau=2 - x,
            gate_precision=0.5 + x / 10,
            gate_recall=x,
        )
    _job(sweep / "9", "entropy", 0.95, 0.3, tau=1.0, tuning_objective="frugal")
    (sweep / "9" / "trials.csv").write_text("trial,tau,reward,ir\n0,1.0,0.95,0.3\n")
    report = build_report(sweep)
    table = report.table("frontier")
    (row,) = table.rows
    values = dict(zip(table.header(), row[0] + row[1], strict=True))
    assert values["norm. area"] == "0.500" and values["grid cells"] == "5"
    assert values["IR≤10%: recall"] == "0.100" and values["IR≤20%: reward"] == "0.420"
    assert (report.out / "frontier.png").exists()
