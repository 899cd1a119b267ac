"""The authors' released code (github jrzmnt/ask-pomdp) for the bench rows that time it beside
the suite: imported from the checkout that ASK_POMDP_SRC names, as tests/test_official_parity.py
imports it, and run here; never copied into the suite. Without the variable a row says it was
skipped and why."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

SRC_VAR = "ASK_POMDP_SRC"
# configs/rl/ppo.yaml: FourRooms' training episodes are capped at 500 steps
RELEASED_FOURROOMS_MAX_STEPS = 500


def checkout() -> Path | None:
    """The released code's checkout, or None when ASK_POMDP_SRC is unset. A set variable that
    names no checkout is an error naming it."""
    value = os.environ.get(SRC_VAR)
    if not value:
        return None
    src = Path(value).resolve()
    if not (src / "src" / "ask").is_dir():
        raise FileNotFoundError(
            f"{SRC_VAR}={value!r} is not a checkout of the released code (no src/ask in it): "
            "point it at a clone of github jrzmnt/ask-pomdp"
        )
    return src


def modules(src: Path, *names: str) -> dict[str, ModuleType]:
    """The released code's modules `names`, imported with its src/ on sys.path."""
    for path in (src / "src", src):
        if str(path) not in sys.path:
            sys.path.append(str(path))
    return {name: importlib.import_module(name) for name in names}


def fourrooms_ppo(src: Path, seed: int, n_steps: int | None = None) -> Any:
    """An untrained PPO exactly as the released train_ppo.py builds it from configs/rl/ppo.yaml
    (its FourRoomsEnv in a Monitor, its DropoutActorCriticPolicy, n_steps 2048, batch 64,
    constant LR 3e-4, dropout 0.2, [256, 256] actor and critic), on the CPU, without its W&B,
    TensorBoard and progress-bar callbacks."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.utils import set_random_seed

    mods = modules(src, "ask.envs.fourrooms", "ask.utils.ppo")
    set_random_seed(
        seed
    )  # what its set_seed and torch.manual_seed seed (speed does not depend on it)
    env = Monitor(mods["ask.envs.fourrooms"].FourRoomsEnv(max_steps=RELEASED_FOURROOMS_MAX_STEPS))
    return PPO(
        policy=mods["ask.utils.ppo"].DropoutActorCriticPolicy,
        env=env,
        policy_kwargs={"dropout_rate": 0.2, "net_arch": {"pi": [256, 256], "vf": [256, 256]}},
        n_steps=n_steps or 2048,
        batch_size=64,
        learning_rate=3.0e-4,
        verbose=0,
        device="cpu",
    )
