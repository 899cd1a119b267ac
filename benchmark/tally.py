"""How a sweep went, said at its end: cells completed, reused and failed (each failed cell's
overrides and the first line of its error), jobs that never finished, and where the report goes.
Read from the job dirs (summary.json, reused.json, error.json), so a SLURM sweep, whose jobs ran
elsewhere, is tallied the same way once its jobs end. `python -m benchmark ... -m` exits 1 when a
cell failed, so `sbatch --dependency=afterok` and CI can trust it; the Hydra callback's
`fail_on_error=false` (`hydra.callbacks.tally.fail_on_error=false`) keeps exit 0."""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from benchmark import results

log = logging.getLogger("benchmark.tally")


@dataclass
class Tally:
    sweep_dir: Path
    jobs: int = 0
    completed: list[str] = field(default_factory=list)  # job numbers
    reused: list[str] = field(default_factory=list)
    failed: list[tuple[str, str, str]] = field(default_factory=list)  # (job, overrides, error)
    unfinished: list[tuple[str, str]] = field(default_factory=list)  # (job, overrides)
    fail_on_error: bool = True

    @property
    def ok(self) -> bool:
        return not (self.failed or self.unfinished)

    def lines(self) -> list[str]:
        head = (
            f"sweep {self.sweep_dir}: {self.jobs} jobs: {len(self.completed)} completed, "
            f"{len(self.reused)} reused, {len(self.failed)} failed"
        )
        if self.unfinished:
            head += f", {len(self.unfinished)} not finished"
        out = [head]
        out += [
            f"  failed job {job}: {overrides}\n    {error}" for job, overrides, error in self.failed
        ]
        out += [f"  not finished job {job}: {overrides}" for job, overrides in self.unfinished]
        command = f"python -m benchmark.report {shlex.quote(str(self.sweep_dir))}"
        out.append(f"report: {command}   # -> {self.report_dir}")
        return out

    @property
    def report_dir(self) -> Path:
        return self.sweep_dir / "report"


def _overrides(job_dir: Path, expected: list[list[str]]) -> str:
    saved = job_dir / ".hydra" / "overrides.yaml"
    if saved.is_file():
        return " ".join(str(o) for o in OmegaConf.load(saved))
    number = int(job_dir.name)
    return " ".join(expected[number]) if number < len(expected) else "?"


def _first_line(error: dict) -> str:
    """The first line of the cell's error: its cause (job.root_cause) when recorded."""
    error = error.get("cause") or error
    message = str(error.get("message") or "").strip().splitlines()
    return f"{error.get('type', 'Error')}: {message[0] if message else ''}".rstrip(": ")


def tally(sweep_dir: Path, config: DictConfig | None = None) -> Tally:
    """The tally of the job dirs under `sweep_dir`; `config` (the sweep's, with its hydra node)
    also names the jobs that never wrote a dir."""
    from benchmark.config import expand_sweep

    sweep_dir = Path(sweep_dir)
    expected: list[list[str]] = []
    if config is not None:
        try:
            expected = expand_sweep(config)
        except Exception as exc:  # noqa: BLE001 - the job dirs on disk still tally
            log.info("cannot expand the sweep (%s): tallying its job dirs only", exc)
    dirs = (
        {p.name: p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()}
        if sweep_dir.is_dir()
        else {}
    )
    numbers = sorted(set(dirs) | {str(i) for i in range(len(expected))}, key=int)
    out = Tally(sweep_dir, jobs=len(numbers))
    for number in numbers:
        d = dirs.get(number, sweep_dir / number)
        error = results.read_json(d / "error.json")
        if isinstance(error, dict):
            out.failed.append((number, _overrides(d, expected), _first_line(error)))
        elif (d / "summary.json").is_file():
            (out.reused if (d / "reused.json").is_file() else out.completed).append(number)
        else:
            out.unfinished.append((number, _overrides(d, expected)))
    return out


LAST: Tally | None = None  # the tally of the multirun that just ended in this process
STARTED: tuple[Path, DictConfig, bool] | None = None  # the multirun running in this process


def exit_code() -> int:
    """1 when the last multirun had a failed or unfinished cell and fails on error, else 0."""
    return 1 if LAST is not None and LAST.fail_on_error and not LAST.ok else 0


class TallyOnMultirunEnd(Callback):
    """Hydra callback (conf/hydra/default.yaml): print the sweep's tally when the multirun ends
    (for SLURM: after the launcher has waited for every job)."""

    def __init__(self, fail_on_error: bool = True) -> None:
        self.fail_on_error = bool(fail_on_error)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global STARTED
        STARTED = (Path(str(config.hydra.sweep.dir)), config, self.fail_on_error)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        say(Path(str(config.hydra.sweep.dir)), config, self.fail_on_error)


def say(sweep_dir: Path, config: DictConfig | None, fail_on_error: bool) -> None:
    """Tally the sweep, keep it as LAST and print it."""
    global LAST
    try:
        LAST = tally(sweep_dir, config)
    except Exception as exc:  # noqa: BLE001 - the sweep's results stand without a tally
        log.error("no tally: %s: %s", type(exc).__name__, exc)
        return
    LAST.fail_on_error = fail_on_error
    print("\n".join(LAST.lines()), flush=True)


def after_abort() -> None:
    """A multirun that raised before its end (a launcher whose job was cancelled or killed, as
    submitit's on SLURM): tally what its job dirs hold, once."""
    if LAST is None and STARTED is not None:
        say(*STARTED)
