"""Agent-BRACE's teacher rollouts and joint RL (benchmark.brace.rollout/joint/train):
teacher trajectories through the Evaluator give each role's SFT examples, GRPO's group-relative
advantages on hand-built rollouts, and one real RL iteration of the tiny model on TRAINING seeds
only (a validation seed is refused; every episode the loop plays is a training seed)."""

from __future__ import annotations

import pytest

from benchmark.brace import joint, rollout
from benchmark.brace.pipeline import brace_prompt, task_for
from benchmark.brace.rewards import format_score
from benchmark.brace.rl import RLJob, RLSettings
from benchmark.finetune import lm
from benchmark.seeds import DEFAULT_SPLITS


@pytest.fixture(scope="module")
def teacher_logs():
    return rollout.run(task_for("empty5x5_random"), brace_prompt(), rollout.TeacherConsultant(),
                       [200, 201])  # fmt: skip


def test_teacher_rollouts_give_both_roles_examples(teacher_logs):
    rows, logs = teacher_logs
    assert [r["success"] for r in rows] == [1.0, 1.0]  # the expert reaches the goal
    assert logs and all(s.belief == s.teacher for s in logs)  # the update took the teacher's
    assert logs[0].previous == ["- nothing has been observed yet [unknown]"]
    assert logs[1].previous == logs[0].belief or logs[1].seed != logs[0].seed
    ex = rollout.sft_examples(logs)
    assert len(ex["belief"]) == len(ex["policy"]) == len(logs)
    assert ex["belief"][0].answer.startswith("<belief_state>\n- I am at")
    assert ex["policy"][0].answer in ex["policy"][0].actions  # the expert's action, bare
    states = rollout.belief_states(logs)
    assert states[0].answer == ex["belief"][0].answer and states[0].success == 1.0


def test_sft_data_is_gold_plus_random_trajectories_of_the_same_games(teacher_logs):
    """Each game's gold trajectory gives both roles' examples; its random trajectories add
    belief examples only (the teacher's belief at states random actions reach), and they reach
    states the expert's path never does."""
    _, gold = teacher_logs
    ex = rollout.teacher_examples(task_for("empty5x5_random"), brace_prompt(), [200, 201], 2)
    assert len(ex["policy"]) == len(gold)  # the expert's actions only
    assert len(ex["belief"]) > 2 * len(gold)
    answers = {e.answer for e in ex["belief"]}
    assert {e.answer for e in rollout.sft_examples(gold)["belief"]} < answers
    assert {e.seed for e in ex["belief"]} == {200, 201}
    again = rollout.teacher_examples(task_for("empty5x5_random"), brace_prompt(), [200, 201], 2)
    assert [e.answer for e in again["belief"]] == [e.answer for e in ex["belief"]]  # seeded


def test_rl_draws_from_the_whole_training_pool():
    """TextWorld: one seed per game of `task.train_games` (each folds onto its own game);
    an env without a pool: a fresh seed for every episode of every RL iteration."""
    from benchmark.brace.pipeline import rl_seed_pool
    from benchmark.envs import load_env_cfg
    from benchmark.seeds import TRAIN_SEED_MIN

    rl = RLSettings(iterations=4, policy_iterations=2, seeds_per_step=4)
    tw = load_env_cfg("tw_quest")
    tw.task.train_games = 64
    seeds = rl_seed_pool(tw, rl)
    task = task_for(tw)
    assert len({task.game_seed(s) for s in seeds}) == 64 == len(seeds)
    assert min(seeds) == TRAIN_SEED_MIN
    grid = rl_seed_pool(load_env_cfg("empty5x5_random"), rl)
    assert len(set(grid)) == (4 + 2) * 4 and min(grid) >= TRAIN_SEED_MIN


def test_group_advantages_and_rewards_of_hand_built_rollouts(teacher_logs):
    assert joint.group_advantages([1, 1, 1]) == [0.0, 0.0, 0.0]  # no signal in an agreeing group
    adv = joint.group_advantages([1.0, 0.0])
    assert adv[0] > 0 > adv[1] and sum(adv) == pytest.approx(0)
    _, logs = teacher_logs
    won = [s for s in logs if s.seed == 200]
    lost = [rollout.StepLog(**{**s.__dict__, "success": 0.0}) for s in won]
    for s in lost:  # the losing member wrote a malformed belief
        s.turns = [rollout.Turn(t.role, t.messages, t.decoding, t.actions,
                                "garbage" if t.role == "belief" else t.text, t.expert,
                                {"ids": 1}) for t in s.turns]  # fmt: skip
    for s in won:
        s.turns = [rollout.Turn(**{**t.__dict__, "extra": {"ids": 0}}) for t in s.turns]
    batch, raw = joint.samples({200: [won, lost]})
    teacher_format = [format_score(t.text) for s in won for t in s.turns if t.role == "belief"]
    assert min(teacher_format) > 0
    assert raw["env"] == [1.0, 0.0] and raw["gate"] == teacher_format + [0.0] * len(lost)
    policy = [(ids["ids"], a) for r, ids, a in batch if r == "policy"]
    belief = [(ids["ids"], a) for r, ids, a in batch if r == "belief"]
    assert all((a > 0) == (i == 0) for i, a in policy)  # the winner's actions are reinforced
    assert all((a > 0) == (i == 0) for i, a in belief)  # the teacher's beliefs over garbage


def test_sibling_updates_of_one_state_form_its_grpo_group(teacher_logs):
    """--rl-belief-samples K: a belief turn carrying K sampled updates of its state gets one
    group per state: the teacher's update beats the malformed sibling of the SAME state, and
    the raw rewards count only the update the episode went on with."""
    _, logs = teacher_logs
    won = [s for s in logs if s.seed == 200]
    for s in won:
        s.turns = [
            rollout.Turn(**{**t.__dict__, "extra": {"ids": "first", "siblings": [
                (t.text, {"ids": "teacher"}), ("garbage", {"ids": "garbage"})]}})
            if t.role == "belief" else rollout.Turn(**{**t.__dict__, "extra": {}})
            for t in s.turns
        ]  # fmt: skip
    batch, raw = joint.samples({200: [won]})
    belief = [(ids["ids"], a) for r, ids, a in batch if r == "belief"]
    n = sum(t.role == "belief" for s in won for t in s.turns)
    assert len(belief) == 2 * n and len(raw["belief"]) == n
    assert all((a > 0) == (i == "teacher") for i, a in belief)


def test_joint_rl_refuses_a_held_out_seed_before_any_work():
    with pytest.raises(ValueError, match="seed 5 is in the validation split"):
        joint.train(RLJob(None, None, {}, {}, [200, 5], DEFAULT_SPLITS), RLSettings())
    with pytest.raises(ValueError, match="seed 150 is in the test split"):
        joint.train(RLJob(None, None, {}, {}, [150], DEFAULT_SPLITS), RLSettings())


@pytest.mark.slow
def test_joint_rl_trains_on_training_seeds_only(tmp_path, monkeypatch, tiny_model):
    base = tiny_model("small")
    played = []
    real_run = rollout.run

    def spy(task, prompt, consultant, seeds, **kw):
        played.extend(seeds)
        return real_run(task, prompt, consultant, seeds, **kw)

    monkeypatch.setattr(rollout, "run", spy)
    prompt = brace_prompt()
    prompt.update_decoding = type(prompt.update_decoding)(max_new_tokens=12)
    out = {"belief": tmp_path / "b", "policy": tmp_path / "p"}
    job = RLJob(task_for("empty5x5_random", 2), prompt, {"belief": base, "policy": base}, out,
                [300, 301, 302], DEFAULT_SPLITS, log=lambda r: None)  # fmt: skip
    settings = RLSettings(iterations=1, seeds_per_step=2, group=2, belief_samples=2)
    result = joint.train(job, settings)
    assert played and all(s >= 200 for s in played) and len(played) == 4
    (row,) = result["history"]
    assert row["updates"] == 2 * 2 * 2  # 2 seeds x 2 members x 2 steps (capped episodes)
    # (each update sampled twice from its state: the raw rewards count the one followed)
    assert (out["belief"] / "config.json").exists() and (out["policy"] / "config.json").exists()


def test_rl_gains_are_paired_differences_with_cis():
    """RL - SFT on the same held-out states and training seeds: a model better on every state
    has a CI above 0; seeds where a model made no belief update are left out of that pair."""
    from benchmark.brace.measure import gains

    def side(correct, r_belief, r_env, per_seed_belief):
        return (
            {"per_state": {"correctness": correct, "r_belief": r_belief}},
            {"per_seed": {"r_env": r_env, "r_belief": per_seed_belief}},
        )

    sft_h, sft_t = side([0.5, 0.6, 0.7, 0.4], [2.0, 2.1, 2.2, 1.9], [0, 1, 0], [1.0, None, 0.5])
    rl_h, rl_t = side([0.6, 0.7, 0.8, 0.5], [2.0, 2.1, 2.2, 1.9], [0, 1, 1], [1.5, 0.7, None])
    report = {
        "held_out": {"sft": sft_h, "rl": rl_h},
        "train_reward": {"sft": sft_t, "rl": rl_t},
    }
    g = gains(report)
    assert g["held_out_correctness"]["diff_mean"] == pytest.approx(0.1)
    assert g["held_out_correctness"]["diff_ci95_low"] > 0
    assert g["held_out_r_belief"]["diff_mean"] == 0
    assert g["train_r_env"]["n"] == 3 and g["train_r_env"]["diff_mean"] == pytest.approx(1 / 3)
    assert g["train_r_belief"] == {**g["train_r_belief"], "n": 1, "diff_mean": 0.5}


def test_a_half_saved_model_folder_is_set_aside_and_made_again(tmp_path):
    """What a kill -9 while saving used to leave (a 0-byte config.json, no completion record)
    is never trusted: the folder is set aside, never deleted, and the model made again whole;
    a model made whole is reused, and one whose file changed since is not."""
    from benchmark.brace.models import build_model, model_complete

    target = tmp_path / "sft" / "belief"
    target.mkdir(parents=True)
    (target / "config.json").write_bytes(b"")
    assert not model_complete(target)
    made = []

    def make(work):
        made.append(work)
        (work / "config.json").write_text('{"model_type": "toy"}')
        (work / "model.safetensors").write_bytes(b"weights")

    build_model(target, make, {"seed": 0})
    assert len(made) == 1 and model_complete(target)
    assert [p.name for p in target.parent.iterdir() if p.name.startswith(".belief.corrupt")]
    build_model(target, make, {"seed": 0})
    assert len(made) == 1  # complete: reused
    (target / "model.safetensors").write_bytes(b"WEIGHTS")  # same size, other bytes
    assert not model_complete(target)

    def killed(work):  # a kill inside the save: no folder that looks complete is left
        (work / "config.json").write_text("{}")
        raise KeyboardInterrupt

    other = tmp_path / "rl" / "belief"
    with pytest.raises(KeyboardInterrupt):
        build_model(other, killed, {"seed": 0})
    assert not other.exists() and not model_complete(other)


def test_rolling_mean_of_the_training_curves():
    from benchmark.brace.curves import rolling

    assert rolling([1, 3, 5, 7], 2).tolist() == [1, 2, 4, 6]
    assert rolling([2.0], 5).tolist() == [2.0]


def test_a_joint_update_raises_a_rewarded_completion_and_lowers_a_punished_one(tiny_model):
    """One policy-gradient step of the joint RL on the tiny model: a completion with a positive
    advantage becomes more likely after its prompt, one with a negative advantage less likely
    (the loss is -A x mean log-prob, so a flipped sign does the opposite)."""
    import torch

    path = tiny_model()
    _, tok = lm.load(path)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "The goal is ahead. Answer with one action."}],
        add_generation_prompt=True,
        tokenize=False,
        enable_thinking=False,
    )
    end = tok.convert_tokens_to_ids("<|im_end|>")
    ids = {
        "prompt_ids": tok(prompt, add_special_tokens=False)["input_ids"],
        "completion_ids": [*tok.encode("FORWARD", add_special_tokens=False), end],
    }

    def mean_logp(model) -> float:
        x = torch.tensor([ids["prompt_ids"] + ids["completion_ids"]])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=x).logits[0, :-1], -1)
        start = len(ids["prompt_ids"]) - 1
        return float(logp[start:].gather(-1, x[0, 1 + start :, None]).mean())

    change = {}
    for advantage in (1.0, -1.0):
        model, tok = lm.load(path)  # a fresh copy for each sign
        before = mean_logp(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
        losses = joint.policy_gradient_step(
            {"policy": (model, tok)}, {"policy": opt}, [("policy", ids, advantage)]
        )
        assert losses["policy"] == pytest.approx(-advantage * before, abs=1e-4)
        change[advantage] = mean_logp(model) - before
    assert change[1.0] > 0.01 and change[-1.0] < -0.01, change
