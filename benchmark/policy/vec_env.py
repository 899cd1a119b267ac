"""PPO's training envs stepped on several cores (`policy.env_workers`): the n envs are dealt into
contiguous shards, each a DummyVecEnv, the first in the learner's process and each other in a
forked worker; the learner sends every worker its actions at once, steps its own shard meanwhile
and joins what they return in env order, so env stepping runs in parallel.

Each env is built by the same factory, seeded, reset and stepped by the same DummyVecEnv code as
in one process, so a training's observations, rewards, and so its weights, are those of
`env_workers=1` (tests/policy/test_vec_env.py). A resumable training's state holds no env
objects: its envs are built anew and replayed (benchmark.policy.resume.Replayable, reached in
each worker through `env_method`)."""

from __future__ import annotations

import multiprocessing
import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices

AUTO = "auto"


def resolve_workers(setting: Any, n_envs: int) -> int:
    """`policy.env_workers`: a positive number or `auto` (the cores this process may run on),
    at most one worker per env; 1 keeps every env in this process."""
    if setting is None or str(setting) == AUTO:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            cores = os.cpu_count() or 1
        return max(1, min(cores, n_envs))
    if isinstance(setting, bool) or not isinstance(setting, int) or setting < 1:
        raise ValueError(
            f"policy.env_workers={setting!r} is invalid: allowed a positive integer or 'auto'"
        )
    return min(setting, n_envs)


def make_vec_env(env_fns: list[Callable[[], gym.Env]], workers: int) -> VecEnv:
    """DummyVecEnv for one worker (or one env), ShardedVecEnv for several."""
    if workers <= 1 or len(env_fns) <= 1:
        return DummyVecEnv(env_fns)
    return ShardedVecEnv(env_fns, workers)


def _serve(remote: Any, parent_remote: Any, build: Callable[[], DummyVecEnv]) -> None:
    """A worker: its shard's DummyVecEnv, driven by the learner's commands."""
    parent_remote.close()
    venv = build()
    while True:
        try:
            cmd, data = remote.recv()
        except (EOFError, KeyboardInterrupt):
            break
        reply = _handle(venv, cmd, data)
        if cmd == "close":
            remote.close()
            break
        remote.send(reply)


def _handle(venv: DummyVecEnv, cmd: str, data: Any) -> Any:
    """One command of the learner on a shard's DummyVecEnv, and its reply."""
    if cmd == "step":
        venv.step_async(data)
        return venv.step_wait()
    if cmd == "reset":
        venv._seeds, venv._options = data  # what VecEnv.seed / set_options set in one process
        return venv.reset(), venv.reset_infos
    if cmd == "call":  # get_attr, set_attr, env_method, env_is_wrapped on local indices
        name, args, kwargs = data
        return getattr(venv, name)(*args, **kwargs)
    if cmd == "spaces":
        return venv.observation_space, venv.action_space
    if cmd == "pickle":
        return cloudpickle.dumps(venv)
    if cmd == "close":
        return venv.close()
    raise ValueError(f"unknown shard command {cmd!r}")


class _LocalShard:
    """The learner's own shard, behind the same send/recv as a worker's pipe: a command runs when
    its reply is received, so a step of this shard runs while the workers step theirs."""

    def __init__(self, build: Callable[[], DummyVecEnv]) -> None:
        self.venv, self.pending = build(), None

    def send(self, message: tuple[str, Any]) -> None:
        self.pending = message
        if message[0] == "close":
            self.recv()

    def recv(self) -> Any:
        (cmd, data), self.pending = self.pending, None
        return _handle(self.venv, cmd, data)

    def close(self) -> None:
        self.pending = None


class ShardedVecEnv(VecEnv):
    """n envs in `workers` contiguous shards: this process and `workers` - 1 forked ones (module
    docstring)."""

    def __init__(self, env_fns: list[Callable[[], gym.Env]], workers: int) -> None:
        shards = [list(s) for s in np.array_split(np.arange(len(env_fns)), workers) if len(s)]
        builders = [lambda s=s: DummyVecEnv([env_fns[i] for i in s]) for s in shards]
        self._start([len(s) for s in shards], builders)

    def _start(self, sizes: list[int], builders: list[Callable[[], DummyVecEnv]]) -> None:
        context = multiprocessing.get_context("fork")  # factories are inherited, never pickled
        # the first shard steps in this process (while the workers step theirs): one pipe less
        # per step, and the learner's core is not idle while it waits
        self.sizes, self.remotes, self.processes = sizes, [_LocalShard(builders[0])], []
        for build in builders[1:]:
            remote, child = context.Pipe()
            process = context.Process(target=_serve, args=(child, remote, build), daemon=True)
            process.start()
            child.close()
            self.remotes.append(remote)
            self.processes.append(process)
        self.offsets = np.cumsum([0, *sizes]).tolist()
        self.remotes[0].send(("spaces", None))
        observation_space, action_space = self.remotes[0].recv()
        self.closed = False
        super().__init__(sum(sizes), observation_space, action_space)

    # ---- stepping
    def step_async(self, actions: np.ndarray) -> None:
        for k, remote in enumerate(self.remotes):
            remote.send(("step", actions[self.offsets[k] : self.offsets[k + 1]]))

    def step_wait(self):
        parts = [remote.recv() for remote in self.remotes]
        obs, rewards, dones, infos = zip(*parts, strict=True)
        return (
            self._join(obs),
            np.concatenate(rewards),
            np.concatenate(dones),
            [info for part in infos for info in part],
        )

    def reset(self):
        for k, remote in enumerate(self.remotes):
            lo, hi = self.offsets[k], self.offsets[k + 1]
            remote.send(("reset", (self._seeds[lo:hi], self._options[lo:hi])))
        parts = [remote.recv() for remote in self.remotes]
        self.reset_infos = [info for _, infos in parts for info in infos]
        self._reset_seeds()
        self._reset_options()
        return self._join([obs for obs, _ in parts])

    def _join(self, parts: Sequence[Any]) -> Any:
        if isinstance(parts[0], dict):
            return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
        return np.concatenate(parts)

    # ---- the envs' attributes and methods, by global index
    def _call(self, name: str, indices: VecEnvIndices, *args: Any, **kwargs: Any) -> list[Any]:
        wanted = self._get_indices(indices)
        out: dict[int, Any] = {}
        for k, remote in enumerate(self.remotes):
            lo, hi = self.offsets[k], self.offsets[k + 1]
            local = [i - lo for i in wanted if lo <= i < hi]
            if local:
                remote.send(("call", (name, args, {**kwargs, "indices": local})))
                out.update(zip([lo + i for i in local], remote.recv(), strict=True))
        return [out[i] for i in wanted]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._call("get_attr", indices, attr_name)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._call("set_attr", indices, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs
    ) -> list[Any]:
        return self._call("env_method", indices, method_name, *method_args, **method_kwargs)

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return self._call("env_is_wrapped", indices, wrapper_class)

    # ---- lifetime and pickling (a resumable training's state)
    def close(self) -> None:
        if self.closed:
            return
        for remote in self.remotes:
            remote.send(("close", None))
        for process in self.processes:
            process.join()
        for remote in self.remotes:
            remote.close()
        self.closed = True

    def __getstate__(self) -> dict[str, Any]:
        blobs = []
        for remote in self.remotes:
            remote.send(("pickle", None))
            blobs.append(remote.recv())
        state = {k: v for k, v in self.__dict__.items() if k not in ("remotes", "processes")}
        return {**state, "shard_blobs": blobs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        blobs = state.pop("shard_blobs")
        self._start(state["sizes"], [lambda b=b: pickle.loads(b) for b in blobs])
        self.__dict__.update({k: v for k, v in state.items() if k != "closed"})
