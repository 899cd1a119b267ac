"""Seed splits: validation and test are disjoint, and no training reset ever uses an evaluation
seed. The training envs are checked at the simulator: the seed gymnasium actually reset with."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from benchmark.envs import available_envs, make_task
from benchmark.seeds import DEFAULT_SPLITS, TRAIN_SEED_MIN, Splits

EVAL_SEEDS = set(range(0, 200))


def test_splits_are_fixed_and_disjoint() -> None:
    assert DEFAULT_SPLITS == Splits.from_config(None)
    assert DEFAULT_SPLITS.seeds("validation", 100) == list(range(0, 100))
    assert DEFAULT_SPLITS.seeds("test", 100) == list(range(100, 200))
    assert not set(DEFAULT_SPLITS.ranges["validation"]) & set(DEFAULT_SPLITS.ranges["test"])
    with pytest.raises(ValueError, match="not one of"):
        DEFAULT_SPLITS.seeds("train", 5)
    with pytest.raises(ValueError, match="overlap"):
        Splits({"validation": range(0, 10), "test": range(5, 15)})
    with pytest.raises(ValueError, match="for training"):
        Splits({"validation": range(0, 10), "test": range(150, 250)})
    with pytest.raises(ValueError, match="missing"):
        Splits.from_config({"test": [100, 200]})
    custom = Splits.from_config({"validation": [0, 50], "test": [50, 60]})
    assert custom.seeds("test", 10) == list(range(50, 60))
    assert custom.bounds("validation") == [0, 50]


@pytest.mark.parametrize("name", ["fourrooms", "higherlower"])
def test_training_resets_never_use_an_evaluation_seed(name: str) -> None:
    """Reset many times, with and without a seed passed in (SB3 passes one), and read the seed
    the simulator was actually reset with from gymnasium itself."""
    env = make_task(name).training_env(seed=0)
    used = []
    for i in range(400):
        # pass evaluation seeds on purpose: they must restart the stream, never be used
        _, info = env.reset(seed=i if i % 50 == 0 else None)
        actual = env.unwrapped.np_random_seed
        assert info["reset_seed"] == actual == env.last_seed
        used.append(actual)
    assert min(used) >= TRAIN_SEED_MIN
    assert not EVAL_SEEDS & set(used)
    assert len(set(used)) > 390  # a stream of fresh layouts, not one seed repeated


def test_training_stream_is_reproducible_and_survives_pickling() -> None:
    task = make_task("fourrooms")
    a, b = task.training_env(seed=7), task.training_env(seed=7)
    seeds_a = [a.reset()[1]["reset_seed"] for _ in range(5)]
    assert seeds_a == [b.reset()[1]["reset_seed"] for _ in range(5)]
    clone = pickle.loads(pickle.dumps(a))  # SB3 subprocess envs and deepcopy do this
    assert clone.reset()[1]["reset_seed"] == a.reset()[1]["reset_seed"]
    other = task.training_env(seed=8)
    assert [other.reset()[1]["reset_seed"] for _ in range(5)] != seeds_a


def test_validation_env_resets_with_the_given_seed() -> None:
    for name in available_envs():
        env = make_task(name).validation_env()
        # 101: a seed whose TextWorld games the other tests play too (a game takes seconds)
        obs1, _ = env.reset(seed=101)
        assert env.unwrapped.np_random_seed == 101
        obs2, _ = make_task(name).validation_env().reset(seed=101)
        np.testing.assert_array_equal(obs1, obs2)
