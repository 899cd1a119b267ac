"""Shared pieces of the benchmark: repeated timing, checks with targets, the printed table, the
JSON file, RSS sampling and config composition.

Why medians and ratios: the machine is shared and noisy, so absolute times move between runs;
two paths timed side by side in one process, interleaved, give ratios that hold still."""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

GIB = 1 << 30


@dataclass
class Check:
    """One measured quantity with its target: `value cmp target` must hold to PASS; a check with
    no target is informational. `limit`: the physical bound of the value (a share of a rate that
    cannot be exceeded); a value above it is a measurement ERROR (too short a measurement, fixed
    costs counted in one rate and not the other), never a PASS."""

    section: str
    name: str
    value: float
    unit: str = "x"
    target: float | None = None
    cmp: str = ">="  # ">=", "<=" or "<"
    limit: float | None = None

    @property
    def impossible(self) -> bool:
        return self.limit is not None and self.value > float(self.limit)

    @property
    def passed(self) -> bool | None:
        if self.impossible:
            return False
        if self.target is None:
            return None
        compare = {">=": float.__ge__, "<=": float.__le__, "<": float.__lt__}[self.cmp]
        return compare(self.value, float(self.target))

    @property
    def status(self) -> str:
        if self.impossible:
            return "ERROR"
        return {True: "PASS", False: "MISS", None: "info"}[self.passed]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "pass": self.passed, "status": self.status}


def time_interleaved(fns: dict[str, Callable[[], Any]], repeats: int, warmup: int = 1) -> dict:
    """Median seconds per call of each function, timed round-robin so drifting machine load hits
    every path alike. Returns {name: {"median_s", "min_s", "times_s"}}."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {k: summarize_times(v) for k, v in times.items()}


def summarize_times(times: list[float]) -> dict[str, Any]:
    return {"median_s": statistics.median(times), "min_s": min(times), "times_s": times}


def run_rates(rows: list[dict], wall: float) -> dict[str, float]:
    """An evaluation run's decisions and queries, per second of `wall` and as IR: the rates the
    CPU and GPU benchmarks both report for a run of episode rows."""
    decisions = sum(r["length"] for r in rows)
    queries = sum(r["queries"] for r in rows)
    return {
        "wall_s": wall,
        "decisions": decisions,
        "queries": queries,
        "decisions_per_s": decisions / wall,
        "queries_per_s": queries / wall,
        "ir": queries / max(1, decisions),
    }


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def current_rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return peak_rss_bytes()


class RssSampler:
    """Samples this process's RSS in a background thread while a block runs (max and mean)."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(current_rss_bytes())
            self._stop.wait(self.interval_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(current_rss_bytes())

    @property
    def max_bytes(self) -> int:
        return max(self.samples) if self.samples else 0


def machine_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    try:
        info["loadavg"] = list(os.getloadavg())
    except OSError:
        info["loadavg"] = None
    return info


def compose(root: Path, *overrides: str) -> Any:
    """The job config exactly as `python -m benchmark <overrides>` composes it, under `root`."""
    from benchmark import config

    return config.compose([f"paths.root={root}", "tracking=none", *overrides])


def default_root() -> Path:
    """`paths.root` as a job resolves it ($BENCHMARK_ROOT, else ./outputs): asked of the config."""
    from benchmark import config

    return Path(str(config.compose(["tracking=none"]).paths.root))


def format_table(checks: list[Check]) -> str:
    """Plain-text table: section, metric, value, target, status."""
    head = ("section", "metric", "value", "target", "status")
    rows = [head]
    for c in checks:
        value = (
            f"{c.value:,.3g} {c.unit}".strip()
            if abs(c.value) < 1000
            else f"{c.value:,.0f} {c.unit}"
        )
        target = "-" if c.target is None else f"{c.cmp} {c.target:g} {c.unit}".strip()
        if c.limit is not None:
            target += f" (<= {c.limit:g}: limit)"
        rows.append((c.section, c.name, value, target, c.status))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_report(bench_dir: Path, data: dict[str, Any], suffix: str = "") -> Path:
    """`<paths.bench>/<timestamp><suffix>.json`, written atomically."""
    from benchmark.store import write_json_atomic

    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = Path(bench_dir) / f"{stamp}{suffix}.json"
    n = 1
    while path.exists():
        path = Path(bench_dir) / f"{stamp}{suffix}-{n}.json"
        n += 1
    write_json_atomic(path, data)
    return path


def jsonable(obj: Any) -> Any:
    """Round-trip through JSON (numpy scalars and paths become plain values)."""
    return json.loads(json.dumps(obj, default=_default))


def _default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


class BudgetExceeded(RuntimeError):
    """The run's time budget ran out; the message names the section that was running."""


class Deadline:
    """A wall-clock budget that stops the run: SIGALRM fires when `seconds` are spent and raises
    BudgetExceeded naming the section that was running (`section(name)` sets it and prints a
    progress line with the seconds left). Python code is interrupted at once; a long native call
    (one CUDA kernel, one matmul) first returns. Main thread only (signals)."""

    def __init__(self, seconds: float, what: str = "benchmark") -> None:
        if not seconds > 0:
            raise ValueError(f"the time budget must be > 0 seconds, got {seconds}")
        self.seconds, self.what, self.current = float(seconds), what, "start"
        self._start = time.perf_counter()
        self._previous: Any = None

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self._start)

    def section(self, name: str) -> None:
        self.current = name
        print(f"{self.what}: {name} ({self.left():.0f} s of {self.seconds:.0f} s left)", flush=True)

    def _expired(self, *_: object) -> None:
        raise BudgetExceeded(
            f"{self.what}: the time budget of {self.seconds:.0f} s ran out in section "
            f"{self.current!r}, after {time.perf_counter() - self._start:.0f} s"
        )

    def __enter__(self) -> Deadline:
        import signal

        self._start = time.perf_counter()
        self._previous = signal.signal(signal.SIGALRM, self._expired)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, _type: object, exc: BaseException | None, _tb: object) -> None:
        import signal

        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._previous or signal.SIG_DFL)
        # the alarm can fire inside a library that wraps what it catches (transformers' lazy
        # import turns it into a ModuleNotFoundError): the budget is still what stopped the run
        cause = budget_cause(exc)
        if cause is not None and cause is not exc:
            raise cause


def budget_cause(exc: BaseException | None) -> BudgetExceeded | None:
    """The BudgetExceeded `exc` is or was raised from (its __cause__ / __context__ chain)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, BudgetExceeded):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


EXIT_NO_CUDA, EXIT_BUDGET = 2, 3  # the GPU runs' exit codes: no CUDA device, time budget spent


def cuda_missing(device: str, kind: str, instead: str) -> bool:
    """Whether `device` asks for CUDA and torch has none; then one line names the run `kind` and
    says what to run `instead`, on stderr."""
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        print(
            f"benchmark.bench {kind}: no CUDA device is available (torch.cuda.is_available() is "
            f"False). {instead}",
            file=sys.stderr,
        )
        return True
    return False


def within_budget(
    seconds: float, what: str, data: dict[str, Any], body: Callable[[Deadline], int]
) -> int:
    """`body(clock)` under a Deadline of `seconds`; its exit code, or EXIT_BUDGET when the budget
    ran out (recorded in `data["budget_exceeded"]`: what was measured so far is in the JSON)."""
    try:
        with Deadline(seconds, what) as clock:
            return body(clock)
    except BudgetExceeded as exc:
        data["budget_exceeded"] = str(exc)
        print(f"{exc}; what was measured so far is in the JSON", file=sys.stderr)
        return EXIT_BUDGET


def timed_within_budget(
    seconds: float,
    what: str,
    data: dict[str, Any],
    body: Callable[[Deadline], int],
    checks: list[Check],
    label: str,
) -> tuple[int, float]:
    """`within_budget`, timed: (exit code, wall seconds), the wall time recorded in
    `data["wall_seconds"]` and checked against the budget as the check `label`, so that a GPU
    run that overran says so in its table as well as in its exit code."""
    started = time.perf_counter()
    code = within_budget(seconds, what, data, body)
    wall = time.perf_counter() - started
    data["wall_seconds"] = wall
    checks.append(Check("budget", label, wall, "s", target=seconds, cmp="<"))
    return code, wall


def report_checks(root: Path, data: dict[str, Any], checks: list[Check], suffix: str) -> Path:
    """A GPU run's record: its checks as `data["table"]`, the JSON under the config's
    paths.bench (`write_report`), the table printed; the JSON's path."""
    data["table"] = [c.to_dict() for c in checks]
    path = write_report(Path(str(compose(root).paths.bench)), jsonable(data), suffix=suffix)
    print(format_table(checks))
    return path
