"""The RL stage of Agent-BRACE's pipeline, one entry point for every algorithm: `train_rl`.

- `ppo` (the paper's, the default): policy PPO with a GAE critic, then joint PPO that also
  updates the belief model after every rollout batch (benchmark.brace.ppo);
- `grpo`: the group-relative loop with no critic (benchmark.brace.joint), a named alternative.

`RLSettings` holds every number and switch of the stage; `RLSettings.check()` refuses a bad
one with a message naming it, so a caller checks them before any work."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmark.brace.rewards import DEFAULT_WEIGHTS, BeliefWeights
from benchmark.brace.settings import ALGORITHMS, RLSettings

__all__ = ["ALGORITHMS", "RLSettings", "train_rl"]


def train_rl(
    algorithm: str,
    task: Any,
    prompt: Any,
    model_dirs: dict[str, str | Path],
    out_dirs: dict[str, Path],
    *,
    train_seeds: Sequence[int],
    splits: Any,
    settings: RLSettings,
    train_belief: bool = True,
    raw_history: bool = False,
    gate: Any = None,
    policy: Any = None,
    seed: int = 0,
    log: Any = print,
    weights: BeliefWeights = DEFAULT_WEIGHTS,
) -> dict[str, Any]:
    """RL of the models at `model_dirs` (role -> folder: "belief" and "policy"; with
    `raw_history` only "policy") on episodes of `train_seeds` (training seeds only, refused
    otherwise); saves every role of `out_dirs` there (a frozen belief is saved unchanged).

    `train_belief=False`: the belief model is frozen, the policy trained (the frozen-belief
    ablation). `raw_history=True`: Direct-Action RL, the policy alone on a prompt without a
    belief round (e.g. prompt=history). `gate`/`policy`: the ASK mode's gate and PPO agent
    (None: the models act at every step). `weights`: how R_belief is made (its terms, the
    format multiplier, the certainty scale: the appendix ablations).

    Returns {"algorithm", "settings", "history": one row per iteration (stage, rewards,
    losses; PPO: "value_loss", the critic's), "value_loss": the critic's per iteration (PPO)}."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"brace algorithm {algorithm!r}: allowed {', '.join(ALGORITHMS)}")
    settings.check().for_algorithm(algorithm)
    roles = ("policy",) if raw_history else ("belief", "policy")
    missing = [r for r in roles if r not in model_dirs or r not in out_dirs]
    if missing:
        raise ValueError(f"rl model_dirs/out_dirs lack the roles {missing} (need {list(roles)})")
    if raw_history and train_belief:
        train_belief = False  # no belief model to train
    if algorithm == "ppo":
        from benchmark.brace import ppo

        return ppo.train(task, prompt, {r: model_dirs[r] for r in roles},
                         {r: Path(out_dirs[r]) for r in roles}, train_seeds=train_seeds,
                         splits=splits, settings=settings, train_belief=train_belief,
                         gate=gate, policy=policy, seed=seed, log=log,
                         weights=weights)  # fmt: skip
    from benchmark.brace import joint

    trained = ("belief", "policy") if train_belief else ("policy",)
    result = joint.train(
        task, prompt, {r: model_dirs[r] for r in roles}, {r: Path(out_dirs[r]) for r in roles},
        train_seeds=train_seeds, splits=splits, iterations=settings.iterations,
        seeds_per_step=settings.seeds_per_step, group=settings.group,
        learning_rate=settings.learning_rate, temperature=settings.temperature, gate=gate,
        policy=policy, train_roles=trained, belief_samples=settings.belief_samples,
        seed=seed, log=log, settings=settings, weights=weights,
    )  # fmt: skip
    return {"algorithm": "grpo", "settings": settings.as_dict(), **result}
