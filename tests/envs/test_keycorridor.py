"""MiniGrid KeyCorridorS3R1 (benchmark/envs/keycorridor.py), added with new files only through the
env-family extension point: found by name, its expert (key, locked door, drop, ball), its
prompts at every level, and a whole oracle job."""

from __future__ import annotations

import pytest

from benchmark import results
from benchmark.envs import available_families, family_of, make_task
from benchmark.envs.keycorridor import KeyCorridorTask
from benchmark.prompts.ask import AskPrompt
from benchmark.prompts.feedback import FeedbackPrompt
from benchmark.vocabulary import LEVELS
from tests.conftest import compose_cfg

ENV = "keycorridor_s3r1"
ACTIONS = ["TURN_LEFT", "TURN_RIGHT", "FORWARD", "PICKUP", "DROP", "TOGGLE"]


def test_the_family_is_found_by_its_name_and_refuses_what_it_cannot_play():
    task = make_task(ENV)
    assert isinstance(task, KeyCorridorTask) and "keycorridor" in available_families()
    fam = family_of(task)
    assert fam.name == "keycorridor" and fam.supports("ask") and fam.supports("belief")
    assert not fam.supports("feedback") and not task.doorkey  # a key and a lock, not DoorKey
    with pytest.raises(ValueError, match="does not support env 'keycorridor_s3r1'"):
        FeedbackPrompt("hwbp").check(task)
    with pytest.raises(ValueError, match="'MiniGrid-DoorKey-8x8-v0' is not a MiniGrid KeyCorridor"):
        KeyCorridorTask("x", "MiniGrid-DoorKey-8x8-v0", None, ACTIONS)
    with pytest.raises(ValueError, match=r"\['DROP'\] missing"):
        KeyCorridorTask("x", "MiniGrid-KeyCorridorS3R1-v0", None, ["PICKUP", "TOGGLE"])


def test_the_expert_fetches_the_ball_on_every_test_seed():
    task = make_task(ENV)
    for seed in range(100, 200):
        ep = task.episode(seed)
        taken = []
        while not ep.done:
            assert ep.expert_action() in ep.optimal_actions()
            taken.append(ep.action_names[ep.expert_action()])
            ep.step(ep.expert_action())
        assert ep.outcome()["success"] == 1.0 and ep.total_reward > 0.9, seed
        # the plan: the key, then the locked door (the last TOGGLE), then free the hand, the ball
        unlock = len(taken) - 1 - taken[::-1].index("TOGGLE")
        assert taken.index("PICKUP") < unlock < taken.index("DROP") < len(taken) - 1
        assert taken[-1] == "PICKUP"


def test_the_ball_cannot_be_picked_up_with_the_key_in_hand():
    """Why the expert drops the key: MiniGrid's one-object hand, in the real env."""
    task = make_task(ENV)
    ep = task.episode(100)
    plan = [task.action_names[a] for a in ep.expert_plan()]
    for name in plan[: plan.index("DROP")]:
        ep.step(task.action_names.index(name))
    ep.step(task.action_names.index("TURN_LEFT"))
    ep.step(task.action_names.index("TURN_LEFT"))  # facing the ball, key in hand
    assert ep.view().front == "b" and ep.view().carrying == "key"
    ep.step(task.action_names.index("PICKUP"))
    assert not ep.done and ep.view().carrying == "key"
    assert ep.expert_plan() and ep.outcome()["success"] == 0.0


def test_the_prompts_state_the_hand_the_ball_and_the_subtask_at_every_level():
    task = make_task(ENV)
    ep = task.episode(100)
    plan = [task.action_names[a] for a in ep.expert_plan()]
    for name in plan[: plan.index("DROP")]:  # key in hand, door open, ball in view
        ep.step(task.action_names.index(name))
    texts = {}
    for level in LEVELS:
        prompt = AskPrompt(level, level)
        prompt.check(task)
        system, texts[level] = (
            m["content"] for m in prompt.session(ep, with_expert=False).messages(0)
        )
        assert "DROP the key on a free cell" in system
        assert "Autopilot: TURN_LEFT" in texts[level]
    for text in texts.values():
        assert "STATUS: Carrying=key  Ball=" in text and "SUBTASK: DROP THE KEY" in text
        assert "HasKey=" not in text  # DoorKey's lines stay DoorKey's
    assert "PREVIEW" in texts["enriched"] and "PREVIEW" not in texts["basic"]
    assert "MEMORY:" in texts["stateful_min"] and "KNOWN MAP" in texts["stateful"]
    assert "KNOWN MAP" not in texts["stateful_min"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_oracle_job_fetches_the_ball(tmp_path):
    from benchmark.job import run_job

    overrides = [f"env={ENV}", "method=slm_only", "slm=oracle", "eval.n_episodes=3"]
    cfg = compose_cfg(tmp_path / "root", *overrides, "quiet=true")
    summary = run_job(cfg, tmp_path / "oracle", multirun=False)
    rows = results.read_jsonl(tmp_path / "oracle" / "episodes.jsonl")
    assert len(rows) == 3 and all(r["success"] == 1.0 for r in rows)
    assert summary["success_mean"] == 1.0 and summary["ir_pooled"] == 1.0
