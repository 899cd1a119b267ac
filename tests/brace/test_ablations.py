"""Agent-BRACE's appendix ablations and ReAct-RL as trainer rows (conf/brace/): R_belief's terms
and format multiplier (`brace.reward`), the binary certainty scale (`brace.labels`: the
teacher's targets, the prompt and the reward's checks), the belief prompt without its
task-specific coverage (`brace.belief_prompt`), the ReAct prompt for the policy
(`brace.policy_input=react`) and the Summary-Belief ablation (`brace.policy_input=summary`);
each checked before any work, and at its default out of a trained
model's identity, so the models trained before these settings keep their folders."""

from __future__ import annotations

import re

import pytest

from benchmark.brace import checks
from benchmark.brace.rewards import BeliefWeights, belief_reward, diversity
from benchmark.brace.teacher import teacher_claims
from benchmark.envs import make_task
from benchmark.envs.truth import snapshot, verify
from benchmark.vocabulary import binary_label, on_scale, split_claim
from tests.conftest import compose_cfg

ROWS = ("react_rl", "summary_belief", "no_state_rewards", "no_correctness_tracking",
        "binary_labels", "no_task_supervision")  # fmt: skip
TASK_ONLY = BeliefWeights(correctness=0, tracking=0, diversity=0, format_gate=False)


def block(*lines: str) -> str:
    return "<belief_state>\n" + "\n".join(lines) + "\n</belief_state>"


@pytest.fixture(scope="module")
def doorkey():
    """DoorKey 8x8, seed 300, after two expert steps: a key and a locked door in view."""
    ep = make_task("doorkey8").episode(300)
    ep.step(ep.expert_action())
    ep.step(ep.expert_action())
    return ep


# ----------------------------------------------------------------------------- the reward
def test_a_zero_weight_drops_its_term_and_the_task_only_reward_is_the_success_alone(doorkey):
    truth = snapshot(doorkey)
    teacher = teacher_claims(truth)
    text = block(*teacher)
    full = belief_reward(text, [], truth, teacher, success=1.0)
    assert full.correctness == 1.0 and full.diversity > 0  # every term counts here
    no_ct = belief_reward(text, [], truth, teacher, 1.0, BeliefWeights(correctness=0, tracking=0))
    assert no_ct.total == pytest.approx(full.gate * (full.diversity + 0.99**truth.step))
    assert no_ct.total < full.total
    task_only = BeliefWeights(correctness=0, tracking=0, diversity=0, format_gate=False)
    # gamma^t x success whatever the format: also for no answer at all, or prose
    for answer in (text, None, "I went north."):
        r = belief_reward(answer, [], truth, teacher, 1.0, task_only)
        assert r.total == pytest.approx(0.99**truth.step), answer
        assert belief_reward(answer, [], truth, teacher, 0.0, task_only).total == 0.0
    # the default gates an unformatted answer to 0, success or not
    assert belief_reward(None, [], truth, teacher, 1.0).total == 0.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tracking": -1}, "reward tracking=-1: must be a number >= 0"),
        ({"success": float("nan")}, "reward success=nan: must be a number >= 0"),
        ({"correctness": True}, "reward correctness=True: must be a number >= 0"),
        ({"correctness": 0, "tracking": 0, "diversity": 0, "success": 0}, "all 0: R_belief"),
        ({"labels": "three"}, "labels='three': allowed seven, binary"),
    ],
)
def test_bad_reward_settings_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        BeliefWeights(**kwargs)


def test_binary_labels_collapse_to_certain_or_unknown(doorkey):
    """confirmed and almost certain -> confirmed; every other level -> unknown; the reward reads
    the model's, the previous and the teacher's claims on the binary scale, and diversity is the
    entropy over its two levels."""
    assert [binary_label(lb) for lb in ("confirmed", "almost certain", "probable", "possible",
            "unlikely", "doubtful", "unknown")] == ["confirmed"] * 2 + ["unknown"] * 5  # fmt: skip
    truth = snapshot(doorkey)
    teacher = teacher_claims(truth)
    assert {split_claim(c)[1] for c in on_scale(teacher, "binary")} <= {"confirmed", "unknown"}
    assert [split_claim(c)[0] for c in on_scale(teacher, "binary")] == [
        split_claim(c)[0] for c in teacher
    ]
    binary = BeliefWeights(labels="binary")
    locked = "- the door is locked [almost certain]"  # true, observed: almost certain
    assert verify(locked, truth).verdict == "correct"
    r7 = belief_reward(block(locked), [], truth, teacher, 0.0)
    r2 = belief_reward(block(locked), [], truth, teacher, 0.0, binary)
    assert r7.correctness == r2.correctness == 1.0  # almost certain is read as confirmed
    hedged = "- the door is locked [probable]"  # true and in view, held as probable
    assert verify(hedged, truth).verdict == "partial"
    assert belief_reward(block(hedged), [], truth, teacher, 0.0, binary).verdicts[0].label == (
        "unknown"
    )
    wrong = "- the door is open [probable]"  # false, held as probable: incorrect on 7 levels,
    assert verify(wrong, truth).verdict == "incorrect"  # not certain (unknown) on two
    assert belief_reward(block(wrong), [], truth, teacher, 0.0, binary).correctness > 0.0
    two = ["- a [confirmed]", "- b [unknown]"]
    assert diversity(two, 2) == pytest.approx(1.0)
    assert diversity(two) == pytest.approx(0.3562, abs=1e-4)  # log 2 / log 7 on seven levels
    # tracking: the previous belief on the binary scale is not "stale" because of its labels
    held = on_scale(teacher, "binary")
    assert belief_reward(block(*held), held, truth, teacher, 0.0, binary).tracking == 1.0


# ----------------------------------------------------------------------------- the prompt
def test_the_prompt_shows_the_binary_scale_and_parses_onto_it(doorkey):
    from benchmark.brace.pipeline import prompt_of

    seven, binary = prompt_of("belief"), prompt_of("belief", labels="binary")
    s7 = seven.session(doorkey, with_expert=True)
    s2 = binary.session(doorkey, with_expert=True)
    system7, system2 = s7.update_messages()[0]["content"], s2.update_messages()[0]["content"]
    assert "- almost certain:" in system7 and "- almost certain:" not in system2
    assert "- confirmed: certain" in system2 and "- unknown: not certain" in system2
    answer = block("- the door is locked [almost certain]", "- the key is far [probable]")
    assert s7.parse_update(answer)[0].endswith("[almost certain]")
    assert s2.parse_update(answer) == ["- the door is locked [confirmed]",
                                       "- the key is far [unknown]"]  # fmt: skip
    # the SFT target (the teacher's belief) on the binary scale, the same claims (HigherLower:
    # the next card's labels spread over the scale)
    cards = make_task("higherlower").episode(301)
    target7 = seven.session(cards, True).render_belief("", "").splitlines()[1:-1]
    target2 = binary.session(cards, True).render_belief("", "").splitlines()[1:-1]
    assert target2 == on_scale(target7, "binary") and target2 != target7
    assert {split_claim(c)[1] for c in target2} <= {"confirmed", "unknown"}
    with pytest.raises(Exception, match=r"prompt labels='five': allowed seven, binary"):
        prompt_of("belief", labels="five")  # (hydra wraps the prompt's ValueError)


def test_the_generic_belief_prompt_leaves_out_the_task_specific_coverage(doorkey):
    from benchmark.brace.pipeline import prompt_of

    task = prompt_of("belief").session(doorkey, True).update_messages()
    generic = prompt_of("belief", belief_prompt="generic").session(doorkey, True).update_messages()
    assert "MANDATORY COVERAGE: location, map and exits" in task[0]["content"]
    assert "MANDATORY COVERAGE" not in generic[0]["content"]
    assert generic[0]["content"] == task[0]["content"].replace(
        "MANDATORY COVERAGE: location, map and exits, goal-relevant objects, inventory, subtask "
        "progress. ",
        "",
    )
    assert generic[1] == task[1]  # the same task, belief, observations and view


def test_react_rl_trains_on_the_react_prompt():
    """policy_input=react: the ReAct prompt (raw history, a Reason line before the action),
    not the history prompt Direct-Action RL trains on."""
    from benchmark.brace.pipeline import prompt_of

    react, history = prompt_of("react"), prompt_of("history")
    assert react.name == "react" and react.rationale and react.history
    assert history.name == "history" and not history.rationale


# ----------------------------------------------------------------------------- the settings
def test_the_ablation_rows_and_their_settings(tmp_path):
    s = {row: checks.check(compose_cfg(tmp_path, "env=empty5x5_random", f"brace={row}"))
         for row in ("agent_brace", *ROWS)}  # fmt: skip
    assert s["react_rl"].raw_history and s["react_rl"].roles == ("policy",)
    assert s["react_rl"].policy_input == "react" and s["react_rl"].sft_roles == []
    assert s["no_state_rewards"].reward_weights() == BeliefWeights(
        correctness=0, tracking=0, diversity=0, success=1, format_gate=False
    )
    assert s["no_correctness_tracking"].reward_weights() == BeliefWeights(correctness=0, tracking=0)
    assert s["binary_labels"].reward_weights().labels == "binary"
    assert s["no_task_supervision"].sft_roles == [] and s["no_task_supervision"].roles == (
        "belief", "policy")  # fmt: skip
    assert s["no_task_supervision"].belief_prompt == "generic"
    assert s["agent_brace"].reward_weights() == BeliefWeights()
    assert len({x.out for x in s.values()}) == len(s)  # each row its own folder


def test_the_new_settings_at_their_defaults_stay_out_of_a_models_identity(tmp_path):
    """Models trained before these settings keep their identity (their folders are reused):
    at the defaults, the RL and SFT identities hold exactly the keys they held before (with the
    prompt the models train on); a row
    that sets one names it (so its folder is never taken for Agent-BRACE's)."""
    base = checks.check(compose_cfg(tmp_path, "env=empty5x5_random"))
    assert set(base.rl_identity()) == {
        "name", "algorithm", "env_name", "train_belief", "policy_input", "seed", "base",
        "tiny_size", "mode", "tau", "teacher_episodes", "sft_random_trajectories",
        "sft_examples", "sft_epochs", "sft_batch", "sft_lr", "sft_roles", "held_out_episodes",
        "rl_max_steps", "reward_episodes", "env", "rl", "ask_job", "prompt", "rules",
    }  # fmt: skip
    assert set(base.sft_identity()) == {
        "env", "base", "tiny_size", "teacher_episodes", "sft_random_trajectories", "sft_examples",
        "sft_epochs", "sft_batch", "sft_lr", "sft_roles", "seed", "policy_input", "prompt", "rules",
    }  # fmt: skip
    # the same values spelled out on the command line: still the default identity
    spelled = checks.check(compose_cfg(tmp_path, "env=empty5x5_random", "brace.reward.tracking=1",
                                       "brace.labels=seven", "brace.belief_prompt=task"))  # fmt: skip
    assert spelled.rl_identity() == base.rl_identity()
    for override, key in (("brace.reward.diversity=0.5", "reward"),
                          ("brace.reward.format=false", "reward"),
                          ("brace.labels=binary", "labels"),
                          ("brace.belief_prompt=generic", "belief_prompt")):  # fmt: skip
        other = checks.check(compose_cfg(tmp_path, "env=empty5x5_random", override))
        assert key in other.rl_identity() and other.rl_identity() != base.rl_identity()
        # the SFT data change with the scale and the prompt, not with the reward
        assert (other.sft_identity() != base.sft_identity()) == (key != "reward"), override


@pytest.mark.parametrize(
    "override, message",
    [
        ("brace.reward.correctness=-1", "brace.reward.correctness=-1: must be a number >= 0"),
        ("brace.reward.format=maybe", "brace.reward.format='maybe': allowed true, false"),
        ("+brace.reward.format_score=1", "brace.reward=['correctness', 'diversity', 'format'"),
        ("brace.labels=three", "brace.labels='three': allowed seven, binary"),
        ("brace.belief_prompt=none", "brace.belief_prompt='none': allowed task, generic"),
        (
            "brace.policy_input=raw",
            "brace.policy_input='raw': allowed belief, summary, history, react",
        ),
    ],
)
def test_a_bad_ablation_setting_is_refused_naming_its_key(tmp_path, override, message):
    with pytest.raises(checks.SettingsError, match=re.escape(message)):
        checks.check(compose_cfg(tmp_path, "env=empty5x5_random", override))


def test_all_four_weights_zero_and_ablations_on_a_raw_history_row_are_refused(tmp_path):
    zero = [f"brace.reward.{k}=0" for k in ("correctness", "tracking", "diversity", "success")]
    with pytest.raises(checks.SettingsError, match=r"brace.reward correctness, .* all 0"):
        checks.check(compose_cfg(tmp_path, "env=empty5x5_random", *zero))
    for row in ("react_rl", "direct_rl"):
        with pytest.raises(checks.SettingsError,
                           match=r"brace.labels='binary': policy_input=\w+ has no belief model"):  # fmt: skip
            checks.check(compose_cfg(tmp_path, "env=empty5x5_random", f"brace={row}",
                                     "brace.labels=binary"))  # fmt: skip
    with pytest.raises(checks.SettingsError, match=r"policy_input=react has no belief model"):
        checks.check(compose_cfg(tmp_path, "env=empty5x5_random", "brace=react_rl",
                                 "brace.sft_roles=[belief]"))  # fmt: skip


# ----------------------------------------------------------------------------- the RL batch
def test_the_rl_batch_scores_the_belief_with_the_rows_reward(tmp_path):
    """ppo.trajectories and joint.samples (the RL stage's rewards) make R_belief as the row's
    weights say: the task-only row's every update gets gamma^t x success exactly."""
    from benchmark.brace import joint, ppo, rollout
    from benchmark.brace.pipeline import prompt_of

    task = make_task("empty5x5_random")
    seeds = [1200, 1201]
    _, logs = rollout.run(task, prompt_of("belief"), rollout.TeacherConsultant(), seeds)
    groups = {s: [[x for x in logs if x.seed == s]] for s in seeds}
    task_only = BeliefWeights(correctness=0, tracking=0, diversity=0, format_gate=False)
    _, full = ppo.trajectories(groups, ["belief"])
    _, only = ppo.trajectories(groups, ["belief"], task_only)
    want = [0.99**x.step * x.success for x in logs]
    assert only["belief"] == pytest.approx(want)
    assert any(x.success for x in logs)  # the expert wins: the success term is not all 0
    assert all(f > o for f, o in zip(full["belief"], only["belief"], strict=True))
    assert joint.samples(groups, task_only)[1]["belief"] == pytest.approx(want)


# ----------------------------------------------------------------------------- Summary-Belief
def test_the_summary_belief_trains_on_the_teachers_belief_as_sentences(tmp_path):
    """policy_input=summary: the mem1 prompt's queries (what a prompt=mem1 cell asks), the
    teacher's claims as the SFT target with their labels dropped; its updates reach the RL
    batch as belief completions, scored by the success term alone."""
    from benchmark.brace import ppo, rollout
    from benchmark.brace.pipeline import prompt_of
    from benchmark.prompts.summary import SummaryPrompt

    prompt = prompt_of("summary")
    assert isinstance(prompt, SummaryPrompt) and prompt.name == "mem1"
    ep = make_task("doorkey8").episode(300)
    ep.step(ep.expert_action())
    teacher = teacher_claims(snapshot(ep))
    target = prompt.session(ep, True).render_belief("", "")
    assert target == "<summary>\n" + "\n".join(split_claim(c)[0] for c in teacher) + "\n</summary>"
    assert "[" not in target  # no certainty labels
    # the evaluation cell's prompt (conf/prompt/mem1.yaml as is) asks the same
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from benchmark.config import option_file

    cell = instantiate(OmegaConf.load(option_file("prompt", "mem1")), sampling=None)
    assert cell.session(ep, True).update_messages() == prompt.session(ep, True).update_messages()
    task = make_task("empty5x5_random")
    seeds = [1200, 1201]
    _, logs = rollout.run(task, prompt, rollout.TeacherConsultant(), seeds)
    examples = rollout.sft_examples(logs)["belief"]
    assert examples and all(x.answer.startswith("<summary>") for x in examples)
    groups = {s: [[x for x in logs if x.seed == s]] for s in seeds}
    _, raw = ppo.trajectories(groups, ["belief"], TASK_ONLY)
    assert len(raw["belief"]) == len(logs) == len(examples)  # one update per step
    assert raw["belief"] == pytest.approx([0.99**x.step * x.success for x in logs])
    assert any(raw["belief"])
    _, gated = ppo.trajectories(groups, ["belief"])  # the belief format gates a summary to 0
    assert not any(gated["belief"])


def test_the_summary_belief_row_and_its_refused_settings(tmp_path):
    s = checks.check(compose_cfg(tmp_path, "env=empty5x5_random", "brace=summary_belief"))
    assert s.roles == ("belief", "policy") and not s.raw_history
    assert s.reward_weights() == TASK_ONLY
    for override, message in (
        ("brace.reward.format=true", "policy_input=summary writes no claims"),
        ("brace.reward.diversity=1", "policy_input=summary writes no claims"),
        ("brace.labels=binary", "brace.labels='binary': policy_input=summary has no certainty"),
    ):
        with pytest.raises(checks.SettingsError, match=re.escape(message)):
            checks.check(compose_cfg(tmp_path, "env=empty5x5_random", "brace=summary_belief",
                                     override))  # fmt: skip
    cell = compose_cfg(tmp_path, "+experiment=brace_tw", "env=tw_cooking",
                       "method=brace_summary_belief", "brace.seed=1")  # fmt: skip
    assert cell.prompt.name == "mem1"
    assert cell.slm.backend.path.belief.endswith(
        "brace/tw_quest/summary_belief-s1/rl-always/belief"
    )
