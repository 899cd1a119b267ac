"""The RL stage of Agent-BRACE's pipeline, one entry point for every algorithm: `train_rl`.

- `ppo` (the paper's, the default): policy PPO with a GAE critic, then joint PPO that also
  updates the belief model after every rollout batch (benchmark.brace.ppo);
- `grpo`: the group-relative loop with no critic (benchmark.brace.joint), a named alternative.

`RLSettings` holds every number and switch of the stage; `RLSettings.check()` refuses a bad
one with a message naming it, so a caller checks them before any work."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

ALGORITHMS = ("ppo", "grpo")
DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True)
class RLSettings:
    """The RL stage's numbers. `iterations`: joint iterations (both roles, or the policy alone
    when the belief is frozen); `policy_iterations`: PPO iterations of the policy alone before
    them (the paper's policy PPO stage; PPO only). One iteration = one rollout batch of
    `seeds_per_step` training seeds x `group` episodes each, then the update."""

    iterations: int = 4
    policy_iterations: int = 2
    seeds_per_step: int = 4
    group: int = 4
    learning_rate: float = 1e-4
    temperature: float = 1.0
    belief_samples: int = 1  # GRPO only: updates sampled per belief state
    # PPO (the paper's Tables 9-10 are not in our copy of the paper: these are chosen, docs/brace.md)
    ppo_epochs: int = 2  # passes over each rollout batch
    minibatch: int = 8  # completions per gradient step
    clip: float = 0.2  # the surrogate's ratio clip
    gamma: float = 1.0  # GAE discount over the tokens of an episode
    lam: float = 0.95  # GAE lambda
    value_coef: float = 0.5  # weight of the critic's loss
    value_learning_rate: float = 1e-3  # the value head's own rate
    max_grad_norm: float = 1.0
    # memory (a 3-4B model on one GPU): weights' dtype, LoRA rank (0: full fine-tuning),
    # gradient checkpointing, bf16 autocast of the forward passes
    dtype: str = "float32"
    lora_rank: int = 0
    lora_alpha: int = 16
    gradient_checkpointing: bool = False
    bf16_autocast: bool = False

    def check(self) -> RLSettings:
        """Every value, with a message naming it and what is allowed; returns self."""
        for name in ("iterations", "seeds_per_step", "group", "belief_samples", "ppo_epochs",
                     "minibatch"):  # fmt: skip
            if int(getattr(self, name)) < 1:
                raise ValueError(f"rl {name}={getattr(self, name)}: must be >= 1")
        for name in ("policy_iterations", "lora_rank"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"rl {name}={getattr(self, name)}: must be >= 0")
        for name in ("learning_rate", "value_learning_rate", "clip", "max_grad_norm",
                     "lora_alpha"):  # fmt: skip
            if not float(getattr(self, name)) > 0:
                raise ValueError(f"rl {name}={getattr(self, name)}: must be > 0")
        for name in ("gamma", "lam"):
            if not 0 <= float(getattr(self, name)) <= 1:
                raise ValueError(f"rl {name}={getattr(self, name)}: must be in [0, 1]")
        if not float(self.temperature) > 0:
            raise ValueError(f"rl temperature={self.temperature}: must be > 0 (RL samples)")
        if float(self.value_coef) < 0:
            raise ValueError(f"rl value_coef={self.value_coef}: must be >= 0")
        if self.dtype not in DTYPES:
            raise ValueError(f"rl dtype={self.dtype!r}: allowed {', '.join(DTYPES)}")
        return self

    @classmethod
    def of(cls, values: dict[str, Any]) -> RLSettings:
        """From a mapping (a Hydra node): an unknown key is refused, naming the known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"rl settings {unknown}: unknown; allowed {sorted(known)}")
        return cls(**dict(values)).check()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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
) -> dict[str, Any]:
    """RL of the models at `model_dirs` (role -> folder: "belief" and "policy"; with
    `raw_history` only "policy") on episodes of `train_seeds` (training seeds only, refused
    otherwise); saves every role of `out_dirs` there (a frozen belief is saved unchanged).

    `train_belief=False`: the belief model is frozen, the policy trained (the frozen-belief
    ablation). `raw_history=True`: Direct-Action RL, the policy alone on a prompt without a
    belief round (e.g. prompt=history). `gate`/`policy`: the ASK mode's gate and PPO agent
    (None: the models act at every step).

    Returns {"algorithm", "settings", "history": one row per iteration (stage, rewards,
    losses; PPO: "value_loss", the critic's), "value_loss": the critic's per iteration (PPO)}."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"brace algorithm {algorithm!r}: allowed {', '.join(ALGORITHMS)}")
    settings.check()
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
                         gate=gate, policy=policy, seed=seed, log=log)  # fmt: skip
    from benchmark.brace import joint

    trained = ("belief", "policy") if train_belief else ("policy",)
    result = joint.train(
        task, prompt, {r: model_dirs[r] for r in roles}, {r: Path(out_dirs[r]) for r in roles},
        train_seeds=train_seeds, splits=splits, iterations=settings.iterations,
        seeds_per_step=settings.seeds_per_step, group=settings.group,
        learning_rate=settings.learning_rate, temperature=settings.temperature, gate=gate,
        policy=policy, train_roles=trained, belief_samples=settings.belief_samples,
        seed=seed, log=log, settings=settings,
    )  # fmt: skip
    return {"algorithm": "grpo", "settings": settings.as_dict(), **result}
