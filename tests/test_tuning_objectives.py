"""Tuning objectives (tuning.objective): each picks the tau it should on a hand-built study, the
risk objective's Learn-then-Test threshold keeps its guarantee, and only a non-default objective
enters a cell's and a study's identity."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmark.build import locate_inputs, prepare
from benchmark.tuning import Objective, calibrate_risk, tune
from tests.conftest import SMALL_POLICY, compose_cfg

# a hand-built study: (tau, validation reward, validation IR); IR falls as tau grows
STUDY = [
    {"trial": 0, "tau": 0.2, "reward": 0.90, "ir": 0.80},
    {"trial": 1, "tau": 0.5, "reward": 0.95, "ir": 0.60},
    {"trial": 2, "tau": 0.8, "reward": 0.94, "ir": 0.35},
    {"trial": 3, "tau": 1.1, "reward": 0.93, "ir": 0.15},
    {"trial": 4, "tau": 1.4, "reward": 0.70, "ir": 0.05},
]


def _tau(**tuning) -> float:
    return Objective.from_config(tuning).choose(STUDY)["tau"]


def test_each_objective_picks_the_tau_it_should_on_a_hand_built_study():
    assert _tau(objective="reward") == 0.5  # the best validation reward
    assert _tau(objective="budget", budget=0.4) == 0.8  # the best with IR <= 0.4
    assert _tau(objective="budget", budget=0.15) == 1.1  # the budget is inclusive
    assert _tau(objective="budget", budget=0.01) == 1.4  # none inside: the lowest IR
    assert _tau(objective="frugal", epsilon=0.02) == 1.1  # within 0.02 of 0.95, largest tau
    assert _tau(objective="frugal", epsilon=0.0) == 0.5  # no slack: the best itself


def test_budget_study_searches_under_its_constraint(tmp_path):
    """The sampler treats IR <= budget as a constraint; the chosen trial honours it."""

    def objective(tau, seeds):  # reward grows with IR: the unconstrained best asks most
        return 1.0 - tau / 4, 1.0 - tau / 2

    goal = Objective.from_config({"objective": "budget", "budget": 0.3})
    tau, rows = tune(
        objective,
        tmp_path,
        tau_range=(0.1, 2.0),
        n_trials=8,
        seeds=[0, 1],
        sampler_seed=0,
        max_reward=1.0,
        goal=goal,
    )
    chosen = next(r for r in rows if r["tau"] == tau)
    assert chosen["ir"] <= 0.3
    assert chosen["reward"] == max(r["reward"] for r in rows if r["ir"] <= 0.3)


def _scores(rng, n_steps, p_wrong=0.2):
    """Steps whose entropy is higher where PPO is wrong (N(1.5, .3) vs N(1, .3))."""
    wrong = rng.random(n_steps) < p_wrong
    return np.where(wrong, rng.normal(1.5, 0.3, n_steps), rng.normal(1.0, 0.3, n_steps)), wrong


def _true_miss_rate(tau: float) -> float:
    """P(score < tau | wrong) for the wrong steps' N(1.5, 0.3)."""
    return 0.5 * (1 + math.erf((tau - 1.5) / (0.3 * math.sqrt(2))))


def _runner(rng, n_steps, calls):
    """run_at(seeds, tau): each run draws its own steps (a run's trajectories depend on tau);
    the gate asks where the score >= tau."""

    def run_at(seeds, tau):
        calls.append(tau)
        scores, wrong = _scores(rng, n_steps)
        records = [
            {"seed": 0, "step": i, "ppo_optimal": not w, "queried": bool(s >= tau)}
            for i, (s, w) in enumerate(zip(scores, wrong, strict=True))
        ]
        episodes = [{"reward": 1.0, "length": n_steps, "queries": int((scores >= tau).sum())}]
        return episodes, records

    return run_at


def test_risk_objective_keeps_its_guarantee_over_calibration_draws(tmp_path):
    """LTT with fixed-sequence testing: over independent calibrations, the true missed-mistake
    rate of the chosen tau exceeds alpha in at most about delta of them, and the gate still
    saves queries (the tau is not the lowest of the grid)."""
    goal = Objective.from_config({"objective": "risk", "alpha": 0.1, "delta": 0.2})
    rng = np.random.default_rng(0)
    taus = []
    for k in range(40):
        tau, rows = calibrate_risk(
            _runner(rng, 400, []), tmp_path / str(k), goal=goal, tau_range=(0.0, 2.0), seeds=[0]
        )
        assert all(r["certified"] for r in rows[:-1]) and rows[-1]["p_value"] > 0.2
        taus.append(tau)
    assert np.mean([_true_miss_rate(t) > 0.1 for t in taus]) <= 0.2
    # perfect knowledge would give 1.5 - 1.28 * 0.3 = 1.12; the certified tau stays below it
    assert 0.7 < np.median(taus) < 1.13


def test_risk_objective_without_mistakes_to_learn_from_asks_at_every_step(tmp_path):
    def run_at(seeds, tau):
        return [{"reward": 1.0, "length": 2, "queries": 0}], [
            {"seed": 0, "step": 0, "ppo_optimal": True, "queried": False}
        ]

    goal = Objective.from_config({"objective": "risk", "alpha": 0.1, "delta": 0.1})
    tau, rows = calibrate_risk(run_at, tmp_path, goal=goal, tau_range=(0.1, 2.0), seeds=[0])
    assert tau == 0.0 and len(rows) == 1 and not rows[0]["certified"]


def test_risk_calibration_runs_once_per_study(tmp_path):
    calls = []
    goal = Objective.from_config({"objective": "risk", "alpha": 0.2, "delta": 0.1})
    kw = dict(goal=goal, tau_range=(0.0, 2.0), seeds=[0, 1])
    run_at = _runner(np.random.default_rng(1), 300, calls)
    tau, rows = calibrate_risk(run_at, tmp_path, **kw)
    n = len(calls)
    tau2, rows2 = calibrate_risk(run_at, tmp_path, **kw)
    assert len(calls) == n == len(rows) and tau2 == tau and rows2 == rows
    assert calls == sorted(calls) and rows[0]["seeds"] == [0, 1, 2] and rows[0]["certified"]


@pytest.mark.parametrize(
    ("tuning", "message"),
    [
        ({"objective": "cheap"}, "tuning.objective='cheap' is invalid: allowed reward"),
        ({"objective": "budget", "budget": 0}, "tuning.budget=0 is invalid"),
        ({"objective": "risk", "alpha": 0.1, "delta": 1.0}, "tuning.delta=1.0 is invalid"),
        ({"objective": "frugal", "epsilon": -0.1}, "tuning.epsilon=-0.1 is invalid"),
    ],
)
def test_bad_objective_settings_fail_naming_what_is_allowed(tuning, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        Objective.from_config(tuning)


def test_only_a_non_default_objective_enters_the_identity(tmp_path, monkeypatch):
    """Cells and studies of the default objective keep the keys they had before objectives
    existed; another objective (or its parameter) makes another study and cell."""
    import benchmark.build as build_mod
    import benchmark.policy.checkpoints as checkpoints_mod

    # a stand-in checkpoint: the identity reads its digests only
    monkeypatch.setattr(build_mod, "cached_digest", lambda path, digests=None: "0" * 64)
    monkeypatch.setattr(checkpoints_mod, "policy_digest", lambda path, digests=None: "1" * 64)
    ckpt = tmp_path / "ppo.zip"

    def spec(*overrides):
        cfg = compose_cfg(
            tmp_path,
            "env=empty5x5_random",
            "gate=entropy",
            "slm=oracle",
            "protocol=suite",
            *overrides,
        )  # the suite protocol: the tuning keys as they were before objectives and protocols
        return locate_inputs(prepare(cfg)[2], cfg, ckpt)

    default = spec()
    assert set(default.identity["tuning"]) == {
        "scope",
        "shared",
        "n_trials",
        "n_episodes",
        "sampler_seed",
        "study",
    }
    # the default's own parameters never matter; a non-default objective's do, others' not
    assert spec("tuning.budget=0.5").hash == default.hash
    budget = spec("tuning.objective=budget")
    assert budget.tuning_key() != default.tuning_key() and budget.hash != default.hash
    assert {k: budget.identity["tuning"][k] for k in ("objective", "budget")} == {
        "objective": "budget",
        "budget": 0.2,
    }
    assert "alpha" not in budget.identity["tuning"]
    assert spec("tuning.objective=budget", "tuning.alpha=0.5").hash == budget.hash
    assert spec("tuning.objective=budget", "tuning.budget=0.1").tuning_key() != budget.tuning_key()


@pytest.mark.slow
def test_objectives_run_end_to_end_and_are_recorded(trained_root, tmp_path):
    """Real cells (small PPO, the oracle): each objective's tau is what its study supports, and
    the summary records the objective and its parameters."""
    from benchmark.job import run_job

    base = [
        "env=empty5x5_random",
        "gate=entropy",
        "slm=oracle",
        "prompt=basic",
        "gate.mc_samples=5",
        "eval.n_episodes=10",
        "tuning.n_episodes=10",
        "tuning.n_trials=4",
        "quiet=true",
        *SMALL_POLICY,
    ]
    summaries = {}
    for objective in ("reward", "budget", "risk"):
        cfg = compose_cfg(trained_root, *base, f"tuning.objective={objective}")
        summaries[objective] = run_job(cfg, tmp_path / objective, multirun=False)
    assert summaries["reward"]["tuning_objective"] == "reward"
    assert summaries["budget"]["tuning_params"] == {"budget": 0.2}
    assert summaries["risk"]["tuning_params"] == {"alpha": 0.2, "delta": 0.1}
    assert len({s["cell_hash"] for s in summaries.values()}) == 3
    risk_trials = (
        trained_root / "cells" / summaries["risk"]["cell_hash"] / "trials.csv"
    ).read_text()
    assert "certified" in risk_trials and "p_value" in risk_trials


def test_missed_mistake_check_on_test_records():
    from benchmark.analysis.risk import missed_mistakes

    def step(seed, wrong, queried):
        return {
            "seed": seed,
            "step": 0,
            "ppo_optimal": not wrong,
            "queried": queried,
            "action_optimal": True,
        }

    # 10 episodes, each with 1 mistake asked about and, in 1 of them, 1 mistake missed
    records = [step(s, True, True) for s in range(10)] + [step(0, True, False)]
    for r, k in zip(records, range(len(records)), strict=True):
        r["step"] = k
    out = missed_mistakes(records, alpha=0.2, n_boot=500)
    assert out["miss_rate"] == pytest.approx(1 / 11) and out["mistakes"] == 11
    assert 0.5 < out["held"] < 1.0  # resamples drawing episode 0 twice or more can exceed 0.2
    assert missed_mistakes(records, alpha=0.5, n_boot=200)["held"] == 1.0


def _judged_and_unjudged(missed: int, mistakes: int = 50, unjudged: int = 30) -> list[dict]:
    """One episode: `mistakes` PPO mistakes of which the first `missed` go unasked, 20 right
    steps, and `unjudged` steps the expert has no answer for (ppo_optimal None: the goal cannot
    be reached), half of them asked about."""
    judged = [(False, k >= missed) for k in range(mistakes)] + [(True, False)] * 20
    steps = judged + [(None, k % 2 == 0) for k in range(unjudged)]
    return [
        {"seed": 0, "step": k, "ppo_optimal": ok, "queried": q, "action_optimal": ok}
        for k, (ok, q) in enumerate(steps)
    ]


def test_risk_calibration_counts_only_judged_mistakes(tmp_path):
    """At the k-th tau of the grid the gate misses k of 50 mistakes; the 30 unjudged steps
    (half unasked) are no mistakes and no misses: each row says 50 mistakes and k missed."""
    goal = Objective.from_config({"objective": "risk", "alpha": 0.2, "delta": 0.1})
    grid = [float(t) for t in np.linspace(0.0, 1.9, 20)]

    def run_at(seeds, tau):
        records = _judged_and_unjudged(missed=grid.index(tau))
        return [{"reward": 1.0, "length": len(records), "queries": 0}], records

    tau, rows = calibrate_risk(run_at, tmp_path, goal=goal, tau_range=(0.0, 1.9), seeds=[0])
    assert [r["mistakes"] for r in rows] == [50] * len(rows)
    assert [r["missed"] for r in rows] == list(range(len(rows)))
    assert [r["miss_rate"] for r in rows] == [k / 50 for k in range(len(rows))]
    # 0 of 50 missed certifies alpha 0.2 (p about 0.8^50); the sequence ends where it fails
    assert rows[0]["certified"] and len(rows) > 2 and not rows[-1]["certified"]
    assert tau == rows[-2]["tau"] > 0.0


def test_the_missed_mistake_check_leaves_unjudged_steps_out():
    from benchmark.analysis.risk import missed_mistakes

    records = _judged_and_unjudged(missed=5, mistakes=20, unjudged=10)
    out = missed_mistakes(records, alpha=0.25, n_boot=100)
    assert out["mistakes"] == 20 and out["miss_rate"] == 5 / 20
    assert out["held"] == 1.0  # one episode: every resample misses 5 of 20, within 0.25
    assert missed_mistakes(records, alpha=0.2, n_boot=100)["held"] == 0.0
