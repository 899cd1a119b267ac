"""Seed splits, passed explicitly (never a global) so that tuning never sees a test seed, training
never sees an evaluation layout, and every hash that depends on a split includes it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

TRAIN_SEED_MIN = 200  # every training reset seed is >= this
TUNING_SPLIT = "validation"  # fixed: tuning can never evaluate a test seed
# policy.eval_seeds: which seeds PPO's periodic validation plays (validation_schedule)
EVAL_SEED_SCHEDULES = ("fixed", "cycle", "fresh")
# the spawn key of the fresh validation streams: never one of the training streams (no spawn key)
FRESH_VALIDATION_KEY = 1


@dataclass(frozen=True)
class Splits:
    """Named, disjoint, half-open seed ranges below TRAIN_SEED_MIN; validation and test required."""

    ranges: dict[str, range] = field(
        default_factory=lambda: {"validation": range(0, 100), "test": range(100, 200)}
    )

    def __post_init__(self) -> None:
        missing = {"validation", "test"} - set(self.ranges)
        if missing:
            raise ValueError(
                f"splits is missing {sorted(missing)}: both validation and test are required"
            )
        names = sorted(self.ranges)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                overlap = set(self.ranges[a]) & set(self.ranges[b])
                if overlap:
                    raise ValueError(
                        f"seed splits {a!r} and {b!r} overlap on {sorted(overlap)[:5]}...: "
                        "validation and test seeds must be disjoint"
                    )
            if max(self.ranges[a]) >= TRAIN_SEED_MIN:
                raise ValueError(
                    f"split {a!r} reaches seed {max(self.ranges[a])}, but seeds >= "
                    f"{TRAIN_SEED_MIN} are for training"
                )

    @classmethod
    def from_config(cls, splits: Mapping | None) -> Splits:
        """From the job's `splits` config ({name: [start, stop)}); None gives the papers' splits."""
        if not splits:
            return cls()
        ranges = {}
        for name, bounds in dict(splits).items():
            try:
                start, stop = (int(b) for b in bounds)
            except (TypeError, ValueError):
                raise ValueError(
                    f"splits.{name}={bounds!r} is invalid: allowed [start, stop)"
                ) from None
            if not 0 <= start < stop:
                raise ValueError(
                    f"splits.{name}=[{start}, {stop}) is invalid: allowed 0 <= start < stop"
                )
            ranges[name] = range(start, stop)
        return cls(ranges)

    def names(self) -> list[str]:
        return sorted(self.ranges)

    def size(self, split: str) -> int:
        return len(self.ranges.get(split, ()))

    def seeds(self, split: str, n_episodes: int) -> list[int]:
        """The first `n_episodes` seeds of a fixed evaluation split."""
        if split not in self.ranges:
            raise ValueError(f"eval split {split!r} is not one of {self.names()}")
        seeds = self.ranges[split]
        if not 1 <= n_episodes <= len(seeds):
            raise ValueError(
                f"n_episodes={n_episodes} is out of range for split {split!r}: "
                f"allowed 1..{len(seeds)}"
            )
        return list(seeds[:n_episodes])

    def bounds(self, split: str) -> list[int]:
        """[start, stop) of a split: what enters a hash."""
        r = self.ranges[split]
        return [r.start, r.stop]


DEFAULT_SPLITS = Splits()


def training_seeds(seed: int | np.random.SeedSequence) -> Iterator[int]:
    """An endless stream of training reset seeds, all >= TRAIN_SEED_MIN, reproducible from `seed`."""
    rng = np.random.default_rng(seed)
    while True:
        yield int(TRAIN_SEED_MIN + rng.integers(0, 2**31 - 1 - TRAIN_SEED_MIN))


def validation_schedule(
    schedule: str, evaluation: int, n_episodes: int, seed: int, splits: Splits
) -> list[int]:
    """The seeds PPO's periodic validation number `evaluation` (0, 1, ...) plays, by
    `policy.eval_seeds`:
    - fixed: the validation split's first `n_episodes`, every time;
    - cycle: the validation split walked in order and wrapped, each evaluation taking
      `n_episodes` and skipping one (the released DoorKey eval env, `SeededDoorKeyEnv(seeds=
      VAL_SEEDS)`, consumes a map in the reset after its last episode): with 100 validation
      seeds and 50 episodes, evaluation k plays 51k .. 51k+49 mod 100;
    - fresh: `n_episodes` distinct random seeds >= TRAIN_SEED_MIN (never an evaluation seed),
      new at every evaluation and reproducible from the training `seed` (the released FourRooms
      and HigherLower eval envs are unseeded: new maps and decks each time)."""
    if schedule == "fixed":
        return splits.seeds("validation", n_episodes)
    if schedule == "cycle":
        split = splits.ranges["validation"]
        splits.seeds("validation", n_episodes)  # checks n_episodes against the split
        start = evaluation * (n_episodes + 1)
        return [split[(start + j) % len(split)] for j in range(n_episodes)]
    check_eval_seeds(schedule)
    key = np.random.SeedSequence(int(seed), spawn_key=(FRESH_VALIDATION_KEY, int(evaluation)))
    return first_distinct(training_seeds(key), n_episodes)  # every split lies below TRAIN_SEED_MIN


def check_eval_seeds(schedule: str) -> None:
    """Raise naming `policy.eval_seeds` when it is not one of EVAL_SEED_SCHEDULES."""
    if schedule not in EVAL_SEED_SCHEDULES:
        raise ValueError(
            f"policy.eval_seeds={schedule!r} is invalid: allowed {list(EVAL_SEED_SCHEDULES)}"
        )


def first_distinct(stream: Iterator[int], n: int) -> list[int]:
    """The first `n` distinct values of `stream`, in order."""
    out: list[int] = []
    for s in stream:
        if len(out) == n:
            break
        if s not in out:
            out.append(s)
    return out


def dataset_seeds(n_episodes: int, seed: int, splits: Splits) -> list[int]:
    """The first `n_episodes` distinct training seeds of the stream `training_seeds(seed)`; every
    one is checked against the evaluation splits."""
    out = first_distinct(training_seeds(seed), n_episodes)
    check_training_seeds(out, splits)
    return out


def check_training_seeds(seeds: Iterable[int], splits: Splits) -> None:
    """Raise when a seed is below TRAIN_SEED_MIN or in a split (validation, test, any other)."""
    for s in seeds:
        inside = [name for name in splits.names() if s in splits.ranges[name]]
        if s < TRAIN_SEED_MIN or inside:
            where = f"the {inside[0]} split" if inside else f"below {TRAIN_SEED_MIN}"
            raise ValueError(
                f"seed {s} is in {where}: data for training (fine-tuning, Agent-BRACE, the learned gate) comes from training seeds only "
                f"(>= {TRAIN_SEED_MIN}, benchmark.seeds.training_seeds)"
            )
