"""Real Hydra multiruns in subprocesses: the smoke sweep and its report, a sweep killed mid-way and
rerun (finished cells and Optuna trials are not recomputed), and a failing cell that does not stop
the sweep."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import optuna
import pytest

from benchmark.tuning import PAUSE_ENV
from tests.conftest import run_cli, start_cli

pytestmark = pytest.mark.slow
SMALL = ["eval.n_episodes=4", "tuning.n_episodes=4", "tuning.n_trials=3", "tracking=none"]


def _jobs(sweep: Path) -> list[Path]:
    return sorted((p for p in sweep.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def _sweep_dir(root: Path, name: str = "smoke") -> Path:
    dirs = sorted((root / "sweeps" / name).iterdir(), key=lambda p: p.stat().st_mtime)
    return dirs[-1]


def _trials(root: Path) -> int:
    total = 0
    for journal in (root / "tuning").glob("*/study.journal"):
        storage = optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(journal))
        )
        study = optuna.load_study(study_name="tau", storage=storage)
        total += len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
    return total


@pytest.mark.timeout(1800)  # about 150 s on 2 cores; its own limits: sweep 1500 s, report 300 s
def test_smoke_sweep_then_report(tmp_path):
    run_cli(tmp_path, "+experiment=smoke", "tracking=wandb", "-m", timeout=1500)
    sweep = _sweep_dir(tmp_path)
    jobs = _jobs(sweep)
    assert len(jobs) == 12
    for job in jobs:
        summary = json.loads((job / "summary.json").read_text())
        episodes = (job / "episodes.jsonl").read_text().splitlines()
        assert summary["complete"] and len(episodes) == summary["n_episodes"] == 5
    oracle_slm_only = [json.loads((j / "summary.json").read_text()) for j in jobs]
    oracle = [s for s in oracle_slm_only if s["gate"] == "always" and s["slm"] == "oracle"][0]
    assert oracle["success_mean"] == 1.0 and oracle["invalid_rate_mean"] == 0.0
    assert list((tmp_path / "wandb").rglob("*.wandb")), "no offline W&B run was written"
    report = run_cli(tmp_path, str(sweep), "--no-wandb", module="benchmark.report", timeout=300)
    assert "| PPO |" in report.stdout and "ASK+" in report.stdout
    out = sweep / "report"
    for name in ("report.md", "report.tex"):
        assert (out / name).stat().st_size > 0
    pngs = list(out.glob("*.png"))
    assert pngs and all(p.stat().st_size > 5000 for p in pngs)


@pytest.mark.timeout(1500)  # about 90 s on 2 cores; its own limits: 600 s to the pause, 900 s rerun
def test_killed_sweep_resumes_without_recomputing(tmp_path, monkeypatch):
    # tau near 0: the tiny model is asked at every step, so each trial takes a few seconds
    args = [
        "+experiment=smoke",
        "method=ppo,ask_plus",
        "slm=tiny",
        *SMALL,
        "tuning.n_episodes=20",
        "++gate.tau_range=[0.0,0.01]",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "-m",
    ]
    # the first run parks itself after the ASK+ study's first trial (benchmark/tuning.py's
    # test-only pause point) and is killed there: a fixed point, not a race with the next trial
    with monkeypatch.context() as mp:
        mp.setenv(PAUSE_ENV, "1")
        proc = start_cli(tmp_path, *args)
    deadline = time.time() + 600
    try:  # kill once the PPO cell is done and the ASK+ study is paused after its first trial
        while time.time() < deadline and proc.poll() is None:
            if list((tmp_path / "tuning").glob("*/paused")):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"no pause point reached (sweep exit code {proc.poll()})")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    done_before = {p: p.stat().st_mtime_ns for p in (tmp_path / "cells").glob("*/summary.json")}
    trials_before = _trials(tmp_path)
    assert len(done_before) == 1 and 1 <= trials_before < 3
    run_cli(tmp_path, *args, timeout=900)
    assert all(p.stat().st_mtime_ns == t for p, t in done_before.items())  # not recomputed
    assert _trials(tmp_path) == 3  # continued to 3 trials, did not add 3 more
    for job in _jobs(tmp_path / "sweep"):
        assert json.loads((job / "summary.json").read_text())["complete"]


def test_failing_cell_is_recorded_and_the_sweep_carries_on(tmp_path):
    proc = run_cli(
        tmp_path,
        "+experiment=smoke",
        "method=slm_only",
        "slm=oracle,openai",
        *SMALL,
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "-m",
        timeout=600,
        check=False,
    )
    assert proc.returncode == 1  # the tally: a failed cell fails the sweep's exit status
    assert "2 jobs: 1 completed, 0 reused, 1 failed" in proc.stdout
    ok, failed = _jobs(tmp_path / "sweep")
    assert json.loads((ok / "summary.json").read_text())["success_mean"] == 1.0
    error = json.loads((failed / "error.json").read_text())
    assert "127.0.0.1:8000" in error["message"] and error["traceback"]
    assert not (failed / "summary.json").exists()
    report = run_cli(
        tmp_path, str(tmp_path / "sweep"), "--no-wandb", module="benchmark.report", timeout=300
    )
    assert "FAILED" in report.stdout
