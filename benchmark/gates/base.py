"""The gate interface: what the rest of the suite asks of a gate, declared on its class.

Every gate is batch-independent: its decision for an episode depends only on that episode's
uncertainty and (seed, episode seed, step), never on which other episodes share the batch, so
lockstep and sequential evaluation agree.

A gate class is built from its own typed constructor arguments only; what a job needs to know
about it (does it use a policy, MC-dropout uncertainty, a threshold to tune) are class
attributes, the one source of truth. The job-level settings of conf/gate (tau=auto, tau_range,
mc_samples, match_tau) are read by `benchmark.gates.GateSettings`; values are checked once, by
`benchmark.gates.checks.check_gate` (which the job's validation calls)."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from benchmark.uncertainty import Uncertainty

TAU_AUTO = "auto"  # gate.tau=auto: tuned with Optuna on validation seeds
P_MATCH = "match"  # gate.p=match: the random gate spends the entropy cell's query budget


class Gate:
    """Base gate: `needs_policy` False means the job never loads or trains a PPO policy.

    What the rest of the suite asks of a gate is declared here, on its class, and nowhere else
    (docs/gates.md, "Adding a gate"): cell.py, gates/checks.py, build.py and the report read these
    from the class `gate._target_` names (the report: every gate of `available_gates()`), so a
    gate in another installed package needs no edit outside its own files."""

    name = "gate"
    needs_policy = True
    needs_uncertainty = False
    threshold_field: str | None = None  # which Uncertainty field a threshold applies to
    score_is_probability = False  # True: tau compares a probability, so it lies in [0, 1]
    # trained before it runs (by the job, on TRAINING seeds only): `trainer`, "module.function"
    # (cfg, task, policy, checkpoint) -> (constructor arguments it fills, info dict or None)
    needs_training = False
    trainer: str | None = None
    min_mc_samples = 1  # the fewest MC-dropout samples its signal means something with
    min_mc_samples_why = ""  # why, in the message that refuses fewer
    # the report: whether its cells form a frontier over a threshold (or p) to sweep, its place
    # in the tables' method order (None: after the ordered ones), its marker in the IR figure
    swept = False
    report_order: int | None = None
    marker: str | None = None
    # gate config keys its constructor does not take (read by the job or by tuning)
    SETTINGS = ("_target_", "name", "tau", "tau_range", "mc_samples", "match_tau")

    @classmethod
    def config_keys(cls) -> frozenset[str]:
        """The gate config keys it takes: its constructor's arguments and the job's settings."""
        params = inspect.signature(cls.__init__).parameters
        return frozenset(k for k in params if k not in ("self", "args", "kwargs")) | frozenset(
            cls.SETTINGS
        )

    @classmethod
    def check_config(cls, gate: Any) -> None:
        """Fail, naming the bad value and what is allowed, on a value of the gate config this
        gate cannot run with; checks.check_gate calls it after the checks every gate
        shares."""
        n = gate.get("mc_samples")
        if cls.needs_uncertainty and isinstance(n, int) and n < cls.min_mc_samples:
            raise ValueError(
                f"gate.mc_samples={n} is invalid for gate {cls.name!r}: {cls.min_mc_samples_why}; "
                f"allowed an integer >= {cls.min_mc_samples}"
            )

    def mask(self, unc: Uncertainty | None, seeds: list[int], step: list[int]) -> np.ndarray:
        raise NotImplementedError

    def scores(self, records: list[dict]) -> np.ndarray:
        """The signal a threshold applies to, from per-step records (benchmark.analysis.steps),
        for analyses of a gate's score offline (ROC, AUROC)."""
        if self.threshold_field is None:
            raise ValueError(f"gate {self.name!r} has no threshold to tune")
        return np.asarray([r[self.threshold_field] for r in records], float)
