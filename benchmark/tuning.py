"""Threshold tuning: an Optuna TPE study over tau on the VALIDATION seeds only.

The study lives on disk (Optuna JournalStorage, process-safe) keyed by everything that changes
the objective, so it is shared by every cell that needs the same tau and resumes after a kill:
a rerun continues to the configured number of trials instead of adding that many more.

Test-only pause point: with BENCHMARK_PAUSE_AFTER_TRIAL=k in the environment, the process writes
`<study_dir>/paused` once the study holds k completed trials and then sleeps until it is killed,
so a test can kill a sweep at a known point (tests/test_sweeps.py) instead of racing it."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import optuna
from filelock import FileLock

from benchmark.store import write_bytes_atomic

log = logging.getLogger(__name__)
WORKER = "worker"  # trial user attribute: [host, pid] of the process running it
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
    on_trial: Callable[[int, dict, dict], None] | None = None,
) -> tuple[float, list[dict]]:
    """Run (or resume) the study on validation `seeds` (benchmark.build passes the first
    tuning.n_episodes of the validation split); `objective(tau, seeds) -> (mean reward, IR)`.
    Returns the best tau among the first `n_trials` completed trials and one row for each.
    `on_trial(k, row, best_row)` hears of every trial this call completes (progress lines)."""
    study_dir = Path(study_dir)
    study_dir.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with FileLock(str(study_dir / "study.lock")):
        journal = study_dir / "study.journal"
        writers = optuna.storages.journal.JournalFileSymlinkLock(str(journal))
        writers.acquire()  # Optuna's own (NFS-safe) writer lock: no append can be half-seen
        try:
            set_aside_torn_tail(journal)
        finally:
            writers.release()
        storage = optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(journal))
        )
        try:
            study = optuna.create_study(
                study_name="tau", storage=storage, direction="maximize", load_if_exists=True
            )
        except ValueError as exc:
            raise ValueError(
                f"the tuning study {journal} is corrupt ({exc}); move it aside to start the "
                "study afresh (its trials are lost)"
            ) from exc
        _fail_stale_running(study)

        def trial_fn(trial: optuna.Trial) -> float:
            trial.set_user_attr(WORKER, [socket.gethostname(), os.getpid()])
            tau = trial.suggest_float("tau", *tau_range)
            reward, ir = objective(tau, seeds)
            trial.set_user_attr("ir", ir)
            trial.set_user_attr("seeds", [min(seeds), max(seeds), len(seeds)])
            return reward

        def stop_at_max(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
            if trial.value is not None and trial.value >= max_reward - 1e-9:
                study.stop()

        while not _finished(study, n_trials, max_reward):
            # The k-th completed trial is always proposed by a sampler seeded with (seed, k) from
            # the k trials before it, so a study resumed after a kill, or extended by a larger
            # n_trials, proposes exactly the taus of one that ran through.
            k = len(_complete(study))
            sampler = optuna.samplers.TPESampler(
                seed=int(np.random.SeedSequence([sampler_seed, k]).generate_state(1)[0])
            )
            study = optuna.load_study(study_name="tau", storage=storage, sampler=sampler)
            study.optimize(trial_fn, n_trials=1, callbacks=[stop_at_max])
            if on_trial is not None and len(_complete(study)) > k:
                done = _rows(sorted(_complete(study), key=lambda t: t.number))
                on_trial(len(done), done[-1], max(done, key=lambda r: r["reward"]))
            _pause_if_asked(study, study_dir)
    # cells asking for fewer trials than the study holds see the first n_trials of it: with
    # exact resume these are the trials a study of that size would have run
    rows = _rows(sorted(_complete(study), key=lambda t: t.number)[:n_trials])
    best = max(rows, key=lambda r: r["reward"])  # the first of equals, as Optuna's best_trial
    return float(best["tau"]), rows


def _rows(trials: list[optuna.trial.FrozenTrial]) -> list[dict]:
    """trials.csv rows: where a trial ran is not a result (it stays in the journal)."""
    return [
        {
            "trial": t.number,
            "tau": t.params["tau"],
            "reward": t.value,
            **{k: v for k, v in t.user_attrs.items() if k != WORKER},
        }
        for t in trials
    ]


def _fail_stale_running(study: optuna.Study) -> None:
    """A RUNNING trial of a process of this host that no longer exists was left by a kill: fail
    it (the loop then retries that trial with the same sampler seed). Trials of other hosts are
    left alone: where the study lock does not reach other hosts, they may still be running."""
    host = socket.gethostname()
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        worker_host, pid = t.user_attrs.get(WORKER, [host, None])
        if worker_host == host and not _alive(pid):
            study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)


def _alive(pid: int | None) -> bool:
    if pid is None or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def set_aside_torn_tail(journal: Path) -> None:
    """A writer killed mid-line leaves a partial last line in the journal: keep a copy of the
    whole file beside it and cut the partial line off, so the study goes on. A bad line
    anywhere else is real corruption: fail, naming the file."""
    if not journal.exists():
        return
    data = journal.read_bytes()
    lines = data.splitlines()
    bad = [i for i, line in enumerate(lines) if line.strip() and not _is_json(line)]
    if bad and bad != [len(lines) - 1]:
        raise ValueError(
            f"the tuning study {journal} is corrupt at line {bad[0] + 1}: move it aside to "
            "start the study afresh (its trials are lost)"
        )
    if not bad and (not data or data.endswith(b"\n")):
        return
    aside = journal.with_name(f"{journal.name}.torn-{time.strftime('%Y%m%d-%H%M%S')}")
    shutil.copy2(journal, aside)
    keep = lines[:-1] if bad else lines
    write_bytes_atomic(journal, b"".join(line + b"\n" for line in keep))  # never half a journal
    log.warning("%s ended in a partial line (a killed writer): kept a copy at %s", journal, aside)


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


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
