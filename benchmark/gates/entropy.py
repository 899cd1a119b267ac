"""The uncertainty threshold gates: ask when the total predictive entropy (ASK) or its epistemic
part reaches tau."""

from __future__ import annotations

from benchmark.gates.base import Gate


class EntropyGate(Gate):
    """ASK: query when the total predictive entropy H(o) >= tau (bits)."""

    name = "entropy"
    needs_uncertainty = True
    threshold_field = "total"
    swept, report_order, marker = True, 2, "o"
    # gate.normalise: the job divides the entropies by log2 of each step's admissible actions
    SETTINGS = (*Gate.SETTINGS, "normalise")

    def __init__(self, tau: float) -> None:
        self.tau = float(tau)

    def mask(self, unc, seeds, step):
        return getattr(unc, self.threshold_field) >= self.tau


class EpistemicGate(EntropyGate):
    """Query when the epistemic part (mutual information) >= tau."""

    name = "epistemic"
    threshold_field = "epistemic"
    report_order, marker = 3, "v"
    min_mc_samples = 2
    min_mc_samples_why = "one sample has no epistemic spread, so the gate could never fire"
