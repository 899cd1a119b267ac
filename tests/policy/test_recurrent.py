"""The recurrent policy (`policy=ppo_lstm`, sb3-contrib RecurrentPPO with an MC-dropout head):
trained, saved and reloaded for real; its MC dropout reads the step's LSTM state (shared by the
N samples), the evaluator carries each episode's state, and lockstep equals sequential."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sb3_contrib import RecurrentPPO

from benchmark.build import build
from benchmark.evaluate import policy_step
from benchmark.policy import ensure, load
from benchmark.policy.network import actor_input, initial_state, is_recurrent
from benchmark.uncertainty import draw_masks, mc_dropout, mc_dropout_sequential
from tests.conftest import compose_cfg

LSTM = [
    "env=higherlower",
    "policy=ppo_lstm",
    "policy.total_timesteps=1024",  # one rollout of 8 envs x 128 steps: no test needs more
    "policy.eval_freq=1024",
    "policy.eval_episodes=5",
    "policy.progress_bar=false",
    "policy.lstm_hidden_size=32",
]


@pytest.fixture(scope="module")
def lstm_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("lstm")
    ensure(compose_cfg(root, *LSTM))
    return root


@pytest.fixture(scope="module")
def policy(lstm_root):
    cfg = compose_cfg(lstm_root, *LSTM)
    from benchmark.build import policy_checkpoint, prepare

    task, splits, _ = prepare(cfg)
    model = load(policy_checkpoint(cfg, task, splits), task=task)
    assert isinstance(model, RecurrentPPO)
    pol = model.policy
    with torch.no_grad():  # sharpen the near-uniform initial logits so dropout samples disagree
        pol.action_net.weight.mul_(10.0)
    return pol


def _episode_obs(lstm_root, seed: int, steps: int) -> np.ndarray:
    task = build(compose_cfg(lstm_root, *LSTM, "method=ppo")).task
    ep, out = task.episode(seed), []
    for _ in range(steps):
        out.append(np.asarray(ep.obs))
        ep.step(0)
    return np.stack(out)


def test_checkpoint_is_recurrent_with_dropout_in_the_head_only(policy):
    assert is_recurrent(policy)
    assert policy.lstm_actor.hidden_size == 32
    assert not any(isinstance(m, torch.nn.Dropout) for m in policy.lstm_actor.modules())
    assert any(isinstance(m, torch.nn.Dropout) for m in policy.mlp_extractor.policy_net)


def test_batched_equals_reference_from_a_mid_episode_state(policy, lstm_root):
    obs = _episode_obs(lstm_root, 100, 6)
    state = None
    for o in obs[:5]:  # advance one episode's LSTM five steps
        _, state = actor_input(policy, o[None], state)
    masks = draw_masks(policy, 1, 20, torch.Generator().manual_seed(3))
    fast = mc_dropout(policy, obs[5:], 20, masks=masks, state=state)
    ref = mc_dropout_sequential(policy, obs[5:], 20, masks=masks, state=state)
    np.testing.assert_allclose(fast.total, ref.total, atol=1e-5)
    np.testing.assert_allclose(fast.epistemic, ref.epistemic, atol=1e-5)
    assert fast.action.tolist() == ref.action.tolist()
    # the N samples share the step's state: the next state does not depend on the masks
    other = mc_dropout(policy, obs[5:], 20, torch.Generator().manual_seed(9), state=state)
    for a, b in zip(fast.state, other.state, strict=True):
        assert torch.equal(a, b)
    assert not np.allclose(fast.total, other.total)  # ...while the samples differ


def test_the_state_is_used(policy, lstm_root):
    obs = _episode_obs(lstm_root, 101, 8)
    masks = draw_masks(policy, 1, 20, torch.Generator().manual_seed(0))
    fresh = mc_dropout(policy, obs[7:], 20, masks=masks)
    state = None
    for o in obs[:7]:
        _, state = actor_input(policy, o[None], state)
    carried = mc_dropout(policy, obs[7:], 20, masks=masks, state=state)
    assert not np.allclose(fresh.total, carried.total)
    zeros = initial_state(policy, 1)
    explicit = mc_dropout(policy, obs[7:], 20, masks=masks, state=zeros)
    np.testing.assert_array_equal(fresh.total, explicit.total)


def test_greedy_steps_match_sb3_predict_over_an_episode(policy, lstm_root):
    obs = _episode_obs(lstm_root, 102, 20)
    ours, sb3 = None, None
    for o in obs:
        a, ours = policy_step(policy, o[None], ours)
        b, sb3 = policy.predict(o[None], state=sb3, deterministic=True)
        assert a.tolist() == np.asarray(b).reshape(1).tolist()


@pytest.mark.parametrize("method", ["ask", "ppo"])
def test_lockstep_equals_sequential(lstm_root, method):
    over = [*LSTM, f"method={method}", "slm=oracle", "eval.n_episodes=6"]
    if method == "ask":
        over.append(
            "gate.mc_samples=8"
        )  # a tau that splits the steps: the median entropy along one episode
        pol = build(compose_cfg(lstm_root, *over, "gate.tau=0.5")).policy
        state, totals = None, []
        for o in _episode_obs(lstm_root, 100, 51):
            unc = mc_dropout(pol, o[None], 8, torch.Generator().manual_seed(0), state=state)
            state = unc.state
            totals.append(float(unc.total[0]))
        over.append(f"gate.tau={np.median(totals)}")
    rows = {}
    for mode in ("lockstep", "sequential"):
        ev = build(compose_cfg(lstm_root, *over))
        rows[mode] = ev.evaluator().run(ev.test_seeds(), mode=mode)
    strip = lambda rs: [{k: v for k, v in r.items() if k != "wall_seconds"} for r in rs]  # noqa: E731
    assert strip(rows["lockstep"]) == strip(rows["sequential"])
    if method == "ask":
        assert 0 < sum(r["queries"] for r in rows["lockstep"]) < 6 * 51


def test_bad_lstm_settings_are_refused(lstm_root):
    from benchmark.validate import validate

    with pytest.raises(ValueError, match="policy.lstm_hidden_size=0"):
        validate(compose_cfg(lstm_root, *LSTM, "policy.lstm_hidden_size=0"))
    with pytest.raises(ValueError, match="policy.algorithm='a2c'"):
        validate(compose_cfg(lstm_root, *LSTM, "policy.algorithm=a2c"))
