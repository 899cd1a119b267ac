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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from filelock import FileLock

from benchmark.results import write_json
from benchmark.settings import STUDY, added, identity
from benchmark.store import write_bytes_atomic

JOURNAL = "study.journal"  # a study's Optuna journal in its directory (Store.study_dir)
log = logging.getLogger(__name__)
WORKER = "worker"  # trial user attribute: [host, pid] of the process running it
PAUSE_ENV = "BENCHMARK_PAUSE_AFTER_TRIAL"  # test-only, see the module docstring
# tuning.objective -> the tuning keys it reads (all of them enter the study's identity, and none
# for the default, so studies and cells made before objectives existed keep their keys)
OBJECTIVE_PARAMS = {
    "reward": (),
    "budget": ("budget",),
    "frugal": ("epsilon",),
    "risk": ("alpha", "delta"),
}
OBJECTIVE_KEYS = ("objective", *{k for v in OBJECTIVE_PARAMS.values() for k in v})
RISK_FILE = "risk.json"  # the risk objective's calibration, in the study dir


@dataclass(frozen=True)
class TuningSettings:
    """The roles of the `tuning` keys (the objective's keys are Objective's): a study of n
    trials is the first n of a longer one, and whose study a cell uses is not what it tunes, so
    those keys name the cell but not the study."""

    scope: str = identity("cell", outside=(STUDY,))
    shared: dict = identity({}, outside=(STUDY,))
    n_trials: int = identity(15, outside=(STUDY,))
    study: Any = identity(None, outside=(STUDY,))  # the supplying study's key (a cell's input)
    n_episodes: int = identity(100)
    sampler_seed: int = identity(0)
    # tau_range clipped at log2|A|: every study before the key existed clipped
    clip_tau: bool = added(True, old=True)

    @staticmethod
    def check_scope(cfg: Any) -> None:
        """tuning.scope, and tuning.shared's keys: keys of the whole config `cfg` (or prompt)."""
        from omegaconf import OmegaConf

        from benchmark.config import option_file, options

        scope, shared = cfg.tuning.scope, cfg.tuning.shared
        if scope not in ("cell", "shared"):
            raise ValueError(f"tuning.scope={scope!r} is invalid: allowed cell, shared")
        if scope == "shared" and not shared:
            raise ValueError(
                "tuning.scope=shared needs tuning.shared: the overrides that name the cell whose "
                "study supplies the tau, e.g. {policy.checkpoint: final}"
            )
        for key, value in (shared or {}).items():
            if key == "prompt":
                if not option_file("prompt", str(value)).is_file():
                    raise ValueError(
                        f"tuning.shared.prompt={value!r} is invalid: allowed {options('prompt')}"
                    )
            elif OmegaConf.select(cfg, str(key), default="<missing>") == "<missing>":
                raise ValueError(
                    f"tuning.shared names {key!r}, which is not a config key: allowed dotted keys "
                    "of this config (e.g. policy.checkpoint, prompt.rationale) or prompt"
                )

    @staticmethod
    def check_config(tuning: Mapping[str, Any]) -> None:
        """tuning.clip_tau, the objective and its parameters (Objective), tuning.n_trials."""
        clip = tuning.get("clip_tau", True)
        if not isinstance(clip, bool):
            raise ValueError(f"tuning.clip_tau={clip!r} is invalid: allowed true or false")
        Objective.from_config(tuning)
        n_trials = tuning.get("n_trials")
        if not isinstance(n_trials, int) or isinstance(n_trials, bool) or n_trials < 1:
            raise ValueError(f"tuning.n_trials={n_trials!r} is invalid: allowed an integer >= 1")


@dataclass(frozen=True)
class Objective:
    """How the tuned threshold is chosen (`tuning.objective`), always on validation seeds:

    reward  the papers': the largest validation reward
    budget  the largest validation reward among trials with validation IR <= `budget` (the
            sampler treats the budget as a constraint; with no trial inside it, the lowest IR)
    frugal  the largest tau whose validation reward is within `epsilon` of the best: as good,
            fewer queries
    risk    no reward search: Learn-then-Test on validation step records certifies, with
            probability >= 1 - `delta`, that the share of PPO mistakes the gate does not ask
            about is <= `alpha` (calibrate_risk)"""

    name: str = "reward"
    budget: float | None = None
    epsilon: float | None = None
    alpha: float | None = None
    delta: float | None = None

    @classmethod
    def from_config(cls, tuning: Mapping[str, Any]) -> Objective:
        """From the `tuning` config; a bad name or parameter fails naming what is allowed."""
        name = tuning.get("objective", "reward")
        if name not in OBJECTIVE_PARAMS:
            raise ValueError(
                f"tuning.objective={name!r} is invalid: allowed {', '.join(OBJECTIVE_PARAMS)}"
            )
        params = {}
        every = [k for keys in OBJECTIVE_PARAMS.values() for k in keys]
        for key in every:  # every one present is checked; the objective's own are required
            if key not in OBJECTIVE_PARAMS[name] and tuning.get(key) is None:
                continue
            value = tuning.get(key)
            low_open = key != "epsilon"
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            ok = ok and (0 < value if low_open else 0 <= value) and value <= 1
            ok = ok and not (key in ("alpha", "delta") and value >= 1)
            if not ok:
                allowed = {
                    "budget": "a number in (0, 1] (the largest validation IR)",
                    "epsilon": "a number in [0, 1] (the validation reward one may give up)",
                    "alpha": "a number in (0, 1) (the largest missed-mistake rate)",
                    "delta": "a number in (0, 1) (the chance the guarantee may fail)",
                }[key]
                raise ValueError(
                    f"tuning.{key}={value!r} is invalid for tuning.objective={name}: "
                    f"allowed {allowed}"
                )
            if key in OBJECTIVE_PARAMS[name]:
                params[key] = float(value)
        return cls(name=name, **params)

    def params(self) -> dict[str, float]:
        return {k: v for k, v in asdict(self).items() if k != "name" and v is not None}

    def identity(self) -> dict[str, Any]:
        """What enters the study's (and the cell's) identity: nothing for the default."""
        return {} if self.name == "reward" else {"objective": self.name, **self.params()}

    def constraints(self, trial: optuna.trial.FrozenTrial) -> Sequence[float]:
        """Optuna's constraint (<= 0 is feasible): validation IR within the budget."""
        return [float(trial.user_attrs.get("ir", 1.0)) - float(self.budget)]

    @property
    def constraints_func(self) -> Callable | None:
        return self.constraints if self.name == "budget" else None

    def choose(self, rows: list[dict]) -> dict:
        """The trial row this objective picks (rows in trial order; the first of equals)."""
        if not rows:
            raise ValueError("no completed trial to choose a tau from")
        if self.name == "budget":
            inside = [r for r in rows if r["ir"] <= self.budget + 1e-12]
            if not inside:
                log.warning(
                    "no trial kept validation IR <= %s: the lowest-IR trial is used", self.budget
                )
                return min(rows, key=lambda r: r["ir"])
            rows = inside
        best = max(rows, key=lambda r: r["reward"])  # the first of equals, as Optuna's
        if self.name != "frugal":
            return best
        good = [r for r in rows if r["reward"] >= best["reward"] - self.epsilon - 1e-12]
        return max(good, key=lambda r: r["tau"])


def risk_p_value(missed: int, mistakes: int, alpha: float) -> float:
    """Learn-then-Test's p-value for H0 "the missed-mistake rate exceeds alpha" from `missed` of
    `mistakes` PPO mistakes (MAPIE's Hoeffding-Bentkus bound, binary losses); 1 without
    mistakes (nothing to learn from)."""
    from mapie.risk_control.methods import compute_hoeffding_bentkus_p_value

    if mistakes == 0:
        return 1.0
    p = compute_hoeffding_bentkus_p_value(
        np.array([missed / mistakes]), np.array([float(mistakes)]), alpha, binary=True
    )
    return float(np.ravel(p)[0])


def risk_grid(tau_range: tuple[float, float], n_grid: int = 20) -> list[float]:
    """The taus the risk objective tests, from the lowest (asks most, misses least) up."""
    return [float(t) for t in np.linspace(*(float(v) for v in tau_range), n_grid)]


def calibrate_risk(
    run_at: Callable[[list[int], float], tuple[list[dict], list[dict]]],
    study_dir: Path,
    *,
    goal: Objective,
    tau_range: tuple[float, float],
    seeds: list[int],
) -> tuple[float, list[dict]]:
    """The risk objective's tau: Learn-then-Test with fixed-sequence testing over `risk_grid`.
    `run_at(seeds, tau)` runs the gate at `tau` on the validation `seeds`, asking as it would
    at test time, and returns (episode rows, step records); the missed-mistake rate at `tau` is
    counted on the trajectories that tau produces (the consultant changes what PPO visits). Taus
    are tested from the lowest up, each on its own run, and the first one whose p-value exceeds
    delta ends the sequence (the order is fixed in advance, so no multiplicity correction is
    needed); the tau chosen is the last one certified. With none certified, tau = 0: the gate
    asks at every step, which misses nothing. One row per tested tau (trials.csv); the result
    is kept in `<study_dir>/risk.json`, computed once under the study lock.
    Steps of one episode are not independent, so the guarantee is checked on test seeds too
    (benchmark.analysis.risk)."""
    study_dir = Path(study_dir)
    study_dir.mkdir(parents=True, exist_ok=True)
    path = study_dir / RISK_FILE
    with FileLock(str(study_dir / "study.lock")):
        if path.exists():
            done = json.loads(path.read_text())
        else:
            rows, tau, certified = [], 0.0, False
            for k, t in enumerate(risk_grid(tau_range)):
                episodes, records = run_at(seeds, t)
                wrong = [r for r in records if r.get("ppo_optimal") is False]
                missed = sum(not r["queried"] for r in wrong)
                p = risk_p_value(missed, len(wrong), goal.alpha)
                steps = sum(e["length"] for e in episodes)
                rows.append(
                    {
                        "trial": k,
                        "tau": t,
                        "reward": sum(e["reward"] for e in episodes) / len(episodes),
                        "ir": sum(e["queries"] for e in episodes) / max(steps, 1),
                        "mistakes": len(wrong),
                        "missed": missed,
                        "miss_rate": missed / len(wrong) if wrong else None,
                        "p_value": p,
                        "certified": p <= goal.delta,
                        "seeds": [min(seeds), max(seeds), len(seeds)],
                    }
                )
                if p > goal.delta:
                    break
                tau, certified = t, True
            done = {"tau": tau, "certified": certified, **goal.params(), "trials": rows}
            write_json(path, done)
    return float(done["tau"]), done["trials"]


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
    goal: Objective | None = None,
) -> tuple[float, list[dict]]:
    """Run (or resume) the study on validation `seeds` (benchmark.build passes the first
    tuning.n_episodes of the validation split); `objective(tau, seeds) -> (mean reward, IR)`.
    Returns the tau that `goal` (default: maximise reward) picks among the first `n_trials`
    completed trials, and one row for each. With `goal.name == "budget"` the sampler treats
    IR <= budget as a constraint. `on_trial(k, row, best_row)` hears of every trial this call
    completes (progress lines)."""
    goal = goal or Objective()
    if goal.name == "risk":
        raise ValueError("tuning.objective=risk is calibrated from step records (calibrate_risk)")
    study_dir = Path(study_dir)
    study_dir.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with FileLock(str(study_dir / "study.lock")):
        journal = study_dir / JOURNAL
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
            if goal.name == "budget" and hasattr(trial, "set_constraint"):  # Optuna >= 5
                trial.set_constraint("ir_over_budget", ir - float(goal.budget))
            trial.set_user_attr("seeds", [min(seeds), max(seeds), len(seeds)])
            return reward

        def stop_at_max(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
            if _at_max(trial, max_reward, goal):
                study.stop()

        while not _finished(study, n_trials, max_reward, goal):
            # The k-th completed trial is always proposed by a sampler seeded with (seed, k) from
            # the k trials before it, so a study resumed after a kill, or extended by a larger
            # n_trials, proposes exactly the taus of one that ran through.
            k = len(_complete(study))
            sampler = optuna.samplers.TPESampler(
                seed=int(np.random.SeedSequence([sampler_seed, k]).generate_state(1)[0]),
                constraints_func=None
                if hasattr(optuna.Trial, "set_constraint")
                else goal.constraints_func,
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
    return float(goal.choose(rows)["tau"]), rows


def trials_missing(study_dir: Path, n_trials: int, max_reward: float) -> int:
    """Trials the study still needs: n_trials less its COMPLETE trials, 0 once one reached
    the task's max reward (tuning stops there). Read-only: an absent journal is not created."""
    journal = Path(study_dir) / JOURNAL
    if not journal.is_file():
        return n_trials
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        storage = optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(journal))
        )
        study = optuna.load_study(study_name="tau", storage=storage)
        done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    except KeyError:  # the journal holds no study yet
        return n_trials
    except Exception as exc:  # noqa: BLE001 - the job will say what is wrong; count it all
        log.warning("cannot read the tuning study %s (%s): all trials counted", journal, exc)
        return n_trials
    if any(t.value is not None and t.value >= max_reward - 1e-9 for t in done):
        return 0
    return max(0, n_trials - len(done))


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


def _at_max(trial: optuna.trial.FrozenTrial, max_reward: float, goal: Objective) -> bool:
    """A trial at the task's maximum reward ends the study, unless it breaks the IR budget or
    the goal wants fewer queries than the best (frugal: a larger tau may do as well)."""
    if trial.value is None or trial.value < max_reward - 1e-9 or goal.name == "frugal":
        return False
    return goal.name != "budget" or trial.user_attrs.get("ir", 1.0) <= goal.budget + 1e-12


def _finished(study: optuna.Study, n_trials: int, max_reward: float, goal: Objective) -> bool:
    done = _complete(study)
    return len(done) >= n_trials or any(_at_max(t, max_reward, goal) for t in done)
