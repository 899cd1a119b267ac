"""CPU bench section `tuning`: a tau study with and without the response cache (both from an
empty cache), with the cache's hit rate and size after it."""

from __future__ import annotations

import time
from typing import Any

from benchmark.bench.cpu_settings import TARGETS


class TuningSection:
    """The tuning section of CpuBench (a mixin; the host (CpuBench) provides `cfg`, `check`, `sizes`, `within` and the state the sections share)."""

    # -------------------------------------------------------------------------------- 3. tuning
    def section_tuning(self) -> dict[str, Any]:
        from omegaconf import OmegaConf

        from benchmark.build import build, prepare
        from benchmark.consultants import make_consultant

        z = self.sizes
        cfg = self.cfg(
            *self.eval_overrides(),
            "gate.tau=auto",
            f"tuning.n_trials={z.tune_trials}",
            f"tuning.n_episodes={z.tune_episodes}",
        )
        prepared = prepare(cfg)
        policy = self._policy(cfg, prepared[0])
        out: dict[str, Any] = {}
        for cached in (False, True):
            key = "with_cache" if cached else "without_cache"
            slm = OmegaConf.merge(cfg.slm, {"cache": cached})
            paths = OmegaConf.merge(cfg.paths, {"cache": str(self.work / f"cache-{key}")})
            consultant = counting(make_consultant(slm, paths))
            evaluation = build(cfg, prepared=prepared, policy=policy, consultant=consultant)
            try:
                t0 = time.perf_counter()
                tau, trials = evaluation.tune(self.work / f"study-{key}")
                wall = time.perf_counter() - t0
                stats = consultant.stats() if hasattr(consultant, "stats") else None
                entry: dict[str, Any] = {
                    "wall_s": wall,
                    "best_tau": tau,
                    "trials": len(trials),
                    "queries": consultant.queries_seen,
                    "cache": stats,
                    "ir": [t["ir"] for t in trials],
                }
                if stats is not None:
                    asked = stats["hits"] + stats["misses"]
                    entry["hit_rate"] = stats["hits"] / asked if asked else 0.0
                    store = consultant.store
                    store.flush()  # publish the last few seconds' answers before measuring
                    entry["cache_rows"] = len(store)
                    entry["cache_bytes"] = store.disk_bytes()
                    entry["cache_max_entries"] = store.max_entries
                    entry["cache_row_bytes_estimate"] = store.row_bytes_estimate()
                out[key] = entry
            finally:
                evaluation.close()
        low, high = evaluation.tau_range()
        s = "tuning"
        speedup = out["without_cache"]["wall_s"] / out["with_cache"]["wall_s"]
        self.check(
            s, f"with cache vs without ({z.tune_trials} trials)", speedup, target=TARGETS["tuning"]
        )
        self.check(s, "cache hit rate", out["with_cache"]["hit_rate"], "")
        self.check(s, "study without cache", out["without_cache"]["wall_s"], "s")
        self.check(s, "study with cache", out["with_cache"]["wall_s"], "s")
        return {
            "params": {
                "env": "fourrooms",
                "max_steps": z.eval_max_steps,
                "split": "validation",
                "episodes": z.tune_episodes,
                "trials": z.tune_trials,
                "slm": "tiny",
                "prompt": "basic",
                "tau_range": [low, high],
                "repeats": 1,
                "policy": f"PPO short-trained for {z.train_steps} steps",
            },
            **out,
        }


class counting:  # noqa: N801 - reads as a function at the call site
    """A consultant that counts the queries it is asked (the tuning section's cost figure)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.queries_seen = inner, 0

    def answer(self, queries: list) -> list:
        self.queries_seen += len(queries)
        return self.inner.answer(queries)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
