"""Threshold tuning: an Optuna TPE study over tau on the VALIDATION seeds only.

The study lives on disk (Optuna JournalStorage, process-safe) keyed by everything that changes
the objective, so it is shared by every cell that needs the same tau and resumes after a kill:
a rerun continues to the configured number of trials instead of adding that many more.

Test-only pause point: with BENCHMARK_PAUSE_AFTER_TRIAL=k in the environment, the process writes
`<study_dir>/paused` once the study holds k completed trials and then sleeps until it is killed,
so a test can kill a sweep at a known point (tests/test_sweeps.py) instead of racing it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import optuna
from filelock import FileLock

PAUSE_ENV = "BENCHMARK_PAUSE_AFTER_TRIAL"  # test-only, see the module docstring


def tune(
    objective: Callable[[float, list[int]], tuple[float, float]],
    study_dir: Path,
    *,
    tau_range: tuple[float, float],
    n_trials: int,
    seeds: list[int],
    sampler_seed: int,
    max_reward: float,
) -> tuple[float, list[dict]]:
    """Run (or resume) the study on validation `seeds` (benchmark.build passes the first
    tuning.n_episodes of the validation split); `objective(tau, seeds) -> (mean reward, IR)`.
    Returns the best tau and one row per completed trial (tau, reward, ir, seeds)."""
    study_dir = Path(study_dir)
    study_dir.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with FileLock(str(study_dir / "study.lock")):
        storage = optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(study_dir / "study.journal"))
        )
        study = optuna.create_study(
            study_name="tau",
            storage=storage,
            direction="maximize",
            sampler=optuna.samplers.TPESampler(seed=sampler_seed),
            load_if_exists=True,
        )

        def trial_fn(trial: optuna.Trial) -> float:
            tau = trial.suggest_float("tau", *tau_range)
            reward, ir = objective(tau, seeds)
            trial.set_user_attr("ir", ir)
            trial.set_user_attr("seeds", [min(seeds), max(seeds), len(seeds)])
            return reward

        def stop_at_max(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
            if trial.value is not None and trial.value >= max_reward - 1e-9:
                study.stop()

        while not _finished(study, n_trials, max_reward):
            study.optimize(trial_fn, n_trials=1, callbacks=[stop_at_max])
            _pause_if_asked(study, study_dir)
    trials = _complete(study)
    rows = [
        {"trial": t.number, "tau": t.params["tau"], "reward": t.value, **t.user_attrs}
        for t in trials
    ]
    return float(study.best_params["tau"]), rows


def _pause_if_asked(study: optuna.Study, study_dir: Path) -> None:
    """Test-only: once $BENCHMARK_PAUSE_AFTER_TRIAL trials are complete, mark and never return."""
    after = os.environ.get(PAUSE_ENV)
    if after and len(_complete(study)) >= int(after):
        (study_dir / "paused").write_text(f"{os.getpid()}\n")
        while True:
            time.sleep(1)


def _complete(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


def _finished(study: optuna.Study, n_trials: int, max_reward: float) -> bool:
    done = _complete(study)
    return len(done) >= n_trials or any(t.value >= max_reward - 1e-9 for t in done)
