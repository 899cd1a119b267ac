"""POPGym RepeatPreviousEasy (benchmark/envs/repeatprevious.py), added with new files only through
the env-family extension point: found by name, its expert against POPGym's own scoring, a
memoryless rule's ceiling, the remembered card at the stateful levels only, belief and
Agent-BRACE claims checked against the true hand, and whole jobs."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark.envs import available_families, family_of, make_task
from benchmark.envs.repeatprevious import SUIT_NAMES, RepeatPreviousTask
from benchmark.envs.truth import snapshot, verify
from benchmark.prompts.ask import AskPrompt
from benchmark.prompts.feedback import FeedbackPrompt
from benchmark.vocabulary import LEVELS

ENV = "repeatprevious_easy"
TEST_SEEDS = range(100, 200)


def _texts(ep, autopilot=None):
    """The ASK state block at every level for the episode's current step."""
    texts = {}
    for level in LEVELS:
        prompt = AskPrompt(level, level)
        prompt.check(ep.task)
        texts[level] = prompt.session(ep, with_expert=False).messages(autopilot)[1]["content"]
    return texts


def test_the_family_is_found_by_its_name_and_refuses_bad_settings():
    task = make_task(ENV)
    assert isinstance(task, RepeatPreviousTask) and "repeatprevious" in available_families()
    assert (task.k, task.max_steps, task.action_names) == (4, 51, SUIT_NAMES)
    fam = family_of(task)
    assert fam.name == "repeatprevious" and fam.supports("ask") and fam.supports("belief")
    assert fam.supports("brace") and not fam.supports("feedback")
    with pytest.raises(ValueError, match="does not support env 'repeatprevious_easy'"):
        FeedbackPrompt("hwbp").check(task)
    with pytest.raises(ValueError, match="always plays 51 answers"):
        RepeatPreviousTask("x", max_steps=52)
    with pytest.raises(ValueError, match="permutation"):
        RepeatPreviousTask("x", actions=["SPADES", "HEARTS"])
    with pytest.raises(ValueError, match="k must be in 1..51"):
        RepeatPreviousTask("x", k=52)


def test_the_expert_is_right_at_every_scored_card_and_a_memoryless_rule_is_not():
    """The expert earns POPGym's best return (1.0: every scored answer paid +1/48) on all 100
    test seeds; the best rule on the current suit alone (another suit than it) stays near
    13/51, and every rule on the current suit alone does no better than 0.3."""
    task = make_task(ENV)
    per_rule = {shift: [] for shift in range(4)}  # answer suit (current + shift) % 4
    for seed in TEST_SEEDS:
        ep = task.episode(seed)
        while not ep.done:
            optimal = ep.optimal_actions()
            assert ep.expert_action() in optimal
            assert len(optimal) == (4 if ep.steps < 3 else 1)  # the first 3 are not scored
            assert ep.memory.suits == ep.view().dealt  # the memory is the true hand
            ep.step(ep.expert_action())
        assert ep.steps == 51 and ep.outcome()["accuracy"] == 1.0
        assert ep.total_reward == pytest.approx(1.0)
        for shift, accs in per_rule.items():
            ep = task.episode(seed)
            while not ep.done:
                ep.step((int(np.argmax(ep.obs)) + shift) % 4)
            accs.append(ep.outcome()["accuracy"])
    means = {shift: float(np.mean(accs)) for shift, accs in per_rule.items()}
    assert max(means.values()) < 0.3 and means[0] < min(means[1], means[2], means[3])


def test_the_episode_observes_what_the_training_env_gives_the_policy():
    task = make_task(ENV)
    env = task.training_env(seed=3)
    obs, info = env.reset()
    ep = task.episode(info["reset_seed"])
    np.testing.assert_array_equal(ep.obs, obs)
    for a in (0, 1, 2, 3, 0):
        obs, *_ = env.step(a)
        ep.step(a)
        np.testing.assert_array_equal(ep.obs, obs)
        assert obs.sum() == 1.0 and SUIT_NAMES[int(np.argmax(obs))] in _texts(ep)["basic"]


def test_the_asked_for_card_is_remembered_only_at_the_stateful_levels():
    """At every scored card the stateful levels name the suit the expert answers; the basic and
    enriched levels show only what the policy sees (plus the deal's counts)."""
    task = make_task(ENV)
    ep = task.episode(101)
    for _ in range(3):
        texts = _texts(ep)
        assert (
            "not dealt yet" in texts["enriched"]
            and "Asked-for card: not dealt" in texts["stateful_min"]
        )
        ep.step(ep.expert_action())
    while not ep.done:
        texts = _texts(ep, autopilot=0)
        view, answer = ep.view(), SUIT_NAMES[ep.expert_action()]
        line = f"Card {view.target_card} (asked for, remembered): {answer}"
        assert line in texts["stateful_min"] and line in texts["stateful"]
        assert "Autopilot: SPADES" in texts["basic"]
        assert f"Current card: {SUIT_NAMES[view.suit]}  Card {view.card}/52" in texts["basic"]
        assert "MEMORY" not in texts["basic"] and "MEMORY" not in texts["enriched"]
        assert "Dealt so far" in texts["enriched"] and "Dealt so far" not in texts["basic"]
        assert f"Asked for: card {view.target_card} (3 back)" in texts["enriched"]
        assert "ALL CARDS REMEMBERED" in texts["stateful"]
        assert "ALL CARDS REMEMBERED" not in texts["stateful_min"]
        ep.step(ep.expert_action())


def test_belief_and_teacher_claims_hold_at_the_true_state():
    task = make_task(ENV)
    fam = family_of(task)
    ep = task.episode(102)
    for _ in range(20):
        ep.step(ep.expert_action())
    truth = snapshot(ep)
    claims = fam.belief_claims(ep)
    assert claims == fam.brace_teacher(truth)  # the memory holds the true hand
    view = ep.view()
    asked = f"- card {view.target_card} was a {SUIT_NAMES[view.target][:-1].lower()} [confirmed]"
    assert asked in claims and len(claims) == 2 + 3  # current, the deal, the 3 cards before
    assert all(verify(c, truth).verdict == "correct" for c in claims)
    wrong = SUIT_NAMES[(view.target + 1) % 4][:-1].lower()
    assert verify(f"- card {view.target_card} was a {wrong} [confirmed]", truth).verdict == (
        "incorrect"
    )
    assert verify("- card 40 was a heart [confirmed]", truth).verdict == "unverifiable"
    assert fam.belief_steps(ep, 19, 5) == [
        f"card 20 ({SUIT_NAMES[ep.memory.suits[19]]}): named {ep.memory.actions[-1]} -> RIGHT"
    ]
