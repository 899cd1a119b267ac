"""The numbers and switches of Agent-BRACE's RL stage (benchmark.brace.rl), checked up front."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from benchmark.settings import added, identity_of, old_values

ALGORITHMS = ("ppo", "grpo")  # benchmark.brace.rl.train_rl
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
    learning_rate: float = 1e-4  # the policy's (PPO: the actor's); the belief's too unless set
    # PPO: the belief model's own rate (the authors' release trains it at 1e-5 beside the actor's
    # 1e-6); None: learning_rate. Added after models were trained without it (as kl_coef): off,
    # it stays out of a trained model's identity, so their folders stay reusable
    belief_learning_rate: float | None = added(None, old=None)
    temperature: float = 1.0
    # PPO: the policy's KL penalty against its reference, the model it starts from (the SFT or
    # base model), in the reward as the authors' release applies it (verl's use_kl_in_reward):
    # each completion token's reward less kl_coef x (log pi_old - log pi_ref), the reference's
    # log-probs computed once per batch; 0: off (no reference model is loaded)
    kl_coef: float = added(0.0, old=0.0)
    belief_samples: int = 1  # GRPO only: updates sampled per belief state
    # PPO (the paper's Tables 9-10 are not in our copy of the paper: these are chosen, docs/brace.md)
    ppo_epochs: int = 2  # passes over each rollout batch
    minibatch: int = 8  # completions per gradient step
    clip: float = 0.2  # the surrogate's ratio clip
    gamma: float = 1.0  # GAE discount over the tokens of an episode (verl's default)
    # GAE lambda: 1 (verl's default, the authors' stack): with the critic's zero-initialised
    # head every token of an episode starts with the episode's return as its advantage, so a
    # won episode's first actions are pushed up from the first iteration (0.95 over a 96-token
    # episode gave its first token 0.95^95 = 0.008, below the batch mean after whitening)
    lam: float = 1.0
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
        if not 0 <= float(self.kl_coef) < float("inf"):  # also refuses NaN
            raise ValueError(f"rl kl_coef={self.kl_coef}: must be >= 0 (0: no KL penalty)")
        if self.belief_learning_rate is not None and not float(self.belief_learning_rate) > 0:
            raise ValueError(
                f"rl belief_learning_rate={self.belief_learning_rate}: must be > 0, or null "
                "(the belief trains at learning_rate)"
            )
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

    def for_algorithm(self, algorithm: str) -> RLSettings:
        """Refuses a PPO-only field switched on for another algorithm (GRPO has no KL term and
        one learning rate); returns self."""
        if algorithm != "ppo":
            for name, off in PPO_ONLY.items():
                if getattr(self, name) != off:
                    raise ValueError(
                        f"rl {name}={getattr(self, name)}: read by the PPO trainer only "
                        f"(algorithm ppo); with {algorithm} leave it at {off}"
                    )
        return self

    def role_learning_rate(self, role: str) -> float:
        """The rate of a trained role: the belief's own when set, else learning_rate."""
        if role == "belief" and self.belief_learning_rate is not None:
            return float(self.belief_learning_rate)
        return float(self.learning_rate)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def identity(self) -> dict[str, Any]:
        """What of these settings names a trained model: every field, less those added later
        while they are off (models trained before them keep their identity)."""
        return identity_of(self)


# the fields only the PPO trainer reads are the two added later, at the value that turns them
# off: GRPO refuses any other value
PPO_ONLY = old_values(RLSettings)
