"""The gate config's values, checked before any work (benchmark.validate calls these): its keys
as the gate classes declare them, gate.mc_samples, the class's own checks, and every tau against
the scale of the score it thresholds (bits up to log2|A|, normalised entropies and
probabilities in [0, 1])."""

from __future__ import annotations

import math
from typing import Any

from hydra.utils import get_class
from omegaconf import DictConfig

from benchmark.gates import TAU_AUTO, Gate, available_gates


def gate_class(gate: Any) -> type | None:
    """The class `gate._target_` names; None when it names none (building the gate then fails
    with Hydra's message)."""
    try:
        return get_class(str(gate.get("_target_")))
    except Exception:  # a bad _target_ fails where the gate is built, with Hydra's message
        return None


def gate_keys(gate: Any) -> frozenset[str]:
    """The keys a `gate` node may hold: those any gate class declares (Gate.config_keys)."""
    gates = [*available_gates().values(), gate_class(gate)]
    return frozenset().union(
        *(g.config_keys() for g in gates if isinstance(g, type) and issubclass(g, Gate))
    )


def check_gate(cfg: DictConfig, task: Any) -> None:
    """gate.mc_samples, the gate class's own checks (Gate.check_config), then its taus against
    `task`'s actions (None: no task built, so no log2|A| bound)."""
    gate = cfg.gate
    n = gate.get("mc_samples")
    if n is not None and (not isinstance(n, int) or n < 1):
        raise ValueError(f"gate.mc_samples={n!r} is invalid: allowed an integer >= 1")
    cls = gate_class(gate)
    if isinstance(cls, type) and issubclass(cls, Gate):
        cls.check_config(gate)  # its own keys (Gate.check_config)
    _check_taus(cfg, task)


def _check_taus(cfg: DictConfig, task) -> None:
    """gate.tau and gate.match_tau in [0, log2|A|] bits (the largest entropy a policy over |A|
    actions can have: a tau above it never asks), or 'auto'; gate.tau_range finite with its low
    end below log2|A| (the range is clipped to it). A gate whose score is a probability (the
    learned gate), or an entropy gate with gate.normalise=true, has [0, 1] in place of
    [0, log2|A|]. `allow_tau_above_max=true` accepts a
    finite tau above the maximum on purpose."""
    gate = cfg.gate
    normalise = _check_normalise(gate)
    if getattr(gate_class(gate), "score_is_probability", False):
        _check_probability_taus(cfg)
        return
    if normalise:  # the entropy over log2 of the admissible actions: [0, 1] in every state
        max_h, ceiling, unit, bits = 1.0, "1 (gate.normalise=true)", "(normalised)", ""
        top = "the largest normalised entropy"
    else:
        max_h = math.log2(len(task.action_names)) if task is not None else math.inf
        ceiling, unit, bits = f"log2(|A|) = {max_h:.3f}", "(bits)", " bits"
        top = f"the maximum entropy of {len(task.action_names) if task else '|A|'} actions"
    for key in ("tau", "match_tau"):
        tau = gate.get(key)
        if tau is None or str(tau) == TAU_AUTO:
            continue
        if not _finite_number(tau) or tau < 0:
            raise ValueError(
                f"gate.{key}={tau!r} is invalid: allowed 'auto' or a number >= 0 {unit}, at most "
                f"{ceiling} for {cfg.env.name}"
            )
        if tau > max_h and not cfg.get("allow_tau_above_max", False):
            raise ValueError(
                f"gate.{key}={tau!r} is invalid for {cfg.env.name}: allowed 'auto' or a number "
                f"in [0, {ceiling}]{bits}; a tau above {top} never asks (set "
                "allow_tau_above_max=true to run such a gate on purpose)"
            )
    if "tau_range" in gate:
        low, high = _pair("gate.tau_range", gate.tau_range)
        if (
            not (_finite_number(low) and _finite_number(high))
            or low < 0
            or high <= low
            or (low >= max_h)
        ):
            clip = "always" if normalise else "with tuning.clip_tau"
            raise ValueError(
                f"gate.tau_range=[{low}, {high}] is invalid for {cfg.env.name}: allowed finite "
                f"0 <= low < high with low < {ceiling} (the range is clipped to it {clip})"
            )


def _check_normalise(gate: DictConfig) -> bool:
    """gate.normalise: a boolean, and true only for a gate that thresholds an entropy (a
    learned gate's classifier is trained on the entropies in bits)."""
    value = gate.get("normalise", False)
    if not isinstance(value, bool):
        raise ValueError(f"gate.normalise={value!r} is invalid: allowed true or false")
    cls = gate_class(gate)
    thresholds_entropy = cls is not None and (
        getattr(cls, "threshold_field", None) in ("total", "epistemic")
        and not getattr(cls, "score_is_probability", False)
    )
    if value and not thresholds_entropy:
        raise ValueError(
            f"gate.normalise=true is invalid for gate {gate.get('name')!r}: allowed only for a "
            "gate whose tau compares an MC-dropout entropy (entropy, epistemic)"
        )
    return value


def _check_probability_taus(cfg: DictConfig) -> None:
    """gate.tau in [0, 1] or 'auto', gate.tau_range within [0, 1]: the gate's score is a
    probability, whatever the env."""
    gate, name = cfg.gate, cfg.gate.get("name")
    tau = gate.get("tau")
    if tau is not None and str(tau) != TAU_AUTO:
        above = _finite_number(tau) and tau > 1 and cfg.get("allow_tau_above_max", False)
        if not (_finite_number(tau) and 0 <= tau <= 1) and not above:
            raise ValueError(
                f"gate.tau={tau!r} is invalid for gate {name!r}: allowed 'auto' or a number in "
                "[0, 1] (its score is a probability; a tau above 1 never asks: set "
                "allow_tau_above_max=true to run such a gate on purpose)"
            )
    if "tau_range" in gate:
        low, high = _pair("gate.tau_range", gate.tau_range)
        if not 0 <= low < high <= 1:
            raise ValueError(
                f"gate.tau_range=[{low}, {high}] is invalid for gate {name!r}: allowed "
                "0 <= low < high <= 1 (its score is a probability)"
            )


def _finite_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _pair(name: str, value) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is invalid: allowed [low, high]") from None
    return low, high
