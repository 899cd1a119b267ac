"""ASK in text games: PPO with MC dropout over the TextWorld task's fixed, masked command space.
The mask (the observation's last slots) enters PPO's sampling, its greedy action and the gate's
MC-dropout entropy, so only admissible commands count. Each test runs with both actor heads: one
logit per slot, and each command scored from its own words (policy.head=commands, on the
player's input: room description and inventory too). Real games, real SB3 PPO."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from benchmark.envs import make_task
from benchmark.envs.textworld.task import PLAYER_COMMAND_DIM, TEXT_DIM, hashed_words
from benchmark.policy.network import MASKED_LOGIT, CommandScoringPolicy, MaskedDropoutPolicy
from benchmark.policy.train import build_model
from benchmark.uncertainty import mc_dropout, mc_dropout_sequential

POLICY = {
    "seed": 0,
    "n_envs": 2,
    "learning_rate": 1e-3,
    "lr_schedule": "constant",
    "net_arch": [64, 64],
    "dropout": 0.2,
    "ppo": {"n_steps": 32, "batch_size": 32, "n_epochs": 1},
}


@pytest.fixture(scope="module", params=["slots", "commands"])
def head(request):
    return request.param


@pytest.fixture(scope="module")
def task(head):
    env = make_task("tw_treasure") if head == "slots" else player_task()
    env.train_games = 2  # the training pool: two games (the run's cache, tests/conftest.py)
    return env


def player_task():
    from benchmark.envs import load_env_cfg

    cfg = load_env_cfg("tw_treasure")
    cfg.task.ppo_input = "player"
    return make_task(cfg)


@pytest.fixture(scope="module")
def model(task, head):
    torch.manual_seed(0)
    return build_model(task, {**POLICY, "head": head})


@pytest.fixture(scope="module")
def episodes(task):
    """Observations along the expert's path through two test games, with the step's commands."""
    out = []
    for seed in (100, 101):
        ep = task.episode(seed)
        while not ep.done:
            out.append((np.asarray(ep.obs), len(ep.action_names)))
            ep.step(ep.expert_action())
    return out


def test_the_masked_policy_is_built_for_a_masking_task_and_kept_by_save_and_load(
    task, model, head, episodes, tmp_path
):
    want = CommandScoringPolicy if head == "commands" else MaskedDropoutPolicy
    assert type(model.policy) is want
    trained = build_model(task, {**POLICY, "head": head})
    before = [p.detach().clone() for p in trained.policy.action_net.parameters()]
    trained.learn(64)  # one rollout of 2 x 32 steps on real games, one epoch of updates
    after = list(trained.policy.action_net.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    model.save(tmp_path / "m.zip")
    loaded = type(model).load(tmp_path / "m.zip", device="cpu")
    assert type(loaded.policy) is want
    obs = np.stack([o for o, _ in episodes])
    for p in (model.policy, loaded.policy):
        p.set_training_mode(False)
    with torch.no_grad():
        a = model.policy.get_distribution(model.policy.obs_to_tensor(obs)[0]).distribution.logits
        b = loaded.policy.get_distribution(loaded.policy.obs_to_tensor(obs)[0]).distribution.logits
    torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="only policy.algorithm=ppo supports"):
        build_model(task, {**POLICY, "algorithm": "recurrent_ppo", "lstm_hidden_size": 8})


def test_ppo_never_samples_and_never_prefers_a_masked_command(model, episodes):
    obs = np.stack([o for o, _ in episodes])
    valid = np.array([n for _, n in episodes])
    for _ in range(20):
        sampled, _ = model.predict(obs, deterministic=False)
        assert (sampled < valid).all()
    greedy, _ = model.predict(obs, deterministic=True)
    assert (greedy < valid).all()
    # training's log-probabilities: a masked slot is (numerically) impossible
    obs_t, _ = model.policy.obs_to_tensor(obs)
    masked = torch.as_tensor(valid)  # the first masked slot of each step
    _, log_prob, _ = model.policy.evaluate_actions(obs_t, masked)
    assert (log_prob < MASKED_LOGIT / 2).all()


def test_the_gate_entropy_counts_only_the_admissible_commands(model, episodes):
    obs = np.stack([o for o, _ in episodes])
    valid = np.array([n for _, n in episodes])
    g = torch.Generator().manual_seed(0)
    unc = mc_dropout(model, obs, 16, generator=g)
    assert (unc.total <= np.log2(valid) + 1e-5).all()
    assert (unc.total[valid == 1] < 1e-6).all() if (valid == 1).any() else True
    k = model.action_space.n
    assert unc.total.max() < math.log2(k) - 0.5  # unmasked, 16 slots would be near 4 bits
    probs = unc.policy_probs
    for row, n in zip(probs, valid, strict=True):
        assert row[n:].sum() < 1e-6 and row[:n].sum() == pytest.approx(1.0, abs=1e-5)
    assert (unc.action < valid).all() and np.isfinite(unc.epistemic).all()
    ref = mc_dropout_sequential(model, obs, 16, generator=torch.Generator().manual_seed(0))
    np.testing.assert_allclose(unc.total, ref.total, atol=1e-5)
    np.testing.assert_array_equal(unc.action, ref.action)


def test_batched_mc_dropout_scores_each_observations_own_commands(model, head, episodes):
    """A sharp head (its last layer x 50: far from uniform, unlike an untrained one): the
    batched MC passes (B x N rows, obs-major) give the sequential passes' entropies, so each
    row is scored with its own observation's commands."""
    import copy

    sharp = copy.deepcopy(model)
    last = sharp.policy.action_net.query if head == "commands" else sharp.policy.action_net
    with torch.no_grad():
        last.weight.mul_(50.0)
    obs = np.stack([o for o, _ in episodes])
    unc = mc_dropout(sharp, obs, 8, generator=torch.Generator().manual_seed(1))
    ref = mc_dropout_sequential(sharp, obs, 8, generator=torch.Generator().manual_seed(1))
    assert unc.total.std() > 0.05  # the rows differ: a mixed-up layout would show
    np.testing.assert_allclose(unc.total, ref.total, atol=1e-4)
    np.testing.assert_allclose(unc.epistemic, ref.epistemic, atol=1e-4)
    np.testing.assert_array_equal(unc.action, ref.action)


def test_one_admissible_command_means_no_uncertainty(model, episodes):
    obs = episodes[0][0].copy()
    k = model.action_space.n
    obs[-k:] = 0.0
    obs[-k + 2] = 1.0  # only slot 2 is allowed
    unc = mc_dropout(model, obs[None], 16, generator=torch.Generator().manual_seed(0))
    assert unc.total[0] == pytest.approx(0.0, abs=1e-6) and unc.action[0] == 2


def test_normalised_entropy_is_over_log2_of_each_steps_admissible_commands(model, episodes, task):
    """gate.normalise on a text game: the ceiling is log2 of the step's admissible commands (2
    to 16 here), so one tau means the same in every room; a whole evaluation of two real games
    records every step's normalised entropy in [0, 1], the plain run's over log2(n)."""
    from benchmark.analysis import StepRecorder
    from benchmark.evaluate import Evaluator
    from benchmark.gates import EntropyGate

    obs = np.stack([o for o, _ in episodes])
    valid = np.array([n for _, n in episodes])
    unc = mc_dropout(model, obs, 16, generator=torch.Generator().manual_seed(0))
    np.testing.assert_array_equal(unc.n_allowed, valid)
    norm = unc.normalised()
    want = np.where(valid > 1, unc.total / np.log2(np.maximum(valid, 2)), 0.0)
    np.testing.assert_allclose(norm.total, want, rtol=1e-5, atol=1e-6)
    assert ((norm.total >= 0) & (norm.total <= 1)).all() and norm.total.max() > 0.5
    runs = {}
    for normalise in (False, True):
        recorder = StepRecorder()
        evaluator = Evaluator(task=task, gate=EntropyGate(0.9), policy=model, mc_samples=8)
        evaluator.normalise = normalise
        evaluator.run([100, 101], on_step=recorder)
        runs[normalise] = recorder.records
    plain, normed = runs[False], runs[True]
    assert len(plain) == len(normed) > 4
    for a, b in zip(plain, normed, strict=True):
        n = len(b["commands"])
        assert 0.0 <= b["total"] <= 1.0 and 0.0 <= b["epistemic"] <= 1.0
        assert b["total"] == pytest.approx(a["total"] / math.log2(n) if n > 1 else 0.0, abs=1e-6)


def test_the_command_scoring_head_gives_a_command_its_score_in_any_slot(
    task, model, head, episodes
):
    """Swap two admissible commands' slots (their words and nothing else): with the command head
    their logits swap with them, so a command means the same in every slot; the slot head scores
    slots, and the swap changes what it gives each command."""
    obs, n = next((o, n) for o, n in episodes if n >= 3)
    k, c = task.max_commands, task.command_dim
    swapped = obs.copy()
    blocks = swapped[-(k + k * c) : -k].reshape(k, c)
    blocks[[0, 2]] = blocks[[2, 0]]
    with torch.no_grad():
        pol = model.policy
        pol.set_training_mode(False)
        logits = [
            pol.get_distribution(pol.obs_to_tensor(x[None])[0]).distribution.logits[0]
            for x in (obs, swapped)
        ]
    moved = logits[1][[2, 1, 0, *range(3, k)]]
    if head == "commands":
        torch.testing.assert_close(moved[:n], logits[0][:n])
        assert c == PLAYER_COMMAND_DIM and obs.shape == (3 * TEXT_DIM + k * (c + 1),)
    else:
        assert not torch.allclose(moved[:n], logits[0][:n])


def test_the_player_input_holds_the_room_description_and_the_inventory(episodes, head, task):
    """ppo_input=player: the description block changes when the player changes room; the
    inventory block says what they carry (nothing, on a treasure hunt until the winning take)."""
    if head == "slots":
        with pytest.raises(ValueError, match="ppo_input='room': allowed"):
            from benchmark.envs.textworld import TextWorldTask

            TextWorldTask("x", "treasure", {"level": 5}, ppo_input="room")
        with pytest.raises(ValueError, match="policy.head='commands' scores each command"):
            build_model(make_task("fourrooms"), {**POLICY, "head": "commands"})
        with pytest.raises(ValueError, match="policy.head='words': allowed"):
            build_model(task, {**POLICY, "head": "words"})
        return
    rooms = [o[TEXT_DIM : 2 * TEXT_DIM] for o, _ in episodes]
    held = [o[2 * TEXT_DIM : 3 * TEXT_DIM] for o, _ in episodes]
    assert all(r.any() for r in rooms) and all(h.any() for h in held)
    assert len({r.tobytes() for r in rooms}) > 1
    nothing = hashed_words("nothing", TEXT_DIM)
    assert all((h >= nothing).all() for h in held)
