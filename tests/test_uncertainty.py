"""MC-dropout uncertainty: batched == N-pass reference, entropy identities, real dropout
semantics, validation. Real MiniGrid observations and a real SB3 PPO dropout policy."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch
from stable_baselines3 import PPO

from benchmark.envs import make_task
from benchmark.policy.network import DropoutActorCriticPolicy
from benchmark.uncertainty import Uncertainty, draw_masks, mc_dropout, mc_dropout_sequential


def _model(task, dropout=0.2, net_arch=(64, 64), seed=0) -> PPO:
    torch.manual_seed(seed)
    return PPO(
        DropoutActorCriticPolicy,
        task.validation_env(),
        policy_kwargs={"net_arch": list(net_arch), "dropout": dropout},
        device="cpu",
        n_steps=64,
        batch_size=64,
        seed=seed,
    )


def _obs(task, n: int) -> np.ndarray:
    """Real observations from random-action episodes on validation seeds."""
    rng = np.random.default_rng(0)
    out, seed = [], 0
    while len(out) < n:
        ep = task.episode(seed)
        seed += 1
        while not ep.done and len(out) < n:
            out.append(np.asarray(ep.obs))
            ep.step(int(rng.integers(len(task.action_names))))
    return np.stack(out)


@pytest.fixture(scope="module")
def task():
    return make_task("fourrooms")


@pytest.fixture(scope="module")
def model(task):
    m = _model(task)
    # SB3 initialises action_net with gain 0.01 (near-uniform actions); sharpen the logits so the
    # dropout passes disagree as much as a trained policy's do
    with torch.no_grad():
        m.policy.action_net.weight.mul_(300.0)
    return m


@pytest.fixture(scope="module")
def obs(task):
    return _obs(task, 100)


def test_batched_equals_sequential_with_same_generator(model, obs):
    a = mc_dropout(model, obs, 16, generator=torch.Generator().manual_seed(7))
    b = mc_dropout_sequential(model, obs, 16, generator=torch.Generator().manual_seed(7))
    np.testing.assert_array_equal(a.action, b.action)
    for field in ("total", "aleatoric", "epistemic", "policy_probs"):
        np.testing.assert_allclose(getattr(a, field), getattr(b, field), atol=1e-5, rtol=0)
    # the masks really matter: another generator state gives other numbers
    c = mc_dropout(model, obs, 16, generator=torch.Generator().manual_seed(8))
    assert not np.allclose(a.epistemic, c.epistemic, atol=1e-5)


def test_injected_masks_are_used(model, obs):
    masks = draw_masks(model, len(obs), 8, torch.Generator().manual_seed(1))
    a = mc_dropout(model, obs, 8, masks=masks)
    b = mc_dropout_sequential(model, obs, 8, masks=masks)
    np.testing.assert_allclose(a.total, b.total, atol=1e-5, rtol=0)
    ones = [torch.ones_like(m) for m in masks]  # dropout "on" with all-keep masks = dropout off
    c = mc_dropout(model, obs, 8, masks=ones)
    np.testing.assert_allclose(c.epistemic, 0.0, atol=1e-5)
    with pytest.raises(ValueError, match="masks must have shapes"):
        mc_dropout(model, obs, 4, masks=masks)


def test_entropy_identities(model, obs, task):
    u = mc_dropout(model, obs, 50, generator=torch.Generator().manual_seed(0))
    assert isinstance(u, Uncertainty)
    for arr in (u.action, u.total, u.aleatoric, u.epistemic):
        assert arr.shape == (len(obs),)
    np.testing.assert_allclose(u.total, u.aleatoric + u.epistemic, atol=1e-5)
    assert (u.epistemic >= 0).all() and (u.aleatoric >= 0).all()
    assert (u.total <= math.log2(len(task.action_names)) + 1e-5).all()
    assert u.epistemic.max() > 1e-3  # dropout 0.2 does disagree somewhere


def test_action_is_dropout_off_and_independent_of_sampling(model, obs):
    expected, _ = model.predict(obs, deterministic=True)
    for n, seed in ((1, 0), (7, 1), (50, 2)):
        u = mc_dropout(model, obs, n, generator=torch.Generator().manual_seed(seed))
        np.testing.assert_array_equal(u.action, expected)
        # the action probabilities are the dropout-off distribution's, whatever n and the masks
        want = model.policy.get_distribution(model.policy.obs_to_tensor(obs)[0]).distribution
        np.testing.assert_allclose(u.policy_probs, want.probs.detach().numpy(), atol=1e-6)
        np.testing.assert_array_equal(u.policy_probs.argmax(1), expected)
    assert not model.policy.training  # modes untouched


def test_single_sample_and_zero_dropout_have_no_epistemic(task, obs):
    m = _model(task, dropout=0.2)
    u1 = mc_dropout(m, obs, 1)
    np.testing.assert_allclose(u1.epistemic, 0.0, atol=1e-6)
    m0 = _model(task, dropout=0.0)
    u = mc_dropout(m0, obs, 10)
    np.testing.assert_allclose(u.epistemic, 0.0, atol=1e-6)
    with torch.no_grad():
        dist = m0.policy.get_distribution(m0.policy.obs_to_tensor(obs)[0])
        h = dist.entropy().numpy() / math.log(2)
    np.testing.assert_allclose(u.total, h, atol=1e-5)


def test_matches_real_nn_dropout_in_train_mode(model, obs):
    """Explicit masks must mean what nn.Dropout does: compare the MC mean distribution with one
    estimated from the real modules in train mode (torch's own RNG)."""
    x = obs[:20]
    n = 2000
    torch.manual_seed(0)
    pol = model.policy
    with torch.no_grad():
        feats = pol.extract_features(pol.obs_to_tensor(x)[0], pol.pi_features_extractor)
        pol.mlp_extractor.policy_net.train()
        try:
            rows = feats.repeat_interleave(n, 0)
            probs = torch.softmax(pol.action_net(pol.mlp_extractor.policy_net(rows)), -1)
        finally:
            pol.mlp_extractor.policy_net.eval()
        ref = torch.special.entr(probs.view(len(x), n, -1).mean(1)).sum(-1) / math.log(2)
    u = mc_dropout(model, x, n, generator=torch.Generator().manual_seed(1))
    np.testing.assert_allclose(u.total, ref.numpy(), atol=0.05)


def test_discrete_obs_task_works():
    task = make_task("higherlower")
    m = _model(task, net_arch=(32, 32))
    u = mc_dropout(m, _obs(task, 30), 8)
    assert u.action.shape == (30,) and set(u.action) <= {0, 1}
    assert (u.total <= 1.0 + 1e-6).all()


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "10"])
def test_n_samples_validated(model, obs, bad):
    with pytest.raises(ValueError, match="n_samples"):
        mc_dropout(model, obs, bad)
    with pytest.raises(ValueError, match="n_samples"):
        mc_dropout_sequential(model, obs, bad)


def test_policy_without_dropout_is_refused(task, obs):
    plain = PPO("MlpPolicy", task.validation_env(), n_steps=64, batch_size=64, device="cpu")
    with pytest.raises(ValueError, match="no nn.Dropout"):
        mc_dropout(plain, obs, 4)


@pytest.mark.slow
def test_batched_is_faster_than_sequential(task, obs):
    """B=100, N=50 with the FourRooms network (256, 256)."""
    m = _model(task, net_arch=(256, 256))
    torch.set_num_threads(1)

    def per_call(fn, reps):
        fn(m, obs, 50)
        t = time.perf_counter()
        for _ in range(reps):
            fn(m, obs, 50)
        return (time.perf_counter() - t) / reps

    batched, sequential = per_call(mc_dropout, 30), per_call(mc_dropout_sequential, 10)
    print(f"B=100 N=50: batched {batched * 1e6:.0f} us, sequential {sequential * 1e6:.0f} us")
    assert batched < sequential


def test_normalised_entropy_is_over_log2_of_the_fixed_action_space(model, obs, task):
    """gate.normalise on a grid: every action counts, so the ceiling is log2(|A|) in every state
    and the normalised entropies are the entropies over it, in [0, 1]."""
    unc = mc_dropout(model, obs, 16, generator=torch.Generator().manual_seed(0))
    k = len(task.action_names)
    assert (unc.n_allowed == k).all()
    norm = unc.normalised()
    for bits, scaled in zip(unc.entropies(), norm.entropies(), strict=True):
        np.testing.assert_allclose(scaled, bits / math.log2(k), rtol=1e-5, atol=1e-7)
        assert ((scaled >= 0) & (scaled <= 1)).all()
    assert norm.total.max() > 0.3  # the sharpened policy's passes disagree: not all near 0
    np.testing.assert_array_equal(norm.action, unc.action)
    with pytest.raises(ValueError, match="normalised\\(\\) needs n_allowed"):
        Uncertainty(unc.action, unc.total, unc.aleatoric, unc.epistemic).normalised()


def test_the_evaluator_gates_on_the_normalised_entropy_of_every_grid_step(model, task):
    """A whole evaluation with gate.normalise: every step's recorded entropy lies in [0, 1] and
    is the plain run's (same dropout masks) over log2(|A|)."""
    from benchmark.analysis import StepRecorder
    from benchmark.evaluate import Evaluator
    from benchmark.gates import EntropyGate

    runs = {}
    for normalise in (False, True):
        recorder = StepRecorder()
        evaluator = Evaluator(task=task, gate=EntropyGate(0.5), policy=model, mc_samples=8)
        evaluator.normalise = normalise
        evaluator.run([0], on_step=recorder)
        runs[normalise] = np.array([r["total"] for r in recorder.records])
    plain, norm = runs[False], runs[True]
    assert len(norm) == len(plain) > 10 and ((norm >= 0) & (norm <= 1)).all()
    np.testing.assert_allclose(norm, plain / math.log2(len(task.action_names)), atol=1e-6)
