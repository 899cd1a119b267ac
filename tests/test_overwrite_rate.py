"""The overwrite rate (OR) of a real run, recounted from its own step records: OR = steps whose
final action differs from PPO's / steps, so a query the consultant answers with PPO's own action
is no overwrite."""

from __future__ import annotations

import pytest

from benchmark import results
from benchmark.analysis.steps import STEPS_FILE, by_episode, read_steps
from tests.conftest import SMALL_POLICY, compose_cfg


def test_overwrites_are_the_steps_whose_action_differs_from_ppos(trained_root, tmp_path):
    from benchmark.job import run_job

    cfg = compose_cfg(
        trained_root,
        "env=empty5x5_random",
        *SMALL_POLICY,
        "method=ask",
        "slm=oracle",
        "gate.tau=0.0",  # every step is asked: the oracle's expert action is always taken
        "gate.mc_samples=5",
        "eval.n_episodes=3",
        "eval.step_records=true",
        "quiet=true",
    )
    summary = run_job(cfg, tmp_path / "job", multirun=False)
    episodes = results.read_jsonl(tmp_path / "job" / "episodes.jsonl")
    steps = by_episode(read_steps(tmp_path / "job" / STEPS_FILE))
    assert sorted(steps) == [r["seed"] for r in episodes]
    for row in episodes:
        mine = steps[row["seed"]]
        assert len(mine) == row["length"] == row["queries"]  # tau 0: every step asked
        assert all(r["action"] == r["consultant"] for r in mine)
        changed = sum(r["action"] != r["ppo"] for r in mine)
        assert row["overwrites"] == changed
        assert row["or"] == pytest.approx(changed / row["length"])
    # the oracle agreed with PPO on some asked steps: those are queries, not overwrites
    agreed = sum(r["action"] == r["ppo"] for s in steps.values() for r in s)
    assert agreed > 0
    changed = [sum(r["action"] != r["ppo"] for r in steps[r["seed"]]) for r in episodes]
    lengths = [r["length"] for r in episodes]
    assert summary["or_mean"] == pytest.approx(
        sum(c / n for c, n in zip(changed, lengths, strict=True)) / len(episodes)
    )
    assert summary["or_pooled"] == pytest.approx(sum(changed) / sum(lengths))
    assert summary["or_pooled"] < summary["ir_pooled"] == 1.0
