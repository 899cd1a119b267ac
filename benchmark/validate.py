"""Fail fast on bad values, before any training or model loading. Hydra already rejects unknown
group options (listing the allowed ones); this checks the values inside the groups. Every
message names the bad value and what is allowed."""

from __future__ import annotations

import math
import re

from omegaconf import DictConfig

from benchmark.seeds import SPLITS, configure_splits

CHECKPOINT = re.compile(r"^(final|best|r\d{3}|t\d)$")


def validate(cfg: DictConfig, task=None) -> None:
    configure_splits(cfg.get("splits"))
    gate = cfg.gate
    n = gate.get("mc_samples")
    if n is not None and (not isinstance(n, int) or n < 1):
        raise ValueError(f"gate.mc_samples={n!r} is invalid: allowed an integer >= 1")
    tau = gate.get("tau")
    if tau is not None and str(tau) != "auto":
        if not isinstance(tau, (int, float)) or math.isnan(tau) or tau < 0:
            raise ValueError(f"gate.tau={tau!r} is invalid: allowed 'auto' or a number >= 0 (bits)")
    if "tau_range" in gate:
        low, high = _pair("gate.tau_range", gate.tau_range)
        max_h = math.log2(len(task.action_names)) if task is not None else math.inf
        if low < 0 or high <= low or low >= max_h:
            raise ValueError(
                f"gate.tau_range=[{low}, {high}] is invalid for {cfg.env.name}: allowed "
                f"0 <= low < high with low < log2(|A|) = {max_h:.3f} (the range is clipped to it)"
            )
    p = gate.get("p")
    if p is not None and str(p) != "match" and not (isinstance(p, (int, float)) and 0 <= p <= 1):
        raise ValueError(f"gate.p={p!r} is invalid: allowed 'match' or a number in [0, 1]")
    if cfg.eval.split not in SPLITS:
        raise ValueError(f"eval.split={cfg.eval.split!r} is invalid: allowed {sorted(SPLITS)}")
    for key in ("eval", "tuning"):
        n_ep = cfg[key].n_episodes
        split = cfg.eval.split if key == "eval" else "validation"
        size = len(SPLITS.get(split, ()))
        if not isinstance(n_ep, int) or not 1 <= n_ep <= max(size, 1):
            raise ValueError(
                f"{key}.n_episodes={n_ep!r} is invalid: allowed an integer in 1..{size} "
                f"(the size of the {split} split)"
            )
    if cfg.eval.mode not in ("lockstep", "sequential"):
        raise ValueError(f"eval.mode={cfg.eval.mode!r} is invalid: allowed lockstep, sequential")
    ckpt = str(cfg.policy.checkpoint)
    if not CHECKPOINT.match(ckpt):
        raise ValueError(
            f"policy.checkpoint={ckpt!r} is invalid: allowed final, best, tK (K-th threshold) or rNNN "
            f"(reward threshold x100, one of {[f'r{round(t * 100):03d}' for t in cfg.env.thresholds]})"
        )


def _pair(name: str, value) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is invalid: allowed [low, high]") from None
    return low, high
