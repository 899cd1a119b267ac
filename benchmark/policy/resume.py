"""A killed PPO training continues where it stopped.

A training (benchmark.policy.train) saves its whole state at a rollout boundary, just after a
PPO update and before the next rollout, every `policy.resume_every_steps` env steps and when a
stop signal arrives (SIGTERM: a preemption, a time limit, scancel; submitit's preemption
signal, USR2 unless SUBMITIT_PREEMPT_SIGNAL says otherwise). The next training of the same
checkpoint directory continues from it, and the checkpoint cache deletes it once the
directory is complete. The state is one file, `.<checkpoint dir>.resume`, beside the
checkpoint directory being built and written under the same file lock (temp file, fsync,
rename: a reader sees the previous state or the new one). It is a safetensors file: its arrays
and byte strings as tensors, everything else as JSON in its metadata, so reading it runs no code
(nothing in it is unpickled); the SB3 zip it holds is loaded only after the pickle check
(benchmark.policy.sb3zip). A state of an earlier release (a pickle) is refused, never loaded.

What it holds, and so what a resumed training restores exactly:
- the SB3 zip (`model.save`): policy weights, the optimizer (Adam moments and step counts), the
  learning-rate and clip schedules, num_timesteps and the rest of the model's pickled data;
- what `model.save` leaves out or `load` discards: the last observations and episode starts,
  RecurrentPPO's LSTM states, the episode-info buffers, the update and episode counters;
- each training env's episode in progress, as data (`Replayable`): its training-seed stream
  before the episode's reset and the actions since; the resumed training builds its envs anew
  and replays them (every reset is seeded, so an env is a function of its seed and actions),
  checked against the saved last observations, so an episode running at the save goes on;
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

import collections
import io
import json
import logging
import os
import random
import signal
import struct
import threading
import time
import zipfile
from pathlib import Path
from types import FrameType
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback

from benchmark.envs.wrappers import PoolStream, SeedStream, TrainingSeeds
from benchmark.policy import sb3zip
from benchmark.policy.provenance import PACKAGES, package_versions
from benchmark.store import write_atomic

log = logging.getLogger(__name__)

FORMAT = 2  # 1: a pickle (an earlier release), refused
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


# -- the training envs as data ------------------------------------------------------------------


class Replayable(gym.Wrapper):
    """Around a task's training env (`TrainingSeeds`): remembers the seed stream as it was
    before the episode's reset and the actions since, so that a fresh env of the same task
    replays the episode in progress (`replay`). Changes nothing the env returns."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.seeds = _training_seeds(env)
        self.before: dict[str, Any] | None = None
        self.reset_seed: int | None = None
        self.actions: list[np.ndarray] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if options:
            raise ValueError(f"reset options {options!r}: a training env is reset without any")
        self.before, self.reset_seed = _stream_state(self.seeds.stream), seed
        self.actions = []
        return self.env.reset(seed=seed)

    def step(self, action: Any) -> Any:
        self.actions.append(np.array(action))
        return self.env.step(action)

    def replay_state(self) -> dict[str, Any]:
        """The episode in progress as data (see `replay`)."""
        if self.before is None:
            raise ValueError("the training env was never reset")
        actions = np.stack(self.actions) if self.actions else None
        return {"stream": self.before, "seed": self.reset_seed, "actions": actions}

    def replay(self, state: dict[str, Any]) -> Any:
        """Reset as the saved episode was reset, step its actions; the last observation."""
        self.seeds.stream = _stream_of(state["stream"])
        obs, _ = self.reset(seed=state["seed"])
        for action in [] if state["actions"] is None else state["actions"]:
            obs = self.step(action)[0]
        return obs


def _training_seeds(env: gym.Env) -> TrainingSeeds:
    """The TrainingSeeds wrapper in `env`'s chain (it may be wrapped further, by a test's
    recorder say): its seed stream is what a replay restores."""
    inner: Any = env
    while not isinstance(inner, TrainingSeeds):
        if not isinstance(inner, gym.Wrapper):
            raise TypeError(f"Replayable wraps a TrainingSeeds env, not {type(env).__name__}")
        inner = inner.env
    return inner


def _stream_state(stream: Any) -> dict[str, Any]:
    if isinstance(stream, SeedStream):
        return {"kind": "seed", "seed": stream.seed, "drawn": stream.drawn}
    if isinstance(stream, PoolStream):
        return {"kind": "pool", "pool": [stream.lo, stream.hi], "drawn": stream.drawn}
    raise TypeError(f"a training-seed stream of type {type(stream).__name__} cannot be saved")


def _stream_of(state: dict[str, Any]) -> Any:
    stream = SeedStream(state["seed"]) if state["kind"] == "seed" else PoolStream(state["pool"])
    stream.drawn = int(state["drawn"])
    return stream


def replay_envs(env: Any, saved: list[dict[str, Any]], last_obs: Any) -> None:
    """Replay each saved episode on the fresh training envs `env` (the model's VecEnv); refused
    (ValueError) unless the envs end on the saved last observations."""
    from stable_baselines3.common.vec_env import VecEnvWrapper, VecTransposeImage

    if len(saved) != env.num_envs:
        raise ValueError(f"the state holds {len(saved)} training envs, the training {env.num_envs}")
    obs = [env.env_method("replay", s, indices=[i])[0] for i, s in enumerate(saved)]
    if isinstance(obs[0], dict):
        batch: Any = {k: np.stack([o[k] for o in obs]) for k in obs[0]}
    else:
        batch = np.stack(obs)
    wrappers = []
    while isinstance(env, VecEnvWrapper):
        wrappers.append(env)
        env = env.venv
    for wrapper in reversed(wrappers):
        if not isinstance(wrapper, VecTransposeImage):
            return  # observations this check cannot recompute
        batch = wrapper.transpose_observations(batch)
    same = (
        all(np.array_equal(batch[k], last_obs[k]) for k in batch)
        if isinstance(batch, dict)
        else np.array_equal(batch, last_obs)
    )
    if not same:
        raise ValueError("replaying the saved episodes did not give the saved last observations")


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
        "envs": model.get_env().env_method("replay_state"),
        "attrs": {k: getattr(model, k) for k in MODEL_ATTRS if hasattr(model, k)},
        "rng": rng,
        "checkpoints": bookkeeping,
        "files": files,
    }


# -- the state file: safetensors, its structure as JSON metadata --------------------------------


class Refused(ValueError):
    """A state file that is never loaded: reading it would run code."""


def _rnn_states() -> type | None:
    try:
        from sb3_contrib.common.recurrent.type_aliases import RNNStates
    except ImportError:  # sb3-contrib is optional
        return None
    return RNNStates


def encode(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    """`value` as JSON, its arrays, tensors and byte strings moved into `arrays` (TypeError for
    anything else: an object is never saved, so none is ever made when reading)."""
    if isinstance(value, np.generic):  # before float: np.float64 is one
        return {"$": "scalar", "dtype": value.dtype.str, "v": value.item()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, np.ndarray, torch.Tensor)):
        key = f"a{len(arrays)}"
        if isinstance(value, bytes):
            arrays[key] = np.frombuffer(value, dtype=np.uint8)
            return {"$": "bytes", "k": key}
        kind = "tensor" if isinstance(value, torch.Tensor) else "array"
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        if value.dtype.hasobject:
            raise TypeError("an array of Python objects cannot be saved")
        arrays[key] = np.ascontiguousarray(value)
        return {"$": kind, "k": key, "shape": list(value.shape)}
    rnn = _rnn_states()
    if rnn is not None and isinstance(value, rnn):
        return {"$": "RNNStates", "v": [encode(v, arrays) for v in value]}
    if isinstance(value, collections.deque):
        return {"$": "deque", "maxlen": value.maxlen, "v": [encode(v, arrays) for v in value]}
    if isinstance(value, tuple):
        return {"$": "tuple", "v": [encode(v, arrays) for v in value]}
    if isinstance(value, list):
        return [encode(v, arrays) for v in value]
    if isinstance(value, dict):
        return {
            "$": "dict",
            "v": [[encode(k, arrays), encode(v, arrays)] for k, v in value.items()],
        }
    raise TypeError(f"a {type(value).__module__}.{type(value).__qualname__} cannot be saved")


def decode(node: Any, arrays: dict[str, np.ndarray]) -> Any:
    """The inverse of `encode`: only the types it writes are made."""
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):
        return [decode(v, arrays) for v in node]
    kind = node["$"]
    if kind in ("bytes", "tensor", "array"):
        array = arrays[node["k"]]
        if kind == "bytes":
            return array.tobytes()
        array = array.reshape(node["shape"]).copy()  # a 0-d array is stored with shape (1,)
        return torch.from_numpy(array) if kind == "tensor" else array
    if kind == "scalar":
        return np.array(node["v"], dtype=np.dtype(node["dtype"]))[()]
    items = [decode(v, arrays) for v in node["v"]] if kind != "dict" else None
    if kind == "RNNStates":
        rnn = _rnn_states()
        if rnn is None:
            raise ValueError("RecurrentPPO's LSTM states need sb3-contrib")
        return rnn(*items)
    if kind == "deque":
        return collections.deque(items, maxlen=node["maxlen"])
    if kind == "tuple":
        return tuple(items)
    if kind == "dict":
        return {decode(k, arrays): decode(v, arrays) for k, v in node["v"]}
    raise ValueError(f"unknown node {kind!r}")


def to_bytes(state: dict[str, Any]) -> bytes:
    from safetensors.numpy import save

    arrays: dict[str, np.ndarray] = {}
    tree = encode(state, arrays)
    return save(arrays, metadata={"resume": json.dumps(tree)})


def from_bytes(blob: bytes) -> dict[str, Any]:
    from safetensors.numpy import load

    (size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + size])
    tree = json.loads(header["__metadata__"]["resume"])
    return decode(tree, load(blob))


def write(state: dict[str, Any], path: Path) -> None:
    """Atomically (the store's writer: temp file, fsync, rename)."""
    blob = to_bytes(state)
    write_atomic(path, lambda f: f.write(blob))


def refuse_pickle(path: Path, blob: bytes) -> None:
    """A pickle (the state file of an earlier release) is never loaded: unpickling runs code."""
    if blob[:1] == b"\x80":
        raise Refused(
            f"refused to read {path}: a resumable training state pickled by an earlier release "
            "is never loaded (unpickling runs code); delete it and rerun to train from the start"
        )


def read(path: Path) -> dict[str, Any] | None:
    """The saved state, None when there is none. An unreadable one is set aside (renamed, never
    deleted) with a warning, and training starts from scratch; a pickle is refused (`Refused`)."""
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    refuse_pickle(path, blob)
    try:
        state = from_bytes(blob)
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ValueError(f"format {state.get('format') if isinstance(state, dict) else '?'}")
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


def check_model_zip(state: dict[str, Any], path: Path | None = None) -> None:
    """The saved SB3 zip is loaded by SB3 (which unpickles its data) only when every pickle in
    it builds data and nothing more (benchmark.policy.sb3zip); else `Refused`."""
    where = f"the SB3 zip in {path}" if path is not None else "the saved SB3 zip"
    try:
        with zipfile.ZipFile(io.BytesIO(state["model"])) as zf:
            data = json.loads(zf.read("data")) if "data" in zf.namelist() else {}
    except (zipfile.BadZipFile, KeyError, ValueError) as e:
        raise Refused(f"cannot read {where}: {type(e).__name__}: {e}") from e
    unsafe = sb3zip.unsafe_entries(data)
    if unsafe:
        found = "; ".join(f"{k}: {', '.join(v[:3])}" for k, v in sorted(unsafe.items()))
        raise Refused(
            f"refused to load {where}: its pickles would run code ({found}); delete the state "
            "file and rerun to train from the start"
        )


def restore_model(state: dict[str, Any], algo: type, device: str, out_dir: Path, env: Any) -> Any:
    """The model on the fresh training envs `env`, each env's episode in progress replayed, and
    the training's files back in `out_dir`."""
    check_model_zip(state)
    model = algo.load(io.BytesIO(state["model"]), env=env, device=device, force_reset=False)
    for k, v in state["attrs"].items():
        if k == "_last_lstm_states" and v is not None:
            v = type(v)(*(tuple(t.to(model.device) for t in part) for part in v))
        setattr(model, k, v)
    replay_envs(model.get_env(), state["envs"], model._last_obs)
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
