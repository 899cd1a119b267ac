"""ASK in text games: PPO with MC dropout over the TextWorld task's fixed, masked command space.
The mask (the observation's last slots) enters PPO's sampling, its greedy action and the gate's
MC-dropout entropy, so only admissible commands count. Real games, real SB3 PPO."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from benchmark.envs import make_task
from benchmark.policy.network import MASKED_LOGIT, MaskedDropoutPolicy
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


@pytest.fixture(scope="module")
def task():
    task = make_task("tw_treasure")  # its games: the run's cache (tests/conftest.py)
    task.train_games = 2  # the training pool: two games
    return task


@pytest.fixture(scope="module")
def model(task):
    torch.manual_seed(0)
    return build_model(task, POLICY)


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
    task, model, tmp_path
):
    assert isinstance(model.policy, MaskedDropoutPolicy)
    model.save(tmp_path / "m.zip")
    loaded = type(model).load(tmp_path / "m.zip", device="cpu")
    assert isinstance(loaded.policy, MaskedDropoutPolicy)
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
