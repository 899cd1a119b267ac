"""`pytest --measured-page NAME`: the run's own times written as docs/measured/NAME.md.

How long the suite takes is a figure docs/development.md quotes; it is trusted only when the run
that took that long wrote it (benchmark.measured), with the cases counted by outcome, the
workers, the wall time and the slowest tests. `make test-times` writes `tests` (everything, as
CI runs it) and `tests-fast` (the fast suite)."""

from __future__ import annotations

import shlex
import time
from collections import Counter

import pytest

SLOWEST = 15  # tests listed by duration on the page


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--measured-page",
        metavar="NAME",
        default=None,
        help="write this run's counts and times to docs/measured/NAME.md (benchmark.measured)",
    )


class Timer:
    """Counts each test's outcome and keeps its duration, on the process that reports (the
    xdist controller, or the one process with -n 0)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.started = time.monotonic()
        self.outcomes: Counter[str] = Counter()
        self.durations: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + report.duration
        if hasattr(report, "wasxfail"):
            if report.when == "call" or report.skipped:
                self.outcomes["xfailed" if report.skipped else "xpassed"] += 1
        elif report.failed:
            self.outcomes["failed" if report.when == "call" else "errors"] += 1
        elif report.skipped:
            self.outcomes["skipped"] += 1
        elif report.when == "call":
            self.outcomes["passed"] += 1

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from benchmark.measured import write_page

        config = session.config
        seconds = time.monotonic() - self.started
        workers = getattr(config.option, "numprocesses", None) or 0
        counts = ", ".join(f"{n} {what}" for what, n in sorted(self.outcomes.items()))
        slowest = sorted(self.durations.items(), key=lambda kv: -kv[1])[:SLOWEST]
        lines = [
            f"- selection: `-m {config.option.markexpr!r}`" if config.option.markexpr else "",
            f"- cases: {counts or 'none'}",
            f"- worker processes: {workers or 1}",
            f"- wall time: {int(seconds // 60)} min {int(seconds % 60)} s",
            "",
            f"The {len(slowest)} slowest tests (setup, call and teardown together):",
            "",
            "| seconds | test |",
            "|---:|---|",
            *(f"| {d:.1f} | `{nodeid}` |" for nodeid, d in slowest),
        ]
        command = shlex.join(["python", "-m", "pytest", *config.invocation_params.args])
        write_page(self.name, "Measured: the test suite's times", "\n".join(lines), command)


def pytest_configure(config: pytest.Config) -> None:
    name = config.getoption("--measured-page")
    if name and not hasattr(config, "workerinput"):  # the controller only, never an xdist worker
        from benchmark.measured import NAME

        if not NAME.fullmatch(name):
            raise pytest.UsageError(
                f"--measured-page {name!r}: use lower-case letters, digits and '-'"
            )
        config.pluginmanager.register(Timer(name), "measured-times")
