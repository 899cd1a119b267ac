"""Seed splits, enforced in one place so that tuning never sees a test seed and training never
sees an evaluation layout."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

SPLITS: dict[str, range] = {
    "validation": range(0, 100),
    "test": range(100, 200),
}
TRAIN_SEED_MIN = 200  # every training reset seed is >= this


def configure_splits(splits: dict[str, list[int]] | None) -> None:
    """Use the job's `splits` config ({name: [start, stop)}) after checking it: disjoint, below
    the training seeds, and with both validation and test present."""
    if not splits:
        return
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
    missing = {"validation", "test"} - set(ranges)
    if missing:
        raise ValueError(
            f"splits is missing {sorted(missing)}: both validation and test are required"
        )
    check_disjoint(ranges)
    SPLITS.clear()
    SPLITS.update(ranges)


def evaluation_seeds(split: str, n_episodes: int) -> list[int]:
    """The first `n_episodes` seeds of a fixed evaluation split."""
    if split not in SPLITS:
        raise ValueError(f"eval split {split!r} is not one of {sorted(SPLITS)}")
    seeds = SPLITS[split]
    if not 1 <= n_episodes <= len(seeds):
        raise ValueError(
            f"n_episodes={n_episodes} is out of range for split {split!r}: allowed 1..{len(seeds)}"
        )
    return list(seeds[:n_episodes])


def training_seeds(seed: int) -> Iterator[int]:
    """An endless stream of training reset seeds, all >= TRAIN_SEED_MIN, reproducible from `seed`."""
    rng = np.random.default_rng(seed)
    while True:
        yield int(TRAIN_SEED_MIN + rng.integers(0, 2**31 - 1 - TRAIN_SEED_MIN))


def check_disjoint(splits: dict[str, range] = SPLITS) -> None:
    """Fail when two splits share a seed or an evaluation seed could be a training seed."""
    names = sorted(splits)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            overlap = set(splits[a]) & set(splits[b])
            if overlap:
                raise ValueError(
                    f"seed splits {a!r} and {b!r} overlap on {sorted(overlap)[:5]}...: "
                    "validation and test seeds must be disjoint"
                )
        if max(splits[a]) >= TRAIN_SEED_MIN:
            raise ValueError(
                f"split {a!r} reaches seed {max(splits[a])}, but seeds >= {TRAIN_SEED_MIN} are for training"
            )
