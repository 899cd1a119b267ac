"""PPO training of the dropout policy with reward-threshold checkpoints (ASK+ Table 3 reuses them
to test robustness to a weak policy). Validation is deterministic with dropout off on the seeds
`policy.eval_seeds` picks (benchmark.seeds.validation_schedule; by default validation seeds
0..eval_episodes-1 every time); training envs reset only from benchmark.seeds.training_seeds."""

from __future__ import annotations

import contextlib
import csv
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from sb3_contrib import RecurrentPPO
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.utils import ConstantSchedule, LinearSchedule, set_random_seed
from stable_baselines3.common.vec_env import VecEnv

from benchmark.envs.base import Task
from benchmark.policy import names, resume
from benchmark.policy.network import (
    CommandScoringPolicy,
    DropoutActorCriticPolicy,
    MaskedDropoutPolicy,
    RecurrentDropoutPolicy,
    algorithm,
    policy_head,
    policy_kwargs,
)
from benchmark.policy.vec_env import make_vec_env, resolve_workers
from benchmark.seeds import (
    DEFAULT_SPLITS,
    EVAL_SEED_SCHEDULES,
    Splits,
    check_eval_seeds,
    validation_schedule,
)
from benchmark.store import write_atomic, write_json_atomic

log = logging.getLogger(__name__)

LR_SCHEDULES = ("linear", "constant")
# policy.algorithm -> (SB3 algorithm, its MC-dropout policy class)
ALGORITHMS = {
    "ppo": (PPO, DropoutActorCriticPolicy),
    "recurrent_ppo": (RecurrentPPO, RecurrentDropoutPolicy),
}
# PPO kwargs set from top-level policy keys; `seed` would make SB3 reset envs with seeds 0,1,..
MANAGED_PPO_KWARGS = {"seed", "learning_rate", "policy_kwargs", "device", "env", "policy"}
CURVE_FIELDS = ("timesteps", "eval_reward", "eval_success", "wall_seconds")
# A validation log line at most every this fraction of training, whatever eval_freq is, plus one
# for each threshold checkpoint written and the last evaluation; every evaluation is still a row
# of curve.csv and a log_fn (W&B) call.
LOG_EVERY = 0.05
# Part of every checkpoint's identity: bump it with any change here or in policy/network.py that
# changes the weights a config trains to, so no cached checkpoint of older code is reused.
TRAINING_VERSION = 1


def silent_logger() -> Logger:
    """SB3's logger for a training, set explicitly: without one, every `learn` makes an empty
    `SB3-<time>` folder in the system temp directory (its default logger's folder, even with
    nothing to write). The values are still recorded (`name_to_value`); our own progress and
    metrics are logged by the callbacks."""
    return Logger(folder=None, output_formats=[])


def as_dict(cfg: Mapping[str, Any] | DictConfig) -> dict[str, Any]:
    """A plain, resolved dict from a DictConfig or mapping."""
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    return {
        k: OmegaConf.to_container(v, resolve=True) if isinstance(v, DictConfig) else v
        for k, v in dict(cfg).items()
    }


def evaluate(model: PPO, task: Task, seeds: list[int]) -> dict[str, float]:
    """Deterministic, dropout-off episodes on `seeds`, all in lockstep (one batched predict per
    step). Returns mean `reward` and mean `success` (the task's metric: success or accuracy).
    A recurrent policy carries each episode's LSTM state from the episode's start."""
    policy = model.policy
    was_training = policy.training
    policy.set_training_mode(False)
    try:
        episodes = [task.episode(s) for s in seeds]
        live = [e for e in episodes if not e.done]
        state = None  # the live episodes' recurrent states, (layers, len(live), hidden) arrays
        while live:
            obs = np.stack([np.asarray(e.obs) for e in live])
            actions, state = model.predict(obs, state=state, deterministic=True)
            for e, a in zip(live, np.asarray(actions).reshape(len(live)), strict=True):
                e.step(int(a))
            going = [k for k, e in enumerate(live) if not e.done]
            live = [live[k] for k in going]
            state = None if state is None else tuple(s[:, going] for s in state)
    finally:
        policy.set_training_mode(was_training)
    return {
        "reward": float(np.mean([e.total_reward for e in episodes])),
        "success": float(np.mean([e.outcome()[task.metric] for e in episodes])),
    }


def training_vec_env(
    task: Task, seed: int, n_envs: int, workers: int = 1, pool: Sequence[int] | None = None
) -> VecEnv:
    """PPO's training envs: slot i draws layouts from training seed stream `seed * 1000 + i`
    (with `pool` [lo, hi): the seeds lo, lo+1, ..., hi-1 in order, cycled: the released DoorKey
    trainer's 800 maps) and is the task's training env `i` (a task may give slots different
    grids); stepped in `workers` processes (benchmark.policy.vec_env: the same envs and results
    as one); each remembers its episode in progress, which a resumed training replays
    (benchmark.policy.resume.Replayable)."""
    fns = [
        lambda i=i: resume.Replayable(task.training_env(seed * 1000 + i, index=i, pool=pool))
        for i in range(n_envs)
    ]
    return make_vec_env(fns, workers)


class ThresholdCheckpoints(BaseCallback):
    """Every `eval_freq` env steps: validate on `validation_seeds(k)` (k: the evaluations done
    before this one), write a curve row (and hand it to `log_fn`), save `best.zip` on a new best
    and `rNNN.zip` + `rNNN.json` the first time the mean reward reaches each threshold. A log
    line at most every LOG_EVERY of `total_timesteps`, and for each threshold checkpoint and the
    last evaluation (`final`)."""

    def __init__(
        self,
        task: Task,
        out_dir: Path,
        thresholds: list[float],
        eval_freq: int,
        validation_seeds: Callable[[int], list[int]],
        log_fn: Callable[[dict[str, Any]], None] | None,
        total_timesteps: int = 0,
    ) -> None:
        super().__init__()
        self.task, self.out_dir, self.eval_freq = task, out_dir, eval_freq
        self.seeds = validation_seeds
        self.evaluations = 0  # evaluations done: the next one plays self.seeds(self.evaluations)
        self.pending = sorted(float(t) for t in thresholds)
        self.log_fn = log_fn
        self.best = -np.inf
        self.best_at = 0
        self.next_eval = eval_freq
        self.start = time.monotonic()
        self.last_row: dict[str, Any] | None = None
        self.total = int(total_timesteps)
        self.log_step = max(1, int(self.total * LOG_EVERY))
        self.logged_at: int | None = None  # timesteps of the last log line

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.next_eval:
            while self.next_eval <= self.num_timesteps:
                self.next_eval += self.eval_freq
            self.evaluate_and_save()
        return True

    def evaluate_and_save(self, final: bool = False) -> dict[str, Any]:
        result = evaluate(self.model, self.task, self.seeds(self.evaluations))
        self.evaluations += 1
        row = {
            "timesteps": int(self.num_timesteps),
            "eval_reward": result["reward"],
            "eval_success": result["success"],
            "wall_seconds": round(time.monotonic() - self.start, 3),
        }
        self.last_row = row
        new_file = not (self.out_dir / "curve.csv").exists()
        with open(self.out_dir / "curve.csv", "a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=CURVE_FIELDS)
            if new_file:
                writer.writeheader()
            writer.writerow(row)
        if row["eval_reward"] > self.best:
            self.best, self.best_at = row["eval_reward"], row["timesteps"]
            self.save("best", row, threshold=None)
        saved = []
        while self.pending and row["eval_reward"] >= self.pending[0]:
            saved.append(names.threshold_name(self.pending.pop(0)))
            self.save(saved[-1], row, threshold=True)
        self.log_line(row, saved, final)
        if self.log_fn is not None:
            self.log_fn(dict(row))
        return row

    def log_line(self, row: dict[str, Any], saved: list[str], final: bool) -> None:
        """One validation line when a threshold checkpoint was written, at the last evaluation,
        or when LOG_EVERY of training passed since the last line (the first evaluation too)."""
        steps = row["timesteps"]
        due = self.logged_at is None or steps - self.logged_at >= self.log_step
        if not (due or saved or final):
            return
        self.logged_at = steps
        share = f" ({100 * steps / self.total:.0f}%)" if self.total else ""
        log.info(
            "PPO eval at %d steps%s: reward %.3f, %s %.2f; best %.3f at %d steps%s",
            steps,
            share,
            row["eval_reward"],
            self.task.metric,
            row["eval_success"],
            self.best,
            self.best_at,
            f"; saved {', '.join(saved)}" if saved else "",
        )

    def save(self, name: str, row: dict[str, Any], threshold: bool | None) -> None:
        write_atomic(self.out_dir / f"{name}.zip", self.model.save)
        meta = {"name": name, **row}
        if threshold:
            meta["threshold"] = names.parse(name).threshold
        write_json_atomic(self.out_dir / f"{name}.json", meta, sort_keys=False)


def validate_policy(cfg: dict[str, Any]) -> None:
    """The policy config's values (benchmark.validate calls this before any work)."""
    for key in ("total_timesteps", "n_envs", "eval_freq", "eval_episodes", "torch_threads"):
        value = cfg[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"policy.{key}={value!r} is invalid: allowed an integer >= 1")
    resolve_workers(cfg.get("env_workers"), int(cfg["n_envs"]))
    lr = cfg["learning_rate"]
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not lr > 0:
        raise ValueError(f"policy.learning_rate={lr!r} is invalid: allowed a number > 0")
    dropout = cfg["dropout"]
    if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0 <= dropout < 1:
        raise ValueError(f"policy.dropout={dropout!r} is invalid: allowed a number in [0, 1)")
    clash = sorted(set(cfg.get("ppo") or {}) & MANAGED_PPO_KWARGS)
    if clash:
        raise ValueError(
            f"policy.ppo sets {clash}, which train() manages: use the top-level policy keys "
            "(seed, learning_rate, lr_schedule, net_arch, dropout, device) instead"
        )
    resume.every_steps(cfg)
    check_eval_seeds(cfg.get("eval_seeds", EVAL_SEED_SCHEDULES[0]))
    policy_head(cfg)
    if cfg["lr_schedule"] not in LR_SCHEDULES:
        raise ValueError(f"policy.lr_schedule={cfg['lr_schedule']!r}: allowed {LR_SCHEDULES}")
    if algorithm(cfg) == "recurrent_ppo":
        for key in ("lstm_hidden_size", "n_lstm_layers"):
            value = cfg.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"policy.{key}={value!r} is invalid: allowed an integer >= 1")


def check_head(task: Task, cfg: dict[str, Any]) -> str:
    """`policy.head` (network.HEADS), refused where `task` gives no command features to score."""
    head = policy_head(cfg)
    if head == "commands" and (not task.masks_actions or task.command_dim is None):
        raise ValueError(
            f"policy.head='commands' scores each command from its features, which task "
            f"{task.name!r} does not give (a text game's does): allowed policy.head=slots"
        )
    return head


def training_envs(task: Task, cfg: dict[str, Any]) -> VecEnv:
    """The training VecEnv of a validated policy config."""
    n_envs = int(cfg["n_envs"])
    workers = resolve_workers(cfg.get("env_workers"), n_envs)
    return training_vec_env(task, int(cfg["seed"]), n_envs, workers, cfg.get("train_seed_pool"))


def build_model(task: Task, cfg: dict[str, Any]) -> PPO:
    """The untrained PPO of a validated policy config on its training envs: SB3's defaults but
    for what the config sets (policy.ppo, the LR and its schedule, the network)."""
    seed = int(cfg["seed"])
    env = training_envs(task, cfg)
    lr = float(cfg["learning_rate"])
    linear = cfg["lr_schedule"] == "linear"
    schedule = LinearSchedule(lr, 0.0, 1.0) if linear else ConstantSchedule(lr)
    algo, policy_class = ALGORITHMS[algorithm(cfg)]
    if task.masks_actions:  # the observation ends with the action mask
        if algorithm(cfg) != "ppo":
            raise ValueError(
                f"task {task.name!r} masks its actions, which only policy.algorithm=ppo "
                f"supports (MaskedDropoutPolicy), not {algorithm(cfg)!r}"
            )
        policy_class = MaskedDropoutPolicy
    kwargs = policy_kwargs(cfg)
    if check_head(task, cfg) == "commands":
        policy_class = CommandScoringPolicy
        kwargs["command_dim"] = int(task.command_dim)
    model = algo(
        policy_class,
        env,
        learning_rate=schedule,
        policy_kwargs=kwargs,
        device=cfg.get("device", "cpu"),
        verbose=0,
        **(cfg.get("ppo") or {}),
    )
    model.action_space.seed(seed)
    return model


def train(
    task: Task,
    policy_cfg: Mapping[str, Any] | DictConfig,
    out_dir: str | Path,
    log_fn: Callable[[dict[str, Any]], None] | None = None,
    splits: Splits = DEFAULT_SPLITS,
    resume_path: Path | None = None,
) -> Path:
    """Train PPO with the dropout policy on `task`; write checkpoints, metas and curve.csv into
    `out_dir`. Returns the path of `final.zip`. `best` and the thresholds are judged on
    `eval_episodes` seeds per evaluation, chosen by `policy.eval_seeds` (fixed: the first of
    `splits`' validation split every time; cycle: that split in turn; fresh: new random training
    seeds; benchmark.seeds.validation_schedule). With `resume_path`, continue from the
    training state saved there, if any, and save it there every `policy.resume_every_steps` and
    on SIGTERM (benchmark.policy.resume); without, nothing is saved."""
    cfg = as_dict(policy_cfg)
    validate_policy(cfg)
    every = resume.every_steps(cfg)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seed = int(cfg["seed"])
    schedule, n_episodes = cfg.get("eval_seeds", EVAL_SEED_SCHEDULES[0]), int(cfg["eval_episodes"])

    def validation_seeds(evaluation: int) -> list[int]:
        return validation_schedule(schedule, evaluation, n_episodes, seed, splits)

    validation_seeds(0)  # an eval_episodes the split cannot hold fails before training
    old_threads = torch.get_num_threads()
    torch.set_num_threads(int(cfg["torch_threads"]))
    try:
        algo = ALGORITHMS[algorithm(cfg)][0]
        state = resume.read(resume_path) if resume_path is not None else None
        if state is None:
            # Seed torch/numpy/random ourselves: PPO(seed=...) would also seed the VecEnv, whose
            # resets would then pass seeds 0,1,2,... (evaluation seeds) to the envs.
            set_random_seed(seed)
            model = build_model(task, cfg)
        else:
            env = training_envs(task, cfg)
            try:
                model = resume.restore_model(state, algo, cfg.get("device", "cpu"), out, env)
            except BaseException:
                env.close()
                raise
            log.info("resuming PPO training at %d steps from %s", model.num_timesteps, resume_path)
        model.set_logger(silent_logger())
        env = model.get_env()
        callback = ThresholdCheckpoints(
            task,
            out,
            list(cfg.get("thresholds") or []),
            int(cfg["eval_freq"]),
            validation_seeds,
            log_fn,
            total_timesteps=int(cfg["total_timesteps"]),
        )
        total = int(cfg["total_timesteps"])
        saver = None if resume_path is None else resume.Saver(resume_path, every, callback, out)
        if state is not None:
            resume.restore_bookkeeping(state, callback)
            resume.restore_rng(state)
        try:
            with saver or contextlib.nullcontext():
                model.learn(
                    total_timesteps=total - model.num_timesteps,
                    callback=callback if saver is None else [callback, saver],
                    reset_num_timesteps=state is None,
                    progress_bar=bool(cfg.get("progress_bar", False)),
                )
        finally:
            env.close()
        # the final evaluation may still cross thresholds and set a new best
        if callback.last_row is None or callback.last_row["timesteps"] != model.num_timesteps:
            callback.evaluate_and_save(final=True)
        elif callback.logged_at != model.num_timesteps:  # the last evaluation's line
            callback.log_line(callback.last_row, [], final=True)
        row = dict(callback.last_row or {})
        write_atomic(out / "final.zip", model.save)
        write_json_atomic(out / "final.json", {"name": "final", **row}, sort_keys=False)
        return out / "final.zip"
    finally:
        torch.set_num_threads(old_threads)
