"""CPU bench sections on the machine's resources: threads (tiny-model generation with 1 torch
thread vs the default thread count) and memory (peak RSS, RSS during the lockstep evaluation, the
response cache's cap and size)."""

from __future__ import annotations

from typing import Any

import torch

from benchmark.bench.common import GIB, peak_rss_bytes, time_interleaved
from benchmark.bench.cpu_settings import TARGETS
from benchmark.consultants.cache_store import cache_cap
from benchmark.store import Store


class MachineSections:
    """The threads and memory sections of CpuBench (a mixin; the host (CpuBench) provides `cfg`, `check`, `sizes`, `within` and the state the sections share)."""

    # -------------------------------------------------------------------------------- threads
    def section_threads(self) -> dict[str, Any]:
        """The tiny model's batched generation with 1 torch thread vs torch's default count:
        on a shared machine, OpenMP threads that wait for each other are the main slowdown."""
        from benchmark.build import build_prompt, prepare
        from benchmark.consultants import make_consultant

        cfg = self.cfg(*self.eval_overrides(), "slm.cache=false")
        task = prepare(cfg)[0]
        prompt = build_prompt(cfg, task)
        queries = []
        for seed in range(8):
            consultation = prompt.session(task.episode(seed), False).consult(0)
            queries += next(consultation)
        consultant = make_consultant(cfg.slm, cfg.paths)
        old = torch.get_num_threads()
        counts = sorted({1, self.default_threads})

        def with_threads(k: int):
            def fn():
                torch.set_num_threads(k)
                try:
                    consultant.answer(queries)
                finally:
                    torch.set_num_threads(old)

            return fn

        try:
            timings = time_interleaved(
                {f"{k}_threads": with_threads(k) for k in counts}, repeats=self.sizes.thread_repeats
            )
        finally:
            consultant.close()
        s = "threads"
        one = timings["1_threads"]["median_s"]
        default = timings[f"{self.default_threads}_threads"]["median_s"]
        self.check(
            s, f"1 thread vs default {self.default_threads} (tiny LM batch of 8)", default / one
        )
        self.check(s, "tiny LM, 8 prompts, 1 thread", one, "s")
        return {
            "params": {
                "batch": len(queries),
                "prompt": "basic",
                "env": "fourrooms",
                "default_threads": self.default_threads,
                "repeats": self.sizes.thread_repeats,
            },
            "timings": timings,
        }

    # -------------------------------------------------------------------------------- 5. memory
    def section_memory(self) -> dict[str, Any]:
        cfg = self.cfg("slm=tiny")
        # The kernel updates ru_maxrss lazily (per-thread RSS counters are folded in late), so a
        # sampled current RSS can exceed it by a few pages: the peak is the larger of the two.
        peak = max(peak_rss_bytes(), self.eval_rss or 0)
        s = "memory"
        data: dict[str, Any] = {
            "peak_rss_bytes": peak,
            "cache_max_entries": cache_cap(Store.of(cfg.paths).responses_dir()),
        }
        if self.eval_rss is not None:
            data["eval_lockstep_rss_bytes"] = self.eval_rss
            ep = self.sections.get("evaluation", {}).get("params", {}).get("episodes")
            self.check(
                s,
                f"RSS during lockstep eval ({ep} episodes)",
                self.eval_rss / GIB,
                "GiB",
                target=TARGETS["memory_gib"],
                cmp="<",
            )
        self.check(s, "peak RSS of the bench process", peak / GIB, "GiB")
        self.check(s, "response cache cap (rows)", data["cache_max_entries"], "rows")
        tuning = self.sections.get("tuning", {}).get("with_cache")
        if tuning:
            data["cache_rows_after_tuning"] = tuning["cache_rows"]
            data["cache_bytes_after_tuning"] = tuning["cache_bytes"]
            per_row = tuning["cache_row_bytes_estimate"]
            data["cache_row_bytes_estimate"] = per_row
            data["cache_bytes_at_cap_estimate"] = per_row * data["cache_max_entries"]
            self.check(
                s,
                "response cache at cap (estimate)",
                data["cache_bytes_at_cap_estimate"] / (1 << 20),
                "MiB",
            )
        return data
