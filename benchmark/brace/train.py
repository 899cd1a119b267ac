"""Agent-BRACE's trainer as a Hydra job, like `python -m benchmark`:

    python -m benchmark.brace.train env=tw_quest brace.algorithm=ppo [brace.<key>=...] [-m]
    python -m benchmark.brace.train +experiment=brace_tw_train -m      # every trained row, 3 runs

It composes the root config (benchmark.config: conf/brace/ is its `brace` group; `brace=<row>`
picks a row: agent_brace, frozen_belief, direct_rl, react_rl, summary_belief and the appendix
ablations no_state_rewards, no_correctness_tracking, binary_labels, no_task_supervision), sweeps with `-m` through the same
launchers (hydra/launcher=slurm runs each job on SLURM), checks every setting before any work
(benchmark.brace.checks), then runs the pipeline (benchmark.brace.pipeline) into `brace.out`.
A rerun with the same settings finds the complete models and report there and does nothing
again; a half-saved model (a kill) is set aside and made again; a complete model made with
other settings is refused. Each job dir gets the report (summary.json; reused.json when nothing
was left to do; error.json when it failed), so a sweep ends with its tally like the suite's."""

from __future__ import annotations

import logging
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from benchmark.brace.pipeline import brace_prompt, task_for  # noqa: F401 - the trainer's names
from benchmark.config import CONF

log = logging.getLogger("benchmark.brace.train")


def check(cfg: DictConfig, overrides: list[str]) -> tuple[Any, list[str] | None]:
    """(the checked settings, ask mode's job overrides): every bad value raises SettingsError
    naming its key, before anything is made."""
    from benchmark.brace import checks, pipeline
    from benchmark.store import Store

    s = checks.check(cfg)
    try:
        job = pipeline.ask_job(s, overrides)
    except Exception as err:  # noqa: BLE001 - Hydra's or validation's message, named
        raise checks.SettingsError(f"brace.mode=ask: its job ({overrides}): {err}") from err
    pipeline.check_models(s, job, Store.of(cfg.paths).digests_dir())
    return s, job


def run_job(cfg: DictConfig, job_dir: Path, overrides: list[str], multirun: bool) -> dict | None:
    """One trainer job: check, skip when done, else train and measure; the report goes to
    brace.out and the job dir. In a multirun a failure is recorded (error.json) and the sweep
    carries on; alone, a refused setting exits with its message."""
    from benchmark import results
    from benchmark.brace import pipeline
    from benchmark.brace.checks import SettingsError
    from benchmark.store import Store

    job_dir = Path(job_dir)
    store = Store.of(cfg.paths)
    store.check_writable()
    try:
        s, job = check(cfg, overrides)
        done = pipeline.finished(s, job, store.digests_dir())
        if done is not None:
            log.info("%s is complete (same settings): nothing to do", s.out)
            results.write_json(job_dir / results.REUSED_FILE, {"out": str(s.out)})
        else:
            done = pipeline.run(s, store, job, log=lambda line: print(line, flush=True))
        results.write_json(job_dir / "summary.json", {"out": str(s.out), **done})
        print(f"brace {s.name} (seed {s.seed}): {s.out}", flush=True)
        return done
    except BaseException as exc:  # noqa: BLE001 - recorded, then re-raised or swallowed
        results.write_json(job_dir / "error.json", {
            "type": type(exc).__name__, "message": str(exc),
            "traceback": traceback.format_exc(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        })  # fmt: skip
        if isinstance(exc, SettingsError) and not multirun:
            raise SystemExit(f"Error: {exc}") from None
        if not multirun or isinstance(exc, KeyboardInterrupt):
            raise
        log.error("brace job failed (%s: %s); the sweep carries on", type(exc).__name__, exc)
        return None


@hydra.main(version_base="1.3", config_path=str(CONF), config_name="config")
def main(cfg: DictConfig) -> float | None:
    from benchmark.__main__ import one_line_errors

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    with one_line_errors(multirun, Path(hc.runtime.output_dir)):
        done = run_job(cfg, Path(hc.runtime.output_dir), list(hc.overrides.task),
                       multirun=multirun)  # fmt: skip
    return None if done is None else done.get("seconds")


def cli(argv: list[str] | None = None) -> int:
    """As `python -m benchmark`: `-m` anywhere, the results root checked first, the tally."""
    from benchmark.__main__ import cli as benchmark_cli

    return benchmark_cli(argv, app=main)


if __name__ == "__main__":
    sys.exit(cli())
