"""CPU benchmark sections, each timing two ways of doing the same work side by side in this process:

gate        batched MC dropout vs the N-pass reference (and the evaluator's per-episode masks)
training    PPO steps/s: the default DummyVecEnv with 4 envs vs a single env
evaluation  ASK with the tiny model: lockstep vs sequential, identical per-episode results
workers     one cell's episodes over 2 worker processes vs 1 at IR 0 and 0.35 (the oracle), and
            IR-0 decisions/s as a share of the env's own steps/s on the same processes
ir1         ASK at IR 1 (every step asks), stateful prompt: the suite's default path (lockstep,
            batched, prefix reuse) and choice scoring vs the naive batch-1 loop (sequential, no
            prefix reuse) and the authors' loop (benchmark.bench.authors); the floor (one
            suffix's prefill) and the best ratio it allows
tuning      a tau study with and without the response cache (both from an empty cache)
threads     tiny-model generation with 1 torch thread vs the default thread count
memory      peak RSS, RSS during the lockstep evaluation, the response cache's cap and size

The policies are built here, untrained (gate) or short-trained by the training section itself
(evaluation, tuning): speed hardly depends on policy quality, and a 2M-step run does not fit.

Each section lives in its own module, a mixin of CpuBench: gate and training in cpu_policy,
evaluation in cpu_evaluation, workers in cpu_workers, ir1 in cpu_ir1, tuning in cpu_tuning, threads and memory in
cpu_machine; the sizes and targets in cpu_settings."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from benchmark.bench.common import Check, compose
from benchmark.bench.cpu_evaluation import EvaluationSection
from benchmark.bench.cpu_ir1 import Ir1Section
from benchmark.bench.cpu_machine import MachineSections
from benchmark.bench.cpu_policy import PolicySections
from benchmark.bench.cpu_settings import SECTIONS, Sizes
from benchmark.bench.cpu_tuning import TuningSection
from benchmark.bench.cpu_workers import WorkersSection


class CpuBench(
    PolicySections, EvaluationSection, WorkersSection, Ir1Section, TuningSection, MachineSections
):
    """Runs the sections in order; later sections reuse what earlier ones built (the
    short-trained fourrooms policy, the tiny model)."""

    def __init__(self, root: Path, work: Path, sizes: Sizes, default_threads: int) -> None:
        self.root, self.work, self.sizes = Path(root), Path(work), sizes
        self.default_threads = default_threads
        self.checks: list[Check] = []
        self.sections: dict[str, dict[str, Any]] = {}
        self.policy = None  # short-trained fourrooms policy (training section)
        self.eval_rss: int | None = None
        self.within: Any = lambda fraction, text: None  # progress inside the running section

    # -------------------------------------------------------------------------------- helpers
    def check(
        self,
        section: str,
        name: str,
        value: float,
        unit: str = "x",
        target: float | None = None,
        cmp: str = ">=",
        limit: float | None = None,
    ) -> Check:
        c = Check(section, name, float(value), unit, target, cmp, limit)
        self.checks.append(c)
        return c

    def cfg(self, *overrides: str) -> Any:
        return compose(self.root, *overrides)

    def run(
        self, sections: tuple[str, ...] = SECTIONS, expected_s: dict[str, float] | None = None
    ) -> dict[str, Any]:
        """`expected_s`: each section's seconds in an earlier run (the time-left estimate weighs
        sections by them; without them every section counts the same)."""
        from benchmark.progress import Progress

        for name in sections:
            if name not in SECTIONS:
                raise ValueError(f"unknown bench section {name!r}; allowed: {list(SECTIONS)}")
        todo = [n for n in SECTIONS if n in sections]  # fixed order: later ones use earlier ones'
        known = expected_s or {}
        timed = bool(todo) and all(known.get(n) for n in todo)
        weight = {n: max(1.0, float(known[n])) if timed else 1.0 for n in todo}
        unit = "s as last timed" if timed else "sections"
        done = 0.0
        with Progress("bench", round(sum(weight.values())), unit, interval_s=0.0) as progress:
            for k, name in enumerate(todo, 1):
                label = f"running {name} ({k}/{len(todo)})"
                progress.update(round(done), label)

                def within(fraction: float, text: str, start=done, share=weight[name], label=label):
                    # floor: the count reaches the section's end only when the section is done
                    done_now = math.floor(start + min(fraction, 1.0) * share)
                    progress.update(min(done_now, round(start + share) - 1), f"{label}: {text}")

                self.within = within  # a long section reports how far it is (a few lines)
                t0 = time.perf_counter()
                data = getattr(self, f"section_{name}")()
                data["seconds"] = time.perf_counter() - t0
                data["checks"] = [c.to_dict() for c in self.checks if c.section == name]
                self.sections[name] = data
                done += weight[name]
            progress.update(progress.total, "all sections done")
        return self.sections
