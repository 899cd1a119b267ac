"""Environments: build a Task from its config (`conf/env/<name>.yaml`), list the available ones.

Adding an environment of an existing family is adding a YAML file whose `task._target_` names its
Task class; a new family adds its module (benchmark.envs.family, docs/families.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark.config import CONF, load_yaml
from benchmark.envs.base import CardView, Episode, Memory, NavView, Task
from benchmark.envs.family import Family, available_families, family_of, get_family

ENV_CONF_DIR = CONF / "env"

__all__ = [
    "ENV_CONF_DIR",
    "CardView",
    "Episode",
    "Family",
    "Memory",
    "NavView",
    "Task",
    "available_envs",
    "available_families",
    "family_of",
    "get_family",
    "load_env_cfg",
    "make_task",
    "results_root_of",
    "recorded_task",
    "task_targets",
]


def available_envs() -> list[str]:
    """Names of the env configs in conf/env (what `env=<name>` accepts)."""
    return sorted(p.stem for p in ENV_CONF_DIR.glob("*.yaml"))


def load_env_cfg(name: str) -> Any:
    """The env config `name` as an OmegaConf node, without composing the whole job config."""
    path = ENV_CONF_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"unknown env {name!r}; available: {available_envs()}")
    return load_yaml(path)


def results_root_of(node: Any) -> str | None:
    """The `paths.root` of the job config a node (`cfg.env`) is part of; None for a standalone
    node (an env config loaded by name, a plain dict)."""
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(node, DictConfig) or node._get_parent() is None:
        return None
    return OmegaConf.select(node._get_root(), "paths.root", default=None)


def make_task(env_cfg: Any, results_root: str | Path | None = None) -> Task:
    """The Task described by an env config (its `task` node, via hydra.utils.instantiate); also
    takes a plain dict or an env name.
    Tasks hold only their config values, so they pickle cheaply and can be rebuilt anywhere.
    `results_root`: where the task keeps what it makes (Task.use_results_root: TextWorld's
    games); by default the `paths.root` of the job config `env_cfg` is part of, when it is one."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    if results_root is None:
        results_root = results_root_of(env_cfg)
    if isinstance(env_cfg, str):
        env_cfg = load_env_cfg(env_cfg)
    elif isinstance(env_cfg, dict):
        env_cfg = OmegaConf.create(env_cfg)
    if "task" not in env_cfg:
        raise ValueError(f"env config has no 'task' node; keys: {list(env_cfg)}")
    task = instantiate(env_cfg.task, _convert_="all")
    if not isinstance(task, Task):
        raise TypeError(f"env.task._target_ built {type(task).__name__}, not a benchmark Task")
    if results_root is not None:
        task.use_results_root(Path(results_root))
    return task


def task_targets() -> set[str]:
    """The Task classes conf/env's configs name (`task._target_`): all a results file may ask for."""
    return {str(load_env_cfg(name).task._target_) for name in available_envs()}


def recorded_task(env_cfg: dict[str, Any]) -> Task:
    """The Task of an env config read from a results file (a cell's cell.json): built only when
    its `task._target_` is one of `task_targets()` and no other value is a `_target_`. A file's
    `_target_` could name any callable (one that unpickles, or runs a shell), and Hydra would
    call it; a Task class only stores the values it is given. ValueError naming what is refused."""
    task = env_cfg.get("task") if isinstance(env_cfg, dict) else None
    if not isinstance(task, dict):
        raise ValueError(f"env config has no 'task' mapping: {type(task).__name__}")
    target, allowed = task.get("_target_"), task_targets()
    if target not in allowed:
        raise ValueError(
            f"env.task._target_={target!r} is not a Task class of conf/env (allowed: "
            f"{sorted(allowed)}): not built from a results file"
        )

    def nested(value: Any, top: bool) -> bool:
        if isinstance(value, dict):
            here = "_target_" in value and not top
            return here or any(nested(v, False) for v in value.values())
        return isinstance(value, list) and any(nested(v, False) for v in value)

    if nested(task, True):
        raise ValueError(f"env.task of {target} holds another `_target_`: not built from a file")
    return make_task(env_cfg)
