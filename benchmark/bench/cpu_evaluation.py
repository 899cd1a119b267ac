"""CPU bench section `evaluation`: ASK with the tiny model, lockstep vs sequential, with identical
per-episode results; and the timed evaluation runs the ir1 section takes too (`timed_run`), on a
tau calibrated to a target interaction rate (`calibrate_tau`)."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from benchmark.bench.common import RssSampler, run_rates
from benchmark.bench.cpu_settings import TARGETS


class EvaluationSection:
    """The evaluation section of CpuBench (a mixin; the host (CpuBench) provides `cfg`, `check`, `sizes`, `within` and the state the sections share)."""

    # -------------------------------------------------------------------------------- 2. evaluation
    def eval_overrides(self) -> list[str]:
        return [
            "env=fourrooms",
            f"env.task.max_steps={self.sizes.eval_max_steps}",
            "slm=tiny",
            "prompt=basic",
            "gate=entropy",
            "gate.tau=1.0",
        ]

    def section_evaluation(self) -> dict[str, Any]:
        from benchmark.build import build, prepare

        z = self.sizes
        cfg = self.cfg(
            *self.eval_overrides(), "slm.cache=false", f"eval.n_episodes={z.eval_episodes}"
        )
        prepared = prepare(cfg)
        policy = self._policy(cfg, prepared[0])
        n = int(cfg.gate.mc_samples)
        tau, entropies = calibrate_tau(
            policy, prepared[0], z.eval_episodes, z.eval_max_steps, n, z.target_ir
        )
        evaluation = build(cfg, prepared=prepared, policy=policy)
        try:
            seeds = evaluation.test_seeds()
            runs: dict[str, list[dict]] = {"lockstep": [], "sequential": []}
            outcomes: dict[str, list] = {"lockstep": [], "sequential": []}
            prefill: dict[str, list[dict]] = {"lockstep": [], "sequential": []}
            for _ in range(z.eval_repeats):
                for mode in ("lockstep", "sequential"):
                    sampler = RssSampler()
                    with sampler:
                        run = timed_run(evaluation, seeds, mode, tau)
                    if mode == "lockstep":
                        self.eval_rss = max(self.eval_rss or 0, sampler.max_bytes)
                    runs[mode].append(run.stats)
                    outcomes[mode].append(run.outcome)
                    if run.prefill is not None:
                        prefill[mode].append(run.prefill)
        finally:
            evaluation.close()
        med = {m: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for m, rs in runs.items()}
        identical = all(o == outcomes["lockstep"][0] for m in outcomes for o in outcomes[m])
        lock, seq = med["lockstep"], med["sequential"]
        s = "evaluation"
        self.check(
            s,
            "lockstep vs sequential (wall time, prefix reuse on in both)",
            seq["wall_s"] / lock["wall_s"],
            target=TARGETS["evaluation"],
        )
        self.check(s, "identical per-episode results", float(identical), "", target=1.0)
        self.check(s, "lockstep decisions/s", lock["decisions_per_s"], "1/s")
        self.check(s, "sequential decisions/s", seq["decisions_per_s"], "1/s")
        self.check(s, "lockstep LM queries/s", lock["queries_per_s"], "1/s")
        self.check(s, "sequential LM queries/s", seq["queries_per_s"], "1/s")
        self.check(s, "interaction rate (IR)", lock["ir"], "")
        prefill_med = {
            m: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            for m, rs in prefill.items()
            if rs
        }
        for mode, p in prefill_med.items():  # informational: prompt positions computed in prefill
            self.check(s, f"prefill tokens, prefix reuse ({mode})", p["prefill_tokens"], "tokens")
            self.check(
                s, f"prefill tokens, no reuse ({mode})", p["prefill_tokens_without_reuse"], "tokens"
            )
        return {
            "params": {
                "env": "fourrooms",
                "max_steps": z.eval_max_steps,
                "episodes": len(seeds),
                "split": str(cfg.eval.split),
                "slm": "tiny",
                "prompt": "basic",
                "cache": False,
                "prefix_cache": int(cfg.slm.backend.get("prefix_cache", 0)),  # the same in both
                "mc_samples": n,
                "tau": tau,
                "target_ir": z.target_ir,
                "repeats": z.eval_repeats,
                "torch_threads": torch.get_num_threads(),
                "policy": f"PPO short-trained for {z.train_steps} steps (not converged)",
            },
            "tau_calibration": entropies,
            "median": med,
            "runs": runs,
            "identical": identical,
            "prefill": prefill_med,  # hf backend: prefill tokens with and without prefix reuse
        }


def ppo_entropies(
    policy: Any, task: Any, n_episodes: int, max_steps: int, n_samples: int
) -> np.ndarray:
    """The MC-dropout total entropy (bits) at every step of PPO-only trajectories of the first
    `n_episodes` VALIDATION seeds (never a test seed), `max_steps` at most."""
    from benchmark.evaluate import deterministic_actions
    from benchmark.seeds import DEFAULT_SPLITS
    from benchmark.uncertainty import mc_dropout

    episodes = [task.episode(s) for s in DEFAULT_SPLITS.seeds("validation", n_episodes)]
    obs = []
    for _ in range(max_steps):
        live = [e for e in episodes if not e.done]
        if not live:
            break
        batch = np.stack([np.asarray(e.obs) for e in live])
        obs.append(batch)
        for e, a in zip(live, deterministic_actions(policy, batch).tolist(), strict=True):
            e.step(int(a))
    return mc_dropout(
        policy, np.concatenate(obs), n_samples, torch.Generator().manual_seed(0)
    ).total


def calibrate_tau(
    policy: Any, task: Any, n_episodes: int, max_steps: int, n_samples: int, target_ir: float
) -> tuple[float, dict[str, Any]]:
    """tau = the (1 - target IR) quantile of the total entropy along PPO-only trajectories of the
    VALIDATION seeds (`ppo_entropies`), so the entropy gate asks on about `target_ir` of steps."""
    total = ppo_entropies(policy, task, n_episodes, max_steps, n_samples)
    tau = float(np.quantile(total, 1.0 - target_ir))
    return tau, {
        "n_observations": int(total.size),
        "quantile": 1.0 - target_ir,
        "tau": tau,
        "entropy_bits": {q: float(np.quantile(total, q)) for q in (0.0, 0.25, 0.5, 0.75, 1.0)},
        "max_entropy_bits": math.log2(len(task.action_names)),
    }


def every(total: int, report: Any, share: float = 0.2) -> Any:
    """A step counter: `report(fraction done, steps/s)` at every `share` of `total` steps, so a
    long run shows a few progress lines."""
    t0, state = time.perf_counter(), {"n": 0, "next": share}

    def tick() -> None:
        state["n"] += 1
        fraction = state["n"] / max(1, total)
        if fraction >= state["next"]:
            state["next"] += share
            report(fraction, state["n"] / max(time.perf_counter() - t0, 1e-9))

    return tick


@dataclass
class TimedRun:
    """One timed evaluation: speed figures, the deterministic episode rows, the consultant's
    prefill counts over the run (None for a backend without them) and, when recorded, every
    episode's (action, PPO action, consultant's action) per step."""

    stats: dict[str, float]
    outcome: list[dict]
    prefill: dict[str, int] | None
    actions: dict[int, list[tuple]] | None = None

    def summary(self) -> dict[str, Any]:
        return {"stats": self.stats, "prefill": self.prefill, "episodes": self.outcome}


def timed_run(
    evaluation: Any,
    seeds: list[int],
    mode: str,
    tau: float,
    record: bool = False,
    tick: Any = None,
) -> TimedRun:
    """`evaluation`'s episodes on `seeds` in `mode` with the gate's tau set to `tau`, timed;
    `record`: keep every step's actions; `tick()`: called at every step of every episode."""
    from benchmark import results

    counts = getattr(evaluation.consultant, "prefill_stats", None)  # hf backend only
    before = counts() if counts else {}
    actions: dict[int, list[tuple]] | None = {s: [] for s in seeds} if record else None

    def on_step(event: Any) -> None:
        if actions is not None:
            consulted = event.decision.action if event.decision is not None else None
            actions[event.episode.seed].append((event.action, event.ppo_action, consulted))
        if tick is not None:
            tick()

    evaluator = evaluation.evaluator(tau=tau)
    t0 = time.perf_counter()
    rows = evaluator.run(seeds, mode=mode, on_step=on_step if record or tick else None)
    wall = time.perf_counter() - t0
    prefill = {k: v - before[k] for k, v in counts().items()} if counts else None
    return TimedRun(_run_stats(rows, wall), results.split_runtime(rows)[0], prefill, actions)


def query_split(run: TimedRun) -> dict[str, float] | None:
    """A path's consultant time per query split into prefill, decode (scoring the choices or
    the lean greedy loop) and overhead (the rest: templating, tokenizing, batching, parsing;
    generate()'s own machinery when it ran), in ms; None when the backend timed no part of it
    (every answer through generate(): its prefill and decode are not separable)."""
    p = run.prefill or {}
    queries = max(1, run.stats["queries"])
    prefill, decode = p.get("prefill_seconds", 0.0), p.get("decode_seconds", 0.0)
    if not prefill and not decode:
        return None
    total = run.stats["consultant_ms_per_query"]
    out = {"prefill": 1e3 * prefill / queries, "decode": 1e3 * decode / queries}
    out["overhead"] = total - out["prefill"] - out["decode"]
    return out


def _run_stats(rows: list[dict], wall: float) -> dict[str, float]:
    rates = run_rates(rows, wall)
    return {
        **rates,
        # the consultant's share of the wall time, per query (its batches' time split over rows)
        "consultant_ms_per_query": 1e3
        * sum(r["consultant_seconds"] for r in rows)
        / max(1, rates["queries"]),
    }
