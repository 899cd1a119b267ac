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
    results.write_jsonl(d / "episodes.jsonl", [{"seed": 100, "reward": reward, "length": 4}])


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


def test_tuned_cells_are_tabulated_by_objective_with_missed_mistakes_and_the_risk_check(tmp_path):
    """Per env, each tuned cell's objective with its parameters, its test IR and its
    missed-mistake rate (1 - recall, the CI flipped); a risk cell's guarantee is checked on its
    test step records: one episode of 4 mistakes with 1 missed is a miss rate of 0.25, so it
    holds at alpha 0.3 in every resample. Grid cells (a fixed tau) are not in the table."""
    import json

    from benchmark import results
    from benchmark.analysis import write_steps
    from benchmark.report import build_report

    sweep = tmp_path / "sweep"
    recall = {"gate_recall": 0.75, "gate_recall_ci95_low": 0.6, "gate_recall_ci95_high": 0.9,
              "gate_judged": 4}  # fmt: skip
    _job(sweep / "0", "never", PPO, 0.0)
    _job(sweep / "1", "entropy", 0.8, 0.4, tau=0.5, tuning_objective="reward", **recall)
    _job(
        sweep / "2",
        "entropy",
        0.7,
        0.1,
        tau=1.2,
        tuning_objective="budget",
        tuning_params={"budget": 0.2},
        **recall,
    )
    _job(
        sweep / "3",
        "entropy",
        0.75,
        0.3,
        tau=0.9,
        tuning_objective="risk",
        tuning_params={"alpha": 0.3, "delta": 0.1},
        **recall,
    )
    _job(sweep / "4", "entropy", 0.6, 0.05, tau=1.5)  # a grid cell
    for job in ("1", "5"):  # job 5: the reward cell again (a key it does not read differs)
        (sweep / job).mkdir(exist_ok=True)
        results.write_json(
            sweep / job / "summary.json",
            {**json.loads((sweep / "1" / "summary.json").read_text()), "cell_hash": "abc"},
        )
    results.write_jsonl(sweep / "5" / "episodes.jsonl", [{"seed": 100, "reward": 0.8}])
    steps = [
        {"seed": 100, "step": i, "ppo_optimal": False, "queried": i > 0, "action_optimal": True}
        for i in range(4)
    ]
    write_steps(sweep / "3" / "steps.jsonl.gz", steps)
    report = build_report(sweep)
    table = report.table("objectives")
    assert len(report.table("gate_quality").rows) == 3  # jobs 1 and 5 are one cell
    rows = {
        row[0][2]: dict(zip(table.header(), row[0] + row[1], strict=True)) for row in table.rows
    }
    assert list(rows) == ["reward", "budget 0.2", "risk α0.3 δ0.1"] and len(table.rows) == 3
    assert rows["budget 0.2"]["tau"] == "1.200" and rows["budget 0.2"]["IR"].startswith("0.100")
    assert rows["reward"]["missed mistakes"] == "0.250 [0.10, 0.40]"
    assert rows["risk α0.3 δ0.1"]["held"] == "1.00 ≥ 0.90"
    assert rows["reward"]["held"] == "—"
