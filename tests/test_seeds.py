"""Seed splits: validation and test are disjoint, and no training reset ever uses an evaluation
seed. The training envs are checked at the simulator: the seed gymnasium actually reset with."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from benchmark.envs import available_envs, make_task
from benchmark.seeds import (
    DEFAULT_SPLITS,
    TRAIN_SEED_MIN,
    Splits,
    training_seeds,
    validation_schedule,
)

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


def test_fixed_validation_plays_the_first_validation_seeds_every_time() -> None:
    """policy.eval_seeds=fixed (every recipe but official): today's validation, seeds
    0..n-1 at every evaluation, whatever the training seed."""
    for k in (0, 1, 2, 7):
        assert validation_schedule("fixed", k, 20, seed=k, splits=DEFAULT_SPLITS) == list(range(20))


def test_cycled_validation_walks_the_split_skipping_one_seed_per_evaluation() -> None:
    """policy.eval_seeds=cycle (the released DoorKey eval env, SeededDoorKeyEnv(seeds=VAL_SEEDS)):
    each evaluation plays 50 maps and its last reset consumes one more, so evaluation k plays
    51k .. 51k+49 mod 100."""

    def cycle(k: int, n: int = 50, splits: Splits = DEFAULT_SPLITS) -> list[int]:
        return validation_schedule("cycle", k, n, seed=0, splits=splits)

    assert cycle(0) == list(range(0, 50))
    assert cycle(1) == [*range(51, 100), 0]
    assert cycle(2) == list(range(2, 52))
    assert cycle(3) == [*range(53, 100), 0, 1, 2]
    assert all(cycle(k) == [(51 * k + j) % 100 for j in range(50)] for k in range(40))
    assert cycle(1, n=100) == [*range(1, 100), 0]  # the whole split: every seed once
    custom = Splits.from_config({"validation": [10, 20], "test": [20, 30]})
    assert cycle(1, n=4, splits=custom) == [15, 16, 17, 18]  # the split's own seeds
    with pytest.raises(ValueError, match="n_episodes=101 is out of range"):
        cycle(0, n=101)


def test_fresh_validation_draws_new_training_seeds_from_the_training_seed() -> None:
    """policy.eval_seeds=fresh (the released FourRooms and HigherLower eval envs are unseeded):
    distinct seeds >= TRAIN_SEED_MIN (never a validation or test seed), new at every
    evaluation, the same for the same training seed and evaluation, and not the training
    stream's own seeds."""

    def fresh(k: int, seed: int = 0) -> list[int]:
        return validation_schedule("fresh", k, 50, seed=seed, splits=DEFAULT_SPLITS)

    runs = [fresh(k) for k in range(20)]
    for seeds in runs:
        assert len(set(seeds)) == 50 and min(seeds) >= TRAIN_SEED_MIN
        assert not EVAL_SEEDS & set(seeds)
    assert all(set(a).isdisjoint(b) for a, b in zip(runs, runs[1:], strict=False))
    assert runs == [fresh(k) for k in range(20)]  # reproducible
    assert fresh(0, seed=1) != runs[0]
    stream = training_seeds(0)  # training slot 0 of training seed 0
    assert not {next(stream) for _ in range(1000)} & {s for seeds in runs for s in seeds}


def test_bad_validation_schedule_names_the_allowed_ones() -> None:
    with pytest.raises(
        ValueError,
        match=r"policy.eval_seeds='random' is invalid: allowed \['fixed', 'cycle', 'fresh'\]",
    ):
        validation_schedule("random", 0, 5, seed=0, splits=DEFAULT_SPLITS)


def test_validation_env_resets_with_the_given_seed() -> None:
    for name in available_envs():
        env = make_task(name).validation_env()
        # 101: a seed whose TextWorld games the other tests play too (a game takes seconds)
        obs1, _ = env.reset(seed=101)
        assert env.unwrapped.np_random_seed == 101
        obs2, _ = make_task(name).validation_env().reset(seed=101)
        np.testing.assert_array_equal(obs1, obs2)
