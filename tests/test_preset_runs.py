"""The presets of the papers' remaining tables and figures run end to end at toy size with the
tiny model (a real Hydra multirun in a subprocess, one env where the preset's point does not need
three), and the report draws their figure where they have one."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow
TOY = ["tracking=none", "eval.n_episodes=2", "slm=tiny"]
SHORT = "prompt.rationale_max_new_tokens=16"  # the tiny model's answers are noise: keep them short
TOY_PPO = [  # one short rollout: the toy runs need a policy, not a good one
    "policy.total_timesteps=512",
    "++policy.ppo.n_steps=256",
    "policy.eval_freq=256",
    "policy.eval_episodes=2",
    "policy.progress_bar=false",
]
RUNS = {  # preset: (toy overrides, jobs, distinct cells)
    # SLM-only: no policy; FourRooms (five distinct prompts there) cut at 8 steps
    "slm_only_prompts": (["env=fourrooms", "env.task.max_steps=8", SHORT], 5, 5),
    # HigherLower's grid of 10 taus on 11 points: its last two jobs are one cell
    "released_tau_grid": (["env=higherlower", *TOY_PPO, SHORT], 11, 10),
    "released_mc_samples": (
        ["env=higherlower", *TOY_PPO, "tuning.n_trials=2", "tuning.n_episodes=2"],
        5,
        5,
    ),
    "feedback_table5": (["prompt.thinking_budget=16", "prompt.max_new_tokens=64"], 3, 3),
    "feedback_curves": (["env=empty5x5_random", *TOY_PPO], 1, 1),
}


def _summaries(sweep: Path) -> list[dict]:
    jobs = sorted((p for p in sweep.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    return [json.loads((j / "summary.json").read_text()) for j in jobs]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("preset", sorted(RUNS))
def test_preset_runs_at_toy_size(preset, tmp_path):
    overrides, jobs, cells = RUNS[preset]
    sweep = tmp_path / "sweep"
    run_cli(
        tmp_path,
        f"+experiment={preset}",
        *TOY,
        *overrides,
        f"hydra.sweep.dir={sweep}",
        "-m",
        timeout=800,
    )
    summaries = _summaries(sweep)
    assert len(summaries) == jobs
    assert len({s["cell_hash"] for s in summaries}) == cells
    for s in summaries:
        assert s["complete"] and s["n_episodes"] == 2
        assert s["experiment"] == preset
        assert 0.0 <= s["ir_mean"] <= 1.0 and -1.0 <= s["reward_mean"] <= 1.0
    CHECKS[preset](summaries, sweep, tmp_path)


def _slm_only_prompts(summaries, sweep, root):
    assert {s["gate"] for s in summaries} == {"always"}
    assert all(s["ir_mean"] == 1.0 for s in summaries)  # the SLM acts at every step
    variants = {(s["prompt"], s["rationale"]) for s in summaries}
    assert variants == {
        ("basic", False),
        ("enriched", False),
        ("stateful_min", False),
        ("stateful", False),
        ("stateful", True),
    }


def _released_tau_grid(summaries, sweep, root):
    taus = [s["tau"] for s in summaries]
    assert taus == [0.005, 0.02, 0.05, 0.1, 0.2, 0.4, 0.6, 0.9, 1.2, 1.5, 1.5]
    irs = [s["ir_mean"] for s in summaries]
    assert irs[-1] == 0.0  # above HigherLower's log2 2 = 1 bit the gate never asks
    assert irs == sorted(irs, reverse=True)  # a higher tau never asks more
    run_cli(root, str(sweep), "--no-wandb", module="benchmark.report", timeout=300)
    assert (sweep / "report" / "tau.png").stat().st_size > 5000


def _released_mc_samples(summaries, sweep, root):
    assert [s["mc_samples"] for s in summaries] == [5, 10, 20, 30, 50]
    assert len({s["tau"] for s in summaries}) == 1  # every N takes the N = 30 cell's tau ...
    assert [s["tau_from"] is None for s in summaries] == [False, False, False, True, False]
    assert all(s["tau_from"].endswith("[gate.mc_samples=30]") for s in summaries if s["tau_from"])
    assert len(list((root / "tuning").iterdir())) == 1  # ... from its study, the only one


def _feedback_table5(summaries, sweep, root):
    assert {s["prompt"] for s in summaries} == {"complete"}
    assert {s["env"] for s in summaries} == {"empty5x5_random", "empty16x16", "simplecrossing9"}
    for s in summaries:  # the first step of every episode asks for the plan (a new plan only
        # after an invalid one, or when it ran out: far fewer calls than steps)
        assert s["queried_episodes"] == 2 and 2 <= s["queries_total"] < s["steps_total"] / 4
        assert s["generated_tokens_total"] <= s["queries_total"] * (16 + 64 + 10)


def _feedback_curves(summaries, sweep, root):
    (s,) = summaries
    assert s["gate"] == "never" and s["ir_mean"] == 0.0
    curve = next(root.rglob("checkpoints/empty5x5_random-*/curve.csv"))
    with open(curve) as f:
        assert len(list(csv.DictReader(f))) >= 2
    run_cli(root, str(sweep), "--no-wandb", module="benchmark.report", timeout=300)
    assert (sweep / "report" / "learning_curves.png").stat().st_size > 5000


CHECKS = {
    "slm_only_prompts": _slm_only_prompts,
    "released_tau_grid": _released_tau_grid,
    "released_mc_samples": _released_mc_samples,
    "feedback_table5": _feedback_table5,
    "feedback_curves": _feedback_curves,
}
