"""The RL stage of Agent-BRACE's pipeline, one entry point for every algorithm: `train_rl`.

- `ppo` (the paper's, the default): policy PPO with a GAE critic, then joint PPO that also
  updates the belief model after every rollout batch (benchmark.brace.ppo);
- `grpo`: the group-relative loop with no critic (benchmark.brace.joint), a named alternative.

`RLSettings` holds every number and switch of the stage; `RLSettings.check()` refuses a bad
one with a message naming it, so a caller checks them before any work. `RLJob` holds what a job
plays and writes (task, prompt, model folders, seeds...); every trainer takes the two."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmark.brace.rewards import DEFAULT_WEIGHTS, BeliefWeights
from benchmark.brace.settings import ALGORITHMS, RLSettings

__all__ = ["ALGORITHMS", "RLJob", "RLSettings", "train_rl"]


@dataclass(frozen=True)
class RLJob:
    """What one RL job plays and writes, whichever algorithm trains: the models at
    `model_dirs` (role -> folder: "belief" and "policy"; Direct-Action RL only "policy") on
    episodes of `task` through `prompt` at `train_seeds` (training seeds of `splits` only,
    refused otherwise), each trained role saved to `out_dirs` (a frozen belief unchanged).

    `gate`/`policy`: the ASK mode's gate and PPO agent (None: the models act at every step).
    `seed`: the job's draws (seeds per batch, sampling). `log`: called with each iteration's
    row. `weights`: how R_belief is made (its terms, the format multiplier, the certainty
    scale: the appendix ablations)."""

    task: Any
    prompt: Any
    model_dirs: dict[str, str | Path]
    out_dirs: dict[str, Path]
    train_seeds: Sequence[int]
    splits: Any
    gate: Any = None
    policy: Any = None
    seed: int = 0
    log: Any = print
    weights: BeliefWeights = DEFAULT_WEIGHTS


def train_rl(algorithm: str, job: RLJob, settings: RLSettings, *, train_belief: bool = True,
             raw_history: bool = False) -> dict[str, Any]:  # fmt: skip
    """RL of `job` by `algorithm` at `settings`.

    `train_belief=False`: the belief model is frozen, the policy trained (the frozen-belief
    ablation). `raw_history=True`: Direct-Action RL, the policy alone on a prompt without a
    belief round (e.g. prompt=history).

    Returns {"algorithm", "settings", "history": one row per iteration (stage, rewards,
    losses; PPO: "value_loss", the critic's), "value_loss": the critic's per iteration (PPO)}."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"brace algorithm {algorithm!r}: allowed {', '.join(ALGORITHMS)}")
    settings.check().for_algorithm(algorithm)
    roles = ("policy",) if raw_history else ("belief", "policy")
    missing = [r for r in roles if r not in job.model_dirs or r not in job.out_dirs]
    if missing:
        raise ValueError(f"rl model_dirs/out_dirs lack the roles {missing} (need {list(roles)})")
    if raw_history and train_belief:
        train_belief = False  # no belief model to train
    job = replace(job, model_dirs={r: job.model_dirs[r] for r in roles},
                  out_dirs={r: Path(job.out_dirs[r]) for r in roles})  # fmt: skip
    if algorithm == "ppo":
        from benchmark.brace import ppo

        return ppo.train(job, settings, train_belief=train_belief)
    from benchmark.brace import joint

    trained = ("belief", "policy") if train_belief else ("policy",)
    result = joint.train(job, settings, train_roles=trained)
    return {"algorithm": "grpo", "settings": settings.as_dict(), **result}
