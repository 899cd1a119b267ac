"""Checkpoint names, parsed here and nowhere else.

- `final`: the last weights; `best`: the best validation reward;
- `rNNN`: the first weights to reach validation reward NNN/100 (r030 for 0.3), saved only for
  the reward thresholds of the training recipe (`policy.thresholds`, the env's by default);
- `tK`: the recipe's K-th threshold (so one sweep covers envs with different thresholds), a
  config value only: `resolve` turns it into the rNNN file name before anything is loaded;
- `match`: of the checkpoints a training saved, the one whose validation success is nearest
  `policy.match_success` (a PPO baseline at a paper's strength, not at this training's best);
  turned into a file name once the training exists (benchmark.policy.checkpoints.matched)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_NAME = re.compile(r"(final|best|match)|r(\d{3})|t([1-9]\d*)")
ALLOWED = (
    "final, best, tK (the env's K-th reward threshold), rNNN (reward threshold x 100) or match "
    "(the saved checkpoint nearest policy.match_success)"
)


@dataclass(frozen=True)
class CheckpointName:
    """A parsed checkpoint name: `kind` is final, best, match, threshold (rNNN) or index (tK)."""

    name: str
    kind: str = ""
    threshold: float | None = None  # rNNN: NNN/100
    index: int | None = None  # tK: K (1-based)

    def __post_init__(self) -> None:
        if not self.kind:  # CheckpointName("final") == parse("final")
            object.__setattr__(self, "kind", self.name)

    @property
    def is_file_name(self) -> bool:
        """final, best and rNNN name files; tK and match must be resolved first."""
        return self.kind not in ("index", "match")


def parse(name: object) -> CheckpointName:
    """The one parser of checkpoint names; ValueError naming the value and what is allowed."""
    m = _NAME.fullmatch(name) if isinstance(name, str) else None
    if m is None:
        raise ValueError(f"policy.checkpoint={name!r} is invalid: allowed {ALLOWED}")
    fixed, r, t = m.groups()
    if fixed:
        return CheckpointName(fixed)
    if r:
        return CheckpointName(name, "threshold", threshold=int(r) / 100)
    return CheckpointName(name, "index", index=int(t))


def threshold_name(threshold: float) -> str:
    """`r030` for a reward threshold of 0.3."""
    return f"r{int(round(float(threshold) * 100)):03d}"


def threshold_of(name: str | None) -> float | None:
    """The reward threshold an rNNN name stands for; None for any other name (or a file's)."""
    try:
        return parse(name).threshold
    except ValueError:
        return None


def resolve(name: object, thresholds: Sequence[float], env: str, *, check: bool = True) -> str:
    """The file name a configured checkpoint stands for: tK becomes the rNNN of the K-th
    threshold; with `check`, an rNNN must be one of the thresholds, since training saves no
    other (a policy from elsewhere brings its own names: its files decide, at load)."""
    thresholds = [float(t) for t in thresholds]
    files = [threshold_name(t) for t in thresholds]
    try:
        parsed = parse(name)
    except ValueError:
        raise ValueError(
            f"policy.checkpoint={name!r} is invalid: allowed final, best, tK (K-th threshold, "
            f"t1..t{len(thresholds)} for {env}), rNNN (reward threshold x 100, one of "
            f"{', '.join(files)}) or match (with policy.match_success)"
        ) from None
    if parsed.kind == "index":
        if parsed.index > len(thresholds):
            raise ValueError(
                f"policy.checkpoint={name} is invalid for {env}: allowed t1..t{len(thresholds)} "
                f"(thresholds {thresholds}), final, best or rNNN"
            )
        return files[parsed.index - 1]
    if check and parsed.kind == "threshold" and name not in files:
        raise ValueError(
            f"policy.checkpoint={name} is invalid for {env}: its reward thresholds are "
            f"{thresholds}, so training saves only {', '.join(files)}; allowed final, best, "
            f"t1..t{len(thresholds)} or one of those (policy.thresholds sets the thresholds)"
        )
    return parsed.name


def order(name: str | None) -> tuple:
    """Sort key, weakest first: None, then rNNN by threshold (tK by index), best and match, final,
    and any other name (a file's) last."""
    if name is None:
        return (-1, 0.0, "")
    try:
        parsed = parse(name)
    except ValueError:
        return (3, 0.0, name)
    if parsed.kind == "threshold":
        return (0, parsed.threshold, name)
    if parsed.kind == "index":
        return (0, float(parsed.index), name)
    return ({"best": 1, "match": 1, "final": 2}[parsed.kind], 0.0, name)


def of_config(cfg: Any, *, check: bool = True) -> str:
    """`resolve` for a job config's `policy.checkpoint`: the thresholds are the recipe's
    (`policy.thresholds`, the env's by default); a policy from elsewhere (`policy.path`,
    `policy.source`) is not checked against them."""
    policy = cfg.policy
    thresholds = policy.get("thresholds")
    if thresholds is None:
        thresholds = cfg.env.thresholds
    elsewhere = bool(policy.get("path") or policy.get("source"))
    name = resolve(policy.checkpoint, thresholds, cfg.env.name, check=check and not elsewhere)
    match_tolerance(policy.get("match_tolerance", MATCH_TOLERANCE))  # a bad value fails anywhere
    if name == "match":
        match_target(policy.get("match_success"))
        path = policy.get("path")
        if path and str(path).endswith((".zip", ".safetensors")):
            raise ValueError(
                f"policy.checkpoint=match picks among the checkpoints a training saved; "
                f"policy.path={path!r} is one file: name a checkpoint directory or bundle, or "
                "another policy.checkpoint"
            )
    return name


def match_target(value: Any) -> float:
    """`policy.match_success`: the validation success `policy.checkpoint=match` aims at, a number
    in [0, 1]; ValueError naming the value otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(
            f"policy.checkpoint=match needs policy.match_success, the validation success to "
            f"match, a number in [0, 1] (e.g. 0.53, the ASK+ paper's FourRooms PPO); got {value!r}"
        )
    return float(value)


# policy.match_tolerance's default: about the noise of one validation (the standard error of a
# success near 0.5 is 0.07 over the paper recipe's 50 episodes, 0.11 over the suite's 20)
MATCH_TOLERANCE = 0.1


def match_tolerance(value: Any) -> float:
    """`policy.match_tolerance`: how far (absolute validation success) the checkpoint
    `policy.checkpoint=match` picks may lie from `policy.match_success` before the job refuses,
    a number in [0, 1]; ValueError naming the value otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(
            f"policy.match_tolerance={value!r} is invalid: allowed a number in [0, 1] (the largest "
            f"absolute difference in validation success policy.checkpoint=match accepts, default "
            f"{MATCH_TOLERANCE})"
        )
    return float(value)
