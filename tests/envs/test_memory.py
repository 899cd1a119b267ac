"""The MiniGrid Memory family (benchmark/envs/memory.py), added only through the env-family
extension point: found by name, its expert, its prompts at every level, and whole jobs."""

from __future__ import annotations

import pytest

from benchmark.envs import family_of, make_task
from benchmark.envs.memory import MemoryTask, cue_seen
from benchmark.prompts.ask import AskPrompt
from benchmark.prompts.feedback import FeedbackPrompt
from benchmark.vocabulary import LEVELS

ENV = "memory_s11"


def _play(ep, actions):
    for a in actions:
        if ep.done:
            break
        ep.step(a)
    return ep


def test_the_family_is_found_by_its_name_and_declares_its_prompts():
    task = make_task(ENV)
    assert isinstance(task, MemoryTask)
    fam = family_of(task)
    assert fam.name == "memory" and fam.supports("ask") and fam.supports("belief")
    assert not fam.supports("feedback")
    with pytest.raises(ValueError, match="does not support env 'memory_s11'"):
        FeedbackPrompt("hwbp").check(task)
    with pytest.raises(ValueError, match="not a MiniGrid Memory id"):
        MemoryTask("x", "MiniGrid-FourRooms-v0", None, ["FORWARD"])


def test_the_expert_always_reaches_the_matching_object_and_a_fixed_side_is_a_coin_flip():
    task = make_task(ENV)
    expert, north = [], []
    for seed in range(100, 130):
        ep = task.episode(seed)
        while not ep.done:
            assert ep.expert_action() in ep.optimal_actions()
            ep.step(ep.expert_action())
        expert.append(ep.outcome()["success"])
        # a memoryless rule: walk to the junction, always turn north
        ep = task.episode(seed)
        mid = ep.sim.height // 2
        while not ep.done and tuple(ep.sim.agent_pos) != (ep.sim.success_pos[0], mid):
            ep.step(2 if ep.view().front != "#" else 1)
        _play(ep, [0, 2, 2, 2])  # face north from east, step toward the north object
        north.append(ep.outcome()["success"])
    assert sum(expert) == len(expert)
    assert 0.2 < sum(north) / len(north) < 0.8  # the goal side depends on the unseen cue


def test_the_cue_is_remembered_only_at_the_stateful_levels():
    task = make_task(ENV)
    ep = _play(task.episode(105), [0, 0])  # turn around: the start room and its cue in view
    cue = cue_seen(ep.view(), ep.memory)
    assert cue in ("key", "ball")
    texts = {}
    for level in LEVELS:
        prompt = AskPrompt(level, level)
        prompt.check(task)
        texts[level] = prompt.session(ep, with_expert=False).messages(2)[1]["content"]
        assert "Autopilot: FORWARD" in texts[level]
    assert f"CUE (start room, remembered): {cue}" in texts["stateful_min"]
    assert "KNOWN MAP" in texts["stateful"] and "KNOWN MAP" not in texts["stateful_min"]
    assert "CUE" not in texts["basic"] and "CUE" not in texts["enriched"]
    assert "PREVIEW" in texts["enriched"] and "PREVIEW" not in texts["basic"]
