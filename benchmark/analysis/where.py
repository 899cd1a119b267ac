"""Where queries land: per-step records aggregated by the agent's grid position (navigation) or
by card rank and decision index (HigherLower), and the wall layout of the test episodes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Tally:
    """Counts per bin: steps, queried steps, judged steps (PPO acted and the expert has an
    answer) and PPO-wrong steps among them. Rates are NaN where a bin has no steps."""

    steps: np.ndarray
    queried: np.ndarray
    judged: np.ndarray
    wrong: np.ndarray

    @property
    def query_rate(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.steps > 0, self.queried / self.steps, np.nan)

    @property
    def error_rate(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.judged > 0, self.wrong / self.judged, np.nan)


def tally(records: Iterable[dict[str, Any]], key, shape: tuple[int, ...]) -> Tally:
    """Counts of the records into bins `key(record)` (an index into arrays of `shape`; None
    skips the record)."""
    t = Tally(*(np.zeros(shape, dtype=np.int64) for _ in range(4)))
    for r in records:
        k = key(r)
        if k is None:
            continue
        t.steps[k] += 1
        t.queried[k] += bool(r["queried"])
        if r.get("ppo_optimal") is not None:
            t.judged[k] += 1
            t.wrong[k] += not r["ppo_optimal"]
    return t


def by_position(records: Sequence[dict[str, Any]], width: int, height: int) -> Tally:
    """Tallies indexed [y, x] (rows = grid rows, as an image)."""
    return tally(
        records, lambda r: (r["pos"][1], r["pos"][0]) if "pos" in r else None, (height, width)
    )


def by_rank(records: Sequence[dict[str, Any]], n_ranks: int = 13) -> Tally:
    return tally(records, lambda r: r.get("rank"), (n_ranks,))


def by_decision(records: Sequence[dict[str, Any]], n_decisions: int) -> Tally:
    return tally(
        records,
        lambda r: (
            r["decision"] if r.get("decision") is not None and r["decision"] < n_decisions else None
        ),
        (n_decisions,),
    )


def wall_frequency(task: Any, seeds: Sequence[int]) -> np.ndarray:
    """For a MiniGrid task: the fraction of the episodes `seeds` in which each cell [y, x] is a
    wall (1 = a fixed wall, between 0 and 1 = a wall that moves between seeds, such as
    FourRooms' doorways or DoorKey's dividing wall)."""
    count = None
    for seed in seeds:
        walls = task.episode(int(seed)).walls()
        if walls is None:  # a family without a grid
            return np.zeros((0, 0))
        walls = walls.astype(float)
        count = walls if count is None else count + walls
    return count / max(len(seeds), 1) if count is not None else np.zeros((0, 0))
