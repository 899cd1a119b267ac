"""CPU bench section `workers`: one cell's test episodes over 2 worker processes vs 1
(`eval.workers`), at IR 0 (PPO-only) and at IR ~0.35 (the entropy gate asking the oracle), with
identical per-episode results; and IR-0 decisions/s as a share of what the env alone steps per
second on the same worker processes (MiniGrid FourRooms with its observations, no policy)."""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from benchmark.bench.cpu_evaluation import calibrate_tau
from benchmark.bench.cpu_settings import TARGETS


class WorkersSection:
    """The workers section of CpuBench (a mixin; the host provides `cfg`, `check`, `sizes`,
    `_policy` and the short-trained policy the sections share)."""

    def section_workers(self) -> dict[str, Any]:
        from benchmark import results, workers
        from benchmark.build import build, prepare

        z = self.sizes
        base = [
            "env=fourrooms",
            f"env.task.max_steps={z.workers_max_steps}",
            "slm=oracle",
            "prompt=basic",
            f"eval.n_episodes={z.workers_episodes}",
        ]
        ppo_only = self.cfg(*base, "gate=never")
        task = prepare(ppo_only)[0]
        policy = self._policy(ppo_only, task)
        n = 30
        tau, _ = calibrate_tau(policy, task, z.workers_episodes, z.workers_max_steps, n, 0.35)
        gates = {
            "IR 0": ["gate=never"],
            "IR 0.35": ["gate=entropy", f"gate.tau={tau}", f"gate.mc_samples={n}"],
        }
        out: dict[str, Any] = {"params": {"episodes": z.workers_episodes, "tau": tau}}
        s = "workers"
        for label, gate in gates.items():
            cfg = self.cfg(*base, *gate)
            evaluation = build(cfg, policy=policy)
            evaluator, seeds = evaluation.evaluator(), evaluation.test_seeds()
            walls: dict[int, list[float]] = {1: [], 2: []}
            rows: dict[int, list[dict]] = {}
            for _ in range(z.workers_repeats):
                for k in (1, 2):
                    t0 = time.perf_counter()
                    got = workers.run(evaluator, seeds, k)
                    walls[k].append(time.perf_counter() - t0)
                    rows[k] = results.split_runtime(got)[0]
            one, two = statistics.median(walls[1]), statistics.median(walls[2])
            decisions = sum(r["length"] for r in rows[1])
            ir = sum(r["queries"] for r in rows[1]) / max(1, decisions)
            self.check(s, f"2 workers vs 1, {label} (wall time)", one / two, target=TARGETS[s])
            same = float(rows[1] == rows[2])
            self.check(s, f"identical per-episode results, {label}", same, "", target=1.0)
            self.check(
                s, f"decisions/s with 2 workers, {label} (IR {ir:.2f})", decisions / two, "1/s"
            )
            out[label] = {"wall_s": {"1": one, "2": two}, "decisions": decisions, "ir": ir}
        env = env_steps_per_s(task, seeds, 2, z.env_rate_seconds)
        share = out["IR 0"]["decisions"] / out["IR 0"]["wall_s"]["2"] / env["steps_per_s"]
        self.check(s, "IR-0 decisions/s as a share of the env's own steps/s (2 processes)", share,
                   "", target=TARGETS["env_share"], limit=1.0)  # fmt: skip
        out["env_steps_per_s"] = env["steps_per_s"]
        out["env_rate"] = env
        return out


def env_steps_per_s(
    task: Any, seeds: list[int], n_workers: int, min_seconds: float
) -> dict[str, Any]:
    """Steps/s of the env alone (observations included, random actions, no policy) on
    `n_workers` forked processes, each stepping its shard of `seeds` as the evaluator would, over
    and over until `min_seconds` have passed. Each process times its own stepping (fork, pipes
    and start-up left out: fixed costs that a short run would divide in, making the env look
    slower than it is and the IR-0 share exceed its limit of 1); the rate is the sum of the
    processes' rates (they run side by side). {"steps_per_s", "steps", "seconds" per process}."""
    from benchmark import workers

    parts = workers.shards(list(seeds), n_workers)
    got = list(workers.forked_map(_step_shard, parts, {"task": task, "min_s": min_seconds}))
    return {
        "steps_per_s": sum(steps / seconds for steps, seconds in got),
        "steps": [steps for steps, _ in got],
        "seconds": [seconds for _, seconds in got],
        "min_seconds": min_seconds,
    }


def _step_shard(seeds: list[int]) -> tuple[int, float]:
    """(steps, seconds) of this process stepping its seeds' episodes to their end, round after
    round until JOB["min_s"] have passed."""
    from benchmark.workers import JOB

    task, steps = JOB["task"], 0
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    while True:
        episodes = [task.episode(s) for s in seeds]
        while live := [e for e in episodes if not e.done]:
            for e in live:
                np.asarray(e.obs)
                e.step(int(rng.integers(len(task.action_names))))
                steps += 1
        seconds = time.perf_counter() - t0
        if seconds >= JOB["min_s"]:
            return steps, seconds
