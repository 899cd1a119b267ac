"""The constant gates: PPO alone (never) and the consultant alone (always)."""

from __future__ import annotations

import numpy as np

from benchmark.gates.base import Gate


class ConstantGate(Gate):
    """A gate that never or always asks, whatever the uncertainty."""

    asks = False

    def mask(self, unc, seeds, step):
        return np.full(len(seeds), self.asks, dtype=bool)


class NeverGate(ConstantGate):
    """PPO-only."""

    name = "never"
    report_order, marker = 0, "s"


class AlwaysGate(ConstantGate):
    """SLM-only: the consultant acts every step and sees no PPO suggestion."""

    name = "always"
    needs_policy = False
    asks = True
    report_order, marker = 1, "^"
