"""Gates decide, per live episode and step, whether the consultant is asked.

Every gate is batch-independent: its decision for an episode depends only on that episode's
uncertainty and (seed, episode seed, step), never on which other episodes share the batch, so
lockstep and sequential evaluation agree."""

from __future__ import annotations

import math

import numpy as np

from benchmark.uncertainty import Uncertainty


def _check_tau(name: str, tau: float) -> float:
    tau = float(tau)
    if tau < 0 or math.isnan(tau):
        raise ValueError(f"gate.tau={tau} is invalid for gate {name!r}: allowed tau >= 0 (bits)")
    return tau


class Gate:
    """Base gate: `needs_policy` False means the job never loads or trains a PPO policy."""

    name = "gate"
    needs_policy = True
    needs_uncertainty = False
    threshold_field: str | None = None  # which Uncertainty field a threshold applies to

    def mask(self, unc: Uncertainty | None, seeds: list[int], step: list[int]) -> np.ndarray:
        raise NotImplementedError


class ConstantGate(Gate):
    """A gate that never or always asks, whatever the uncertainty."""

    asks = False

    def __init__(self, **_: object) -> None:
        pass

    def mask(self, unc, seeds, step):
        return np.full(len(seeds), self.asks, dtype=bool)


class NeverGate(ConstantGate):
    """PPO-only."""

    name = "never"


class AlwaysGate(ConstantGate):
    """SLM-only: the consultant acts every step and sees no PPO suggestion."""

    name = "always"
    needs_policy = False
    asks = True


class EntropyGate(Gate):
    """ASK: query when the total predictive entropy H(o) >= tau."""

    name = "entropy"
    needs_uncertainty = True
    threshold_field = "total"

    def __init__(self, tau: float, **_: object) -> None:
        self.tau = _check_tau(self.name, tau)

    def mask(self, unc, seeds, step):
        return getattr(unc, self.threshold_field) >= self.tau


class EpistemicGate(EntropyGate):
    """Query when the epistemic part (mutual information) >= tau."""

    name = "epistemic"
    threshold_field = "epistemic"


class RandomGate(Gate):
    """Query with probability p, seeded per (seed, episode seed, step): the IR-matched control
    that asks whether the entropy signal beats chance at the same query budget."""

    name = "random"

    def __init__(self, p: float, seed: int = 0, **_: object) -> None:
        p = float(p)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"gate.p={p} is invalid for gate 'random': allowed 0 <= p <= 1")
        self.p, self.seed = p, int(seed)

    def mask(self, unc, seeds, step):
        draws = [
            np.random.default_rng([self.seed, s, t]).random()
            for s, t in zip(seeds, step, strict=False)
        ]
        return np.asarray(draws) < self.p
