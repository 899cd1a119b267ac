"""CPU bench sections on the policy side: the gate (batched MC dropout vs the N-pass reference,
and the evaluator's per-episode masks) and training (PPO steps/s with the default DummyVecEnv vs
a single env); and the short-trained policy later sections use."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from benchmark.bench.common import time_interleaved
from benchmark.bench.cpu_settings import TARGETS


class PolicySections:
    """The gate and training sections of CpuBench (a mixin; the host (CpuBench) provides `cfg`, `check`, `sizes`, `within` and the state the sections share)."""

    # -------------------------------------------------------------------------------- 1. gate
    def section_gate(self) -> dict[str, Any]:
        from benchmark.envs import make_task
        from benchmark.evaluate import MaskStream, episode_masks
        from benchmark.uncertainty import draw_masks, mc_dropout, mc_dropout_sequential

        cfg = self.cfg("env=fourrooms", "gate=entropy")
        task = make_task(cfg.env)
        pol = new_ppo(task, cfg.policy, n_envs=1).policy  # untrained, fourrooms-shaped
        n, b = int(cfg.gate.mc_samples), self.sizes.gate_batch
        obs = sample_observations(task, b, steps=5)
        gens = [MaskStream(s) for s in range(b)]  # the evaluator's per-episode mask streams
        one = obs[:1]
        timings = time_interleaved(
            {
                "batched": lambda: mc_dropout(pol, obs, n, torch.Generator().manual_seed(0)),
                "sequential": lambda: mc_dropout_sequential(
                    pol, obs, n, torch.Generator().manual_seed(0)
                ),
                "evaluator_path": lambda: mc_dropout(
                    pol, obs, n, masks=episode_masks(pol, gens, n)
                ),
                "masks_one_generator": lambda: draw_masks(
                    pol, b, n, torch.Generator().manual_seed(0)
                ),
                "masks_per_episode": lambda: episode_masks(pol, gens, n),
                "batched_b1": lambda: mc_dropout(pol, one, n, torch.Generator().manual_seed(0)),
                "sequential_b1": lambda: mc_dropout_sequential(
                    pol, one, n, torch.Generator().manual_seed(0)
                ),
            },
            repeats=self.sizes.gate_repeats,
        )
        us = {k: v["median_s"] * 1e6 / (1 if k.endswith("_b1") else b) for k, v in timings.items()}
        fast = mc_dropout(pol, obs, n, torch.Generator().manual_seed(0))
        ref = mc_dropout_sequential(pol, obs, n, torch.Generator().manual_seed(0))
        agree = {
            "max_abs_diff_total_bits": float(np.abs(fast.total - ref.total).max()),
            "actions_equal": bool((fast.action == ref.action).all()),
        }
        s = "gate"
        # the reference the target is set against: the official ASK+ code's way, one episode at
        # a time with N sequential dropout passes per decision
        self.check(
            s,
            f"evaluator path (B={b}, N={n}) vs per-episode N-pass loop",
            us["sequential_b1"] / us["evaluator_path"],
            target=TARGETS["gate"],
        )
        self.check(
            s, f"batched vs N-pass over the same B={b} rows", us["sequential"] / us["batched"]
        )
        self.check(
            s,
            "evaluator path (per-episode masks) vs N-pass",
            us["sequential"] / us["evaluator_path"],
        )
        self.check(s, "batched vs N-pass at B=1", us["sequential_b1"] / us["batched_b1"])
        self.check(s, "batched", us["batched"], "us/decision")
        self.check(s, "N-pass sequential", us["sequential"], "us/decision")
        self.check(s, "evaluator path", us["evaluator_path"], "us/decision")
        self.check(s, "mask draws share of batched", us["masks_one_generator"] / us["batched"], "")
        return {
            "params": {
                "batch": b,
                "mc_samples": n,
                "net_arch": list(cfg.env.net_arch),
                "obs_dim": int(obs.shape[1]),
                "actions": len(task.action_names),
                "repeats": self.sizes.gate_repeats,
                "policy": "untrained (PPO init)",
            },
            "us_per_decision": us,
            "timings": timings,
            "agreement": agree,
        }

    # -------------------------------------------------------------------------------- 4. training
    def section_training(self) -> dict[str, Any]:
        from benchmark.envs import make_task

        # the suite recipe's 8 envs: the paper recipe trains one env, with nothing to shard
        cfg = self.cfg("env=fourrooms", "policy.recipe=suite")
        task = make_task(cfg.env)
        steps = self.sizes.train_steps
        default_envs = int(cfg.policy.n_envs)
        threads = int(cfg.policy.torch_threads)
        many, workers = f"{default_envs}_envs", f"{default_envs}_envs_2_workers"
        times: dict[str, list[float]] = {many: [], workers: [], "1_env": []}
        identical: list[bool] = []
        with torch_threads(threads):
            for rep in range(self.sizes.train_repeats):
                weights = {}
                for n_envs, n_workers, key in (
                    (default_envs, 1, many),
                    (default_envs, 2, workers),
                    (1, 1, "1_env"),
                ):
                    model = new_ppo(
                        task,
                        cfg.policy,
                        n_envs,
                        n_steps=self.sizes.train_n_steps,
                        seed=int(cfg.policy.seed) + rep,
                        workers=n_workers,
                    )
                    times[key].append(learn_steps_per_s(model, steps))
                    weights[key] = model.policy.state_dict()
                    if key == many:
                        self.policy = model.policy  # the short-trained policy later sections use
                identical.append(
                    all(torch.equal(weights[many][k], weights[workers][k]) for k in weights[many])
                )
        sps = {k: statistics.median(v) for k, v in times.items()}
        s = "training"
        self.check(
            s,
            "env stepping in 2 worker processes vs 1 (steps/s, policy.env_workers)",
            sps[workers] / sps[many],
            target=TARGETS["training_workers"],
        )
        self.check(s, "2 env workers: weights identical to 1", float(all(identical)), target=1.0)
        self.check(
            s,
            f"{default_envs} envs vs 1 env (steps/s)",
            sps[f"{default_envs}_envs"] / sps["1_env"],
            target=TARGETS["training"],
        )
        self.check(s, f"DummyVecEnv x{default_envs}", sps[f"{default_envs}_envs"], "steps/s")
        self.check(s, "single env", sps["1_env"], "steps/s")
        released = self._released_training(threads)
        return {
            "released": released,
            "params": {
                "env": "fourrooms",
                "total_timesteps": steps,
                "n_envs": default_envs,
                "torch_threads": threads,
                "n_steps": self.sizes.train_n_steps or 2048,
                "repeats": self.sizes.train_repeats,
                "vec_env": "DummyVecEnv; ShardedVecEnv for 2 workers",
            },
            "steps_per_s": sps,
            "steps_per_s_all": times,
        }

    def _released_training(self, threads: int) -> dict[str, Any]:
        """The official recipe on FourRooms (1 env, n_steps 2048, batch 64, constant LR 3e-4): the
        suite's training (benchmark.policy.train.build_model under protocol=official) against the
        released train_ppo.py's model (benchmark.bench.released), the same steps, interleaved;
        validation callbacks off on both sides. Skipped without ASK_POMDP_SRC."""
        from benchmark.bench import released
        from benchmark.envs import make_task
        from benchmark.policy.train import as_dict, build_model

        src = released.checkout()
        if src is None:
            why = f"{released.SRC_VAR} is not set (a checkout of github jrzmnt/ask-pomdp)"
            print(f"  training vs the released code's loop: skipped, {why}")
            return {"skipped": why}
        cfg = self.cfg("env=fourrooms", "protocol=official")
        task = make_task(cfg.env)
        policy = as_dict(cfg.policy)
        if self.sizes.train_n_steps is not None:
            policy["ppo"] = {**(policy.get("ppo") or {}), "n_steps": self.sizes.train_n_steps}

        def suite(rep: int):
            return build_model(task, {**policy, "seed": int(policy["seed"]) + rep})

        def theirs(rep: int):
            return released.fourrooms_ppo(src, int(policy["seed"]) + rep, self.sizes.train_n_steps)

        times: dict[str, list[float]] = {"suite": [], "released": []}
        with torch_threads(threads):
            for rep in range(self.sizes.train_repeats):
                for key, build in (("suite", suite), ("released", theirs)):
                    model = build(rep)
                    times[key].append(learn_steps_per_s(model, self.sizes.train_steps))
        sps = {k: statistics.median(v) for k, v in times.items()}
        s = "training"
        self.check(
            s,
            "official recipe: the suite's training vs the released code's (steps/s)",
            sps["suite"] / sps["released"],
        )
        self.check(s, "official recipe, the released code's training", sps["released"], "steps/s")
        return {"checkout": str(src), "steps_per_s": sps, "steps_per_s_all": times}

    def _policy(self, cfg: Any, task: Any):
        if self.policy is None:  # sections run on their own: train the short policy here
            with torch_threads(int(cfg.policy.torch_threads)):
                model = new_ppo(
                    task, cfg.policy, int(cfg.policy.n_envs), n_steps=self.sizes.train_n_steps
                )
                model.learn(total_timesteps=self.sizes.train_steps)
            self.policy = model.policy
        return self.policy


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch on `n` threads inside, its own count again after (PPO's steps are timed at the
    recipe's thread count)."""
    with contextlib.ExitStack() as restore:
        restore.callback(torch.set_num_threads, torch.get_num_threads())
        torch.set_num_threads(n)
        yield


def learn_steps_per_s(model: Any, steps: int) -> float:
    """Train `model` for `steps` steps; its steps/s. Its training envs are closed after."""
    t0 = time.perf_counter()
    model.learn(total_timesteps=steps)
    rate = model.num_timesteps / (time.perf_counter() - t0)
    model.get_env().close()
    return rate


def new_ppo(
    task: Any,
    policy_cfg: Any,
    n_envs: int,
    n_steps: int | None = None,
    seed: int = 0,
    workers: int = 1,
):
    """An untrained PPO with the dropout policy, set up as benchmark.policy.train sets it up
    (its training envs stepped in `workers` processes)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.utils import LinearSchedule, set_random_seed

    from benchmark.policy import DropoutActorCriticPolicy
    from benchmark.policy.train import silent_logger, training_vec_env

    set_random_seed(seed)
    env = training_vec_env(task, seed, n_envs, workers)
    kwargs = dict(policy_cfg.get("ppo") or {})
    if n_steps is not None:
        kwargs["n_steps"] = n_steps
    lr = float(policy_cfg.learning_rate)
    model = PPO(
        DropoutActorCriticPolicy,
        env,
        learning_rate=LinearSchedule(lr, 0.0, 1.0),
        policy_kwargs={"net_arch": list(policy_cfg.net_arch), "dropout": float(policy_cfg.dropout)},
        device="cpu",
        verbose=0,
        **kwargs,
    )
    model.set_logger(silent_logger())
    return model


def sample_observations(task: Any, n: int, steps: int = 5) -> np.ndarray:
    """Observations of `n` validation episodes after a few seeded random steps (varied inputs)."""
    rng = np.random.default_rng(0)
    obs = []
    for seed in range(n):
        ep = task.episode(seed)
        for _ in range(steps):
            if ep.done:
                break
            ep.step(int(rng.integers(len(ep.action_names))))
        obs.append(np.asarray(ep.obs))
    return np.stack(obs)
