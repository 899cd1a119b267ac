"""Gymnasium wrappers shared by every environment family: the action subset the policy picks
from, and the training-seed discipline (no evaluation layout is ever trained on)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from benchmark.seeds import TRAIN_SEED_MIN, training_seeds


class ActionSubset(gym.ActionWrapper, gym.utils.RecordConstructorArgs):
    """The policy's Discrete(n) index i means `names[i]`, which is the base env's action
    `index_of[names[i]]`; lets a config pick e.g. 3 of MiniGrid's 7 actions."""

    def __init__(self, env: gym.Env, names: Sequence[str], index_of: dict[str, int]):
        gym.utils.RecordConstructorArgs.__init__(self, names=tuple(names), index_of=dict(index_of))
        gym.ActionWrapper.__init__(self, env)
        bad = [n for n in names if n not in index_of]
        if bad or not names:
            raise ValueError(f"unknown action names {bad or names!r}; allowed: {list(index_of)}")
        if len(set(names)) != len(names):
            raise ValueError(f"action names repeat: {list(names)}")
        self.names = tuple(names)
        self.base_actions = np.array([index_of[n] for n in names], dtype=np.int64)
        self.action_space = gym.spaces.Discrete(len(names))

    def action(self, action: Any) -> int:
        i = int(action)
        if not 0 <= i < len(self.names):
            raise ValueError(f"action index {i} out of range: allowed 0..{len(self.names) - 1}")
        return int(self.base_actions[i])


class SeedStream:
    """`benchmark.seeds.training_seeds(seed)` that survives pickling (SB3 subprocess envs,
    deepcopy): it remembers how many seeds it has drawn and replays the stream on unpickle."""

    def __init__(self, seed: int):
        self.seed = int(seed)
        self.drawn = 0
        self._it: Iterator[int] | None = None

    def __next__(self) -> int:
        if self._it is None:
            self._it = training_seeds(self.seed)
            for _ in range(self.drawn):
                next(self._it)
        self.drawn += 1
        return next(self._it)

    def __iter__(self) -> SeedStream:
        return self

    def __getstate__(self) -> dict[str, int]:
        return {"seed": self.seed, "drawn": self.drawn}

    def __setstate__(self, state: dict[str, int]) -> None:
        self.seed, self.drawn, self._it = state["seed"], state["drawn"], None


class PoolStream:
    """The seeds lo, lo+1, ..., hi-1 in order, cycled (policy.train_seed_pool: the released DoorKey
    trainer's fixed 800 maps, seeds 200-999); picklable like SeedStream."""

    def __init__(self, pool: Sequence[int]):
        lo, hi = (int(v) for v in pool)
        if not TRAIN_SEED_MIN <= lo < hi:
            raise ValueError(
                f"policy.train_seed_pool={[lo, hi]} is invalid: allowed [lo, hi) with "
                f"{TRAIN_SEED_MIN} <= lo < hi (training seeds only), or null"
            )
        self.lo, self.hi, self.drawn = lo, hi, 0

    def __next__(self) -> int:
        seed = self.lo + self.drawn % (self.hi - self.lo)
        self.drawn += 1
        return seed

    def __iter__(self) -> PoolStream:
        return self


class TrainingSeeds(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Every reset uses the next seed of the training stream (all >= TRAIN_SEED_MIN): a random
    stream from `seed`, or with `pool` [lo, hi) the seeds lo..hi-1 in order, cycled. A seed
    passed to reset (SB3 does this once) restarts the stream (from that seed; a pool from lo);
    it is never used as a layout itself. The seed actually used is in `last_seed` and
    `info['reset_seed']`."""

    def __init__(self, env: gym.Env, seed: int, pool: Sequence[int] | None = None):
        gym.utils.RecordConstructorArgs.__init__(self, seed=seed, pool=pool)
        gym.Wrapper.__init__(self, env)
        self.pool = None if pool is None else [int(v) for v in pool]
        self.stream = self._stream(seed)
        self.last_seed: int | None = None

    def _stream(self, seed: int) -> Iterator[int]:
        return SeedStream(seed) if self.pool is None else PoolStream(self.pool)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self.stream = self._stream(seed)
        self.last_seed = next(self.stream)
        obs, info = self.env.reset(seed=self.last_seed, options=options)
        return obs, {**info, "reset_seed": self.last_seed}
