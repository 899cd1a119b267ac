"""The random gate: the control at the same query budget, asking with probability p."""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmark.gates.base import P_MATCH, Gate


class RandomGate(Gate):
    """Query with probability p, seeded per (seed, episode seed, step): the IR-matched control
    that asks whether the entropy signal beats chance at the same query budget."""

    name = "random"
    swept, report_order, marker = True, 4, "D"

    @classmethod
    def check_config(cls, gate: Any) -> None:
        p = gate.get("p")
        if p is not None and str(p) != P_MATCH and not (_number(p) and 0 <= p <= 1):
            raise ValueError(f"gate.p={p!r} is invalid: allowed 'match' or a number in [0, 1]")

    def __init__(self, p: float, seed: int = 0) -> None:
        self.p, self.seed = float(p), int(seed)

    def mask(self, unc, seeds, step):
        draws = [
            np.random.default_rng([self.seed, s, t]).random()
            for s, t in zip(seeds, step, strict=False)
        ]
        return np.asarray(draws) < self.p


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)
