"""What a job shows while it runs, and what it found: one progress helper for every long phase
(tuning trials, evaluation episodes, the bench's sections) and the result block at the end.

On a terminal the progress is a rich bar; anywhere else (SLURM logs, CI, a pipe) it is a plain
line at a bounded rate: at every tenth of the work or every `interval_s` seconds, whichever
comes first, so `tail -f` on an array task's log shows where it is without flooding it.
`quiet=true` (or `progress=false`) turns all of it off for scripted use."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from benchmark.metrics import MAIN_FIGURE, RATES, cache_hit_share

PLAIN_FRACTION = 0.1  # a plain line at every tenth of the work ...
PLAIN_INTERVAL_S = 30.0  # ... or every 30 s, whichever comes first
WIDTH = 21  # the result block's label column


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class Progress:
    """Progress of `total` units of one phase. `update(done, stats)` may be called as often as
    wanted; output is rate-limited. Use as a context manager (closes the bar / prints the last
    line)."""

    def __init__(
        self,
        what: str,
        total: int,
        unit: str,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        interval_s: float = PLAIN_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what, self.total, self.unit = what, max(int(total), 1), unit
        self.enabled, self.stream = enabled, stream or sys.stdout
        self.interval_s, self.clock = interval_s, clock
        self.start = self.last_line = clock()
        self.done, self.stats = 0, ""
        self.next_fraction = PLAIN_FRACTION
        self.lines = 0
        self._bar = None
        if enabled and self.stream.isatty():
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[stats]}"),
            )
            self._bar.start()
            self._task = self._bar.add_task(what, total=self.total, stats="")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def eta(self) -> float | None:
        elapsed = self.clock() - self.start
        if self.done <= 0:
            return None
        return elapsed / self.done * (self.total - self.done)

    def update(self, done: int, stats: str = "") -> None:
        self.done, self.stats = int(done), stats
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, stats=stats)
            return
        now = self.clock()
        fraction = self.done / self.total
        if fraction >= self.next_fraction or now - self.last_line >= self.interval_s:
            while self.next_fraction <= fraction:
                self.next_fraction += PLAIN_FRACTION
            self._line(now)

    def _line(self, now: float) -> None:
        eta = self.eta()
        parts = [
            f"{self.what}: {self.done}/{self.total} {self.unit}",
            f"{100 * self.done / self.total:.0f}%",
            f"{_duration(now - self.start)} elapsed",
        ]
        if eta is not None and self.done < self.total:
            parts.append(f"ETA {_duration(eta)}")
        if self.stats:
            parts.append(self.stats)
        print(" | ".join(parts), file=self.stream, flush=True)
        self.last_line, self.lines = now, self.lines + 1

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self.enabled and self.done >= self.total and self.last_line < self.clock():
            if self.next_fraction <= 1.0 + 1e-9:  # the last tenth has not been printed yet
                self._line(self.clock())


class EvaluationProgress(Progress):
    """Episodes finished of n, decisions/s, consultant queries so far, running IR."""

    def __init__(self, n_episodes: int, what: str = "evaluation", **kw: Any) -> None:
        super().__init__(what, n_episodes, "episodes", **kw)
        self.decisions = self.queries = self.finished = 0

    def step(self, decisions: int, queries: int) -> None:
        """One lockstep step: `decisions` live episodes decided, `queries` of them asked."""
        self.decisions += decisions
        self.queries += queries
        self.update(self.finished, self._stats())

    def episode(self, row: dict) -> None:
        self.finished += 1
        self.update(self.finished, self._stats())

    def _stats(self) -> str:
        elapsed = max(self.clock() - self.start, 1e-9)
        ir = self.queries / self.decisions if self.decisions else 0.0
        return f"{self.decisions / elapsed:.1f} decisions/s | {self.queries} queries | IR {ir:.3f}"


def result_block(summary: dict, files: dict[str, str]) -> str:
    """The end of a job: the cell, its metrics with 95% CIs, tau and where it came from, time,
    consultant cost, cache hits, and where the result files are."""
    metric = summary.get("metric") or "success"
    lines = [f"cell {summary.get('cell')}  ({summary.get('cell_hash')})"]
    for name in ("reward", metric, *RATES):
        key = MAIN_FIGURE.get(name, name)  # the figure the report's main tables show
        mean = summary.get(key if key.endswith("_pooled") else f"{key}_mean")
        if mean is None:
            continue
        low, high = summary.get(f"{key}_ci95_low", mean), summary.get(f"{key}_ci95_high", mean)
        lines.append(f"  {key:<{WIDTH}}{mean:.3f}  [{low:.3f}, {high:.3f}]")
    tau = summary.get("tau")
    if tau is not None:
        source = (
            f"shared study of {summary['tau_from']}"
            if summary.get("tau_from")
            else "tuned on validation seeds"
            if summary.get("seeds_touched", {}).get("tuning")
            else "fixed"
        )
        lines.append(f"  {'tau':<{WIDTH}}{tau:.4g} ({source})")
    lines.append(
        f"  {'episodes':<{WIDTH}}{summary.get('n_episodes')} on {summary.get('split')} seeds, "
        f"wall {_duration(summary.get('wall_seconds', 0.0))}"
    )
    queries = int(summary.get("queries_total", 0))
    if queries:
        share = cache_hit_share(summary)
        hits = f", cache hits {share:.0%}" if share is not None else ""
        lines.append(
            f"  {'consultant':<{WIDTH}}{queries} queries, {int(summary.get('prompt_tokens_total', 0))} prompt"
            f" + {int(summary.get('generated_tokens_total', 0))} generated tokens, "
            f"{summary.get('consultant_seconds_total', 0.0):.1f} s{hits}"
        )
    for name, path in files.items():
        lines.append(f"  {name:<{WIDTH}}{path}")
    return "\n".join(lines)


def result_line(summary: dict) -> str:
    """One line per finished cell in a multirun."""
    metric = summary.get("metric") or "success"
    parts = [f"done {summary.get('cell')}"]
    for name in ("reward", metric, "ir"):
        if summary.get(f"{name}_mean") is not None:
            parts.append(f"{name} {summary[f'{name}_mean']:.3f}")
    return " | ".join(parts)
