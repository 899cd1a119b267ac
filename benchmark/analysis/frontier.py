"""The reward-IR frontier of a gate: what reward each query budget buys.

A gate swept over its threshold (a tau grid on test seeds, `+experiment=gates`) gives points
(IR, reward). Its frontier runs from the PPO-only point (IR 0) to the SLM-only point (IR 1)
through the points no other point beats at a lower or equal IR (the best reward reachable within
each budget), linear between them, flat after the best one. Two numbers summarise it:

    normalised area   the area under the frontier, 0 at PPO-only's reward and 1 at SLM-only's:
                      0.5 when reward rises linearly with IR, towards 1 for a gate that reaches
                      SLM-only's reward at an IR near 0, above 1 when a gate beats SLM-only.
                      None when SLM-only does not beat PPO-only (nothing to normalise by)
    at a budget       the point with the largest IR within the budget (IR 5%, 10%, 20%): its
                      reward and gate precision and recall against the expert"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

BUDGETS = (0.05, 0.10, 0.20)


@dataclass(frozen=True)
class Point:
    """One cell of a gate's sweep: its pooled IR and mean reward on test seeds, and the gate's
    precision and recall against the expert where the cell has step records."""

    ir: float
    reward: float
    tuned: bool = False  # the threshold came from a tuning objective, not the grid
    precision: float | None = None
    recall: float | None = None
    label: Any = None


def envelope(
    points: Sequence[Point], ppo_reward: float, slm_reward: float
) -> list[tuple[float, float]]:
    """The frontier's corners (IR, reward) from (0, PPO-only) to IR 1: each point that beats
    every point at a lower or equal IR, then flat to IR 1 unless SLM-only is higher there."""
    pts = sorted([(0.0, ppo_reward), *((p.ir, p.reward) for p in points), (1.0, slm_reward)])
    corners: list[tuple[float, float]] = []
    best = -np.inf
    for ir, reward in pts:
        if reward > best:
            corners.append((float(ir), float(reward)))
            best = reward
    if corners[-1][0] < 1.0:
        corners.append((1.0, best))
    return corners


def normalised_area(points: Sequence[Point], ppo_reward: float, slm_reward: float) -> float | None:
    """The area under the frontier, 0 = PPO-only's reward everywhere, 1 = SLM-only's."""
    if not slm_reward > ppo_reward:
        return None
    xs, ys = zip(*envelope(points, ppo_reward, slm_reward), strict=True)
    area = float(np.trapezoid(ys, xs))
    return (area - ppo_reward) / (slm_reward - ppo_reward)


def at_budget(points: Sequence[Point], budget: float) -> Point | None:
    """The point with the largest IR within `budget` (the best reward among equals); None when
    every point asks more."""
    inside = [p for p in points if p.ir <= budget + 1e-12]
    if not inside:
        return None
    return max(inside, key=lambda p: (p.ir, p.reward))
