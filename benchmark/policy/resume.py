"""A killed PPO training continues where it stopped.

A training (benchmark.policy.train) saves its whole state at a rollout boundary, just after a
PPO update and before the next rollout, every `policy.resume_every_steps` env steps and when a
stop signal arrives (SIGTERM: a preemption, a time limit, scancel; submitit's preemption
signal, USR2 unless SUBMITIT_PREEMPT_SIGNAL says otherwise). The next training of the same
checkpoint directory continues from it, and the checkpoint cache deletes it once the
directory is complete. The state is one file, `.<checkpoint dir>.resume`, beside the
checkpoint directory being built and written under the same file lock (temp file, fsync,
rename: a reader sees the previous state or the new one).

What it holds, and so what a resumed training restores exactly:
- the SB3 zip (`model.save`): policy weights, the optimizer (Adam moments and step counts), the
  learning-rate and clip schedules, num_timesteps and the rest of the model's pickled data;
- what `model.save` leaves out or `load` discards: the last observations and episode starts,
  RecurrentPPO's LSTM states, the episode-info buffers, the update and episode counters;
- the training VecEnv itself, pickled with cloudpickle (MiniGrid and POPGym envs are pure
  Python; the training-seed stream is pickle-safe), so an episode running at the save goes on;
- the torch (and CUDA), numpy and python RNG states;
- the validation bookkeeping (best so far, thresholds not reached yet, next evaluation step,
  evaluations done, elapsed wall time) and every file the training wrote so far (best, rNNN, their metas,
  curve.csv).
The resumed run's weights equal an uninterrupted run's bit for bit on the same machine and
package versions (tests/policy/test_resume.py). Not restored: SB3's logger and progress bar (output
only), gSDE noise (off for the discrete actions of every env here) and the wall clock.

A signal is handled at the next rollout boundary (at most one rollout and one update later):
the state is saved, then the signal goes to the handler that was there before: submitit's
requeues the job and exits; with the default action, training stops with `Interrupted` and the
checkpoint cache ends the process by the same signal once its temporary directory is gone."""

from __future__ import annotations

import io
import logging
import os
import pickle
import random
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import cloudpickle
import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback

from benchmark.policy.provenance import PACKAGES, package_versions
from benchmark.store import write_atomic

log = logging.getLogger(__name__)

FORMAT = 1
DEFAULT_EVERY_STEPS = 50_000
# what model.save leaves out (RecurrentPPO: the LSTM states) or load resets (_last_obs)
MODEL_ATTRS = (
    "num_timesteps",
    "_n_updates",
    "_episode_num",
    "_current_progress_remaining",
    "_last_obs",
    "_last_episode_starts",
    "_last_original_obs",
    "_last_lstm_states",
    "ep_info_buffer",
    "ep_success_buffer",
)
# benchmark.policy.train.ThresholdCheckpoints' bookkeeping
CALLBACK_ATTRS = (
    "best",
    "best_at",
    "next_eval",
    "pending",
    "last_row",
    "logged_at",
    "evaluations",  # which seeds the next validation plays (policy.eval_seeds cycle, fresh)
)
# files the checkpoint cache writes before training; the resumed run keeps its own
NOT_RESTORED = ("config.json", "system.json")


class Interrupted(BaseException):
    """Training stopped by a signal after saving its state. A BaseException, like
    KeyboardInterrupt: no `except Exception` may swallow it and go on to the next job."""

    def __init__(self, signum: int, timesteps: int, path: Path):
        self.signum, self.timesteps, self.path = signum, timesteps, path
        name = signal.Signals(signum).name
        super().__init__(
            f"PPO training stopped by {name} at {timesteps} steps; the training state saved "
            f"last is in {path}: the next run of this job resumes from it"
        )

    def deliver(self) -> None:
        """End the process by the signal's default action, as it would have ended."""
        signal.signal(self.signum, signal.SIG_DFL)
        signal.raise_signal(self.signum)


def state_path(ckpt_dir: Path) -> Path:
    """Where the resumable state of the training that builds `ckpt_dir` lives."""
    return ckpt_dir.with_name(f".{ckpt_dir.name}.resume")


def every_steps(cfg: dict[str, Any]) -> int:
    """`policy.resume_every_steps` (0: only on a stop signal); an execution setting, part of no
    checkpoint or cell identity."""
    value = cfg.get("resume_every_steps", DEFAULT_EVERY_STEPS)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(
            f"policy.resume_every_steps={value!r} is invalid: allowed an integer >= 0 (env steps "
            "between saves of the resumable training state; 0: only on SIGTERM/preemption)"
        )
    return value


def stop_signals() -> tuple[signal.Signals, ...]:
    """SIGTERM and submitit's preemption/timeout signal."""
    name = "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    usr = getattr(signal, name, signal.SIGUSR2)
    return (signal.SIGTERM,) if usr == signal.SIGTERM else (signal.SIGTERM, usr)


def _versions() -> dict[str, str]:
    return {k: str(v) for k, v in package_versions(PACKAGES).items()}


# -- capture and restore ------------------------------------------------------------------------


def capture(model: Any, checkpoints: Any, out_dir: Path) -> dict[str, Any]:
    """The training's state at a rollout boundary (see the module docstring)."""
    buf = io.BytesIO()
    model.save(buf)
    rng = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    bookkeeping = {k: getattr(checkpoints, k) for k in CALLBACK_ATTRS}
    bookkeeping["elapsed"] = time.monotonic() - checkpoints.start
    files = {
        p.name: p.read_bytes()
        for p in sorted(out_dir.iterdir())
        if p.is_file() and not p.name.startswith(".") and p.name not in NOT_RESTORED
    }
    return {
        "format": FORMAT,
        "timesteps": int(model.num_timesteps),
        "saved": time.time(),
        "versions": _versions(),
        "model": buf.getvalue(),
        "env": cloudpickle.dumps(model.get_env()),
        "attrs": {k: getattr(model, k) for k in MODEL_ATTRS if hasattr(model, k)},
        "rng": rng,
        "checkpoints": bookkeeping,
        "files": files,
    }


def write(state: dict[str, Any], path: Path) -> None:
    """Atomically (the store's writer: temp file, fsync, rename)."""
    write_atomic(path, lambda f: cloudpickle.dump(state, f))


def read(path: Path) -> dict[str, Any] | None:
    """The saved state, None when there is none. An unreadable one is set aside (renamed, never
    deleted) with a warning, and training starts from scratch."""
    try:
        with open(path, "rb") as f:
            state = pickle.load(f)
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ValueError(f"format {state.get('format') if isinstance(state, dict) else '?'}")
    except FileNotFoundError:
        return None
    except Exception as e:  # noqa: BLE001 - truncated, corrupt or foreign: all unusable
        aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        log.warning(
            "resumable training state %s is unreadable (%s: %s): moved to %s, training from "
            "the start",
            path,
            type(e).__name__,
            e,
            aside.name,
        )
        os.replace(path, aside)
        return None
    if state["versions"] != _versions():
        log.warning(
            "resuming %s saved with %s under %s: the weights may differ from an uninterrupted "
            "run's",
            path,
            state["versions"],
            _versions(),
        )
    return state


def restore_model(state: dict[str, Any], algo: type, device: str, out_dir: Path) -> Any:
    """The model with its env as saved, and the training's files back in `out_dir`."""
    env = pickle.loads(state["env"])
    model = algo.load(io.BytesIO(state["model"]), env=env, device=device, force_reset=False)
    for k, v in state["attrs"].items():
        setattr(model, k, v)
    for name, data in state["files"].items():
        if not (out_dir / name).exists():
            (out_dir / name).write_bytes(data)
    return model


def restore_bookkeeping(state: dict[str, Any], checkpoints: Any) -> None:
    saved = dict(state["checkpoints"])
    checkpoints.start = time.monotonic() - saved.pop("elapsed")
    for k, v in saved.items():
        setattr(checkpoints, k, v)


def restore_rng(state: dict[str, Any]) -> None:
    """Last before learn(): building the model draws from torch's RNG."""
    rng = state["rng"]
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])


# -- saving during training ---------------------------------------------------------------------


class Saver(BaseCallback):
    """Saves the state every `every` steps and on a stop signal, at rollout boundaries. Use it
    as a context manager around `learn`: it holds the signal handlers while inside."""

    def __init__(self, path: Path, every: int, checkpoints: Any, out_dir: Path) -> None:
        super().__init__()
        self.path, self.every, self.checkpoints, self.out_dir = path, every, checkpoints, out_dir
        self.saved_at: int | None = None
        self.stop: int | None = None  # the signal received, until handled
        self.previous: dict[int, Any] = {}

    # signals
    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.stop is None:
            self.stop = signum
            log.warning(
                "%s received: saving the training state at the next rollout boundary",
                signal.Signals(signum).name,
            )

    def __enter__(self) -> Saver:
        if threading.current_thread() is threading.main_thread():
            for s in stop_signals():
                previous = signal.getsignal(s)
                if previous is not signal.SIG_IGN:
                    self.previous[s] = signal.signal(s, self._handler)
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: Any) -> None:
        try:
            if kind is None and self.stop is not None:  # arrived after the last rollout
                self.save()
                self.hand_on()
        finally:
            self._uninstall()

    def _uninstall(self) -> None:
        for s, previous in self.previous.items():
            signal.signal(s, previous)
        self.previous = {}

    def hand_on(self) -> None:
        """Give the received signal to the handler that was there before ours."""
        signum, self.stop = self.stop, None
        previous = self.previous.get(signum, signal.SIG_DFL)
        if callable(previous):  # submitit: requeue and exit; its SIGTERM bypass: go on
            log.warning("training state saved; handing %s on", signal.Signals(signum).name)
            previous(signum, None)
            return
        raise Interrupted(signum, int(self.model.num_timesteps), self.path)

    # callback
    def _on_training_start(self) -> None:
        self.saved_at = int(self.model.num_timesteps)

    def _on_rollout_start(self) -> None:
        if self.stop is not None:
            self.save()
            self.hand_on()
        elif self.every and self.model.num_timesteps - (self.saved_at or 0) >= self.every:
            self.save()

    def _on_step(self) -> bool:
        return True

    def save(self) -> None:
        """Never fails the training: a state that cannot be saved (a full disk, an env that does
        not pickle) costs only the resumability, and says so."""
        start = time.monotonic()
        self.saved_at = int(self.model.num_timesteps)
        try:
            write(capture(self.model, self.checkpoints, self.out_dir), self.path)
        except Exception as e:  # noqa: BLE001
            log.warning(
                "could not save the training state at %d steps to %s (%s: %s): a kill now "
                "restarts from the last saved state",
                self.saved_at,
                self.path,
                type(e).__name__,
                e,
            )
            return
        log.info(
            "training state at %d steps saved to %s (%.2f s)",
            self.saved_at,
            self.path,
            time.monotonic() - start,
        )


def remove(path: Path) -> None:
    """Delete the state once the checkpoint directory it was building is complete."""
    path.unlink(missing_ok=True)
    for tmp in path.parent.glob(f"{path.name}.*.tmp"):
        tmp.unlink(missing_ok=True)
