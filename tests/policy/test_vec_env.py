"""policy.env_workers: PPO's training envs stepped in worker processes give exactly the training
of one process (same observations, rewards and weights), pickle for resuming, and refuse bad
settings."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.utils import set_random_seed

from benchmark.envs import make_task
from benchmark.policy.train import as_dict, build_model, training_vec_env
from benchmark.policy.vec_env import ShardedVecEnv, resolve_workers
from tests.conftest import SMALL_POLICY, compose_cfg


def _trained_weights(root, workers: int) -> tuple[dict, int]:
    cfg = compose_cfg(
        root, "env=empty5x5_random", *SMALL_POLICY, "policy.n_envs=4", "++policy.ppo.n_steps=64"
    )
    task = make_task(cfg.env)
    policy_cfg = as_dict(cfg.policy) | {"env_workers": workers}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a training runs (policy.torch_threads)
    try:
        set_random_seed(0)
        model = build_model(task, policy_cfg)
        assert isinstance(model.get_env(), ShardedVecEnv) == (workers > 1)
        model.learn(total_timesteps=1024)
        model.get_env().close()
    finally:
        torch.set_num_threads(threads)
    return {k: v.clone() for k, v in model.policy.state_dict().items()}, model.num_timesteps


def test_two_env_workers_train_the_weights_of_one(tmp_path):
    one, steps_one = _trained_weights(tmp_path, 1)
    two, steps_two = _trained_weights(tmp_path, 2)
    assert steps_one == steps_two == 1024
    assert one.keys() == two.keys()
    assert all(torch.equal(one[k], two[k]) for k in one), "weights differ"


def test_sharded_envs_step_as_one_process_and_survive_pickling(tmp_path):
    cfg = compose_cfg(tmp_path, "env=empty5x5_random")
    task = make_task(cfg.env)
    one, three = training_vec_env(task, 0, 5, 1), training_vec_env(task, 0, 5, 3)
    assert isinstance(three, ShardedVecEnv) and three.sizes == [2, 2, 1]
    rng = np.random.default_rng(0)
    try:
        assert np.array_equal(one.reset(), three.reset())
        for step in range(60):  # episodes end and reset inside the workers
            if step == 30:  # a resumable training's state: the envs mid-episode
                restored = pickle.loads(pickle.dumps(three))
                three.close()
                three = restored
            actions = rng.integers(0, one.action_space.n, size=5)
            a, b = one.step(actions), three.step(actions)
            for x, y in zip(a[:3], b[:3], strict=True):
                assert np.array_equal(x, y)
            assert [i.keys() for i in a[3]] == [i.keys() for i in b[3]]
        assert three.get_attr("spec", [4])[0].id == one.get_attr("spec", [4])[0].id
        for wrapper in (gym.wrappers.TimeLimit, gym.wrappers.RecordVideo):
            assert three.env_is_wrapped(wrapper) == one.env_is_wrapped(wrapper)
    finally:
        one.close()
        three.close()


def test_env_workers_setting_is_checked():
    assert resolve_workers(3, n_envs=2) == 2  # never more workers than envs
    assert 1 <= resolve_workers("auto", n_envs=8) <= 8
    for bad in (0, -1, "two", 1.5, True):
        with pytest.raises(ValueError, match="policy.env_workers"):
            resolve_workers(bad, n_envs=4)
