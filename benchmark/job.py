"""One job = one cell of a sweep. Cells are identified by a hash of their resolved config and
stored under `<paths.root>/cells/<hash>/`, so rerunning a sweep (even into a new sweep dir) skips
every cell whose complete results exist; a cell that raises writes `error.json` and, in a
multirun, lets the sweep carry on."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import socket
import subprocess
import sys
import time
import traceback
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from benchmark import results
from benchmark.envs import make_task
from benchmark.seeds import evaluation_seeds
from benchmark.tracking import Tracker
from benchmark.validate import validate

log = logging.getLogger(__name__)
CELL_KEYS = ("env", "policy", "slm", "prompt", "gate", "eval", "tuning", "seed", "splits")
PACKAGES = (
    "torch",
    "transformers",
    "stable-baselines3",
    "gymnasium",
    "minigrid",
    "popgym",
    "optuna",
    "hydra-core",
    "wandb",
)


def cell_config(cfg: DictConfig) -> dict:
    """The resolved config that determines a cell's results (no paths, tracking or hydra)."""
    data = OmegaConf.to_container(cfg, resolve=True)
    cell = {k: data[k] for k in CELL_KEYS if k in data}
    gate = cell.get("gate", {})
    if not gate.get("needs_policy", True):
        cell.pop("policy", None)  # SLM-only never uses a policy
    if str(gate.get("tau")) != "auto":
        cell.pop("tuning", None)
    if gate.get("name") == "never":
        cell.pop("slm", None)
        cell.pop("prompt", None)
    for key in ("mode", "torch_threads"):  # execution settings, not part of the results
        cell.get("eval", {}).pop(key, None)
    return cell


def digest(data: Any, n: int = 12) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:n]


def normalize_checkpoint(cfg: DictConfig) -> None:
    """`policy.checkpoint=tK` (the env's K-th reward threshold, so one sweep covers envs with
    different thresholds) becomes the rNNN name it stands for."""
    name = str(cfg.policy.checkpoint)
    if len(name) == 2 and name[0] == "t" and name[1].isdigit():
        thresholds = list(cfg.env.thresholds)
        k = int(name[1])
        if not 1 <= k <= len(thresholds):
            raise ValueError(
                f"policy.checkpoint={name} is invalid for {cfg.env.name}: allowed t1..t{len(thresholds)} "
                f"(thresholds {thresholds}), final, best or rNNN"
            )
        OmegaConf.update(cfg, "policy.checkpoint", f"r{round(thresholds[k - 1] * 100):03d}")


def cell_name(cfg: DictConfig) -> str:
    parts = [cfg.env.name, cfg.gate.name]
    if cfg.gate.name != "never":
        parts += [cfg.slm.name, cfg.prompt.name + ("+r" if cfg.prompt.get("rationale") else "")]
    if cfg.gate.get("needs_policy", True):
        parts.append(f"{cfg.policy.checkpoint}-s{cfg.policy.seed}")
    return "/".join(str(p) for p in parts)


def provenance() -> dict:
    """Where and with what a result was computed."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args],
                capture_output=True,
                text=True,
                timeout=10,
                cwd=Path(__file__).parent,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    versions = {}
    for pkg in PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        "git_commit": git("rev-parse", "HEAD") or None,
        "git_dirty": bool(git("status", "--porcelain")),
        "python": sys.version.split()[0],
        "packages": versions,
        "hostname": socket.gethostname(),
        "device": "cuda:" + torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "torch_threads": torch.get_num_threads(),
    }


def run_job(cfg: DictConfig, job_dir: Path, multirun: bool) -> dict | None:
    """Run (or skip) one cell; returns its summary, or None when it failed inside a multirun."""
    job_dir = Path(job_dir)
    cell, cell_dir, name, tracker = None, None, str(cfg.env.name), None
    try:
        normalize_checkpoint(cfg)
        task = make_task(cfg.env)
        validate(cfg, task)  # every bad input fails here, before any expensive work
        cell = cell_config(cfg)
        cell_dir = Path(cfg.paths.root) / "cells" / digest(cell)
        name = cell_name(cfg)
        done = results.complete_cell(cell_dir)
        if done is not None:
            log.info("cell %s (%s) is complete: skipped", name, cell_dir.name)
            _publish(cell_dir, job_dir)
            return done[0]
        tracker = Tracker(
            cfg.get("tracking"),
            name=name,
            group=cfg.experiment_name,
            job_type=cfg.gate.name,
            config=cell,
        )
        summary = _compute(cfg, task, cell, cell_dir, name, tracker)
        _publish(cell_dir, job_dir)
        tracker.finish(0)
        return summary
    except BaseException as exc:  # noqa: BLE001 - recorded, then re-raised or swallowed
        error = {
            "cell": name,
            "cell_hash": cell_dir.name if cell_dir else None,
            "type": type(exc).__name__,
            "message": str(exc),
            "traceback": traceback.format_exc(),
            "config": cell,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        for d in (job_dir, cell_dir):
            if d is not None:
                results.write_json(d / "error.json", error)
        if tracker is not None:
            tracker.summary({"error": f"{type(exc).__name__}: {exc}"})
            tracker.finish(1)
        if not multirun or isinstance(exc, KeyboardInterrupt):
            raise
        log.error("cell %s failed (%s: %s); the sweep carries on", name, type(exc).__name__, exc)
        return None


def _publish(cell_dir: Path, job_dir: Path) -> None:
    """Copy the cell's result files into the job dir (the sweep's view of the cell)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "error.json").unlink(missing_ok=True)
    for f in ("summary.json", "episodes.jsonl", "episode_costs.jsonl", "trials.csv", "cell.json"):
        if (cell_dir / f).exists() and cell_dir.resolve() != job_dir.resolve():
            shutil.copy2(cell_dir / f, job_dir / f)


def _compute(
    cfg: DictConfig, task, cell: dict, cell_dir: Path, name: str, tracker: Tracker
) -> dict:
    from benchmark.consultants import make_consultant
    from benchmark.evaluate import Evaluator
    from benchmark.policy import ensure, load

    t0 = time.perf_counter()
    gate_cfg = cfg.gate
    if cfg.get("train_only"):
        return {"checkpoint_path": str(ensure(cfg, task, log_fn=tracker.log))}
    if cfg.eval.get("torch_threads"):
        torch.set_num_threads(int(cfg.eval.torch_threads))
    results.write_json(cell_dir / "cell.json", {"name": name, "config": cell})
    extra = {}
    if str(gate_cfg.get("p")) == "match":
        extra["p"] = matched_query_rate(cfg, cell)
    # cheap failures first (prompt/env mismatch, missing model or server), then PPO training
    asks = gate_cfg.name != "never"
    prompt = instantiate(cfg.prompt) if asks else None
    if prompt is not None:
        prompt.check(task)
    consultant = make_consultant(cfg.slm, cfg.paths) if asks else None
    policy, checkpoint_path = None, None
    if gate_cfg.get("needs_policy", True):
        checkpoint_path = policy_checkpoint(cfg, task, tracker)
        policy = load(checkpoint_path, task=task, device=cfg.policy.get("device", "cpu")).policy
    try:

        def evaluator(tau: float | None) -> Evaluator:
            kw = dict(extra, **({"tau": tau} if tau is not None else {}))
            gate = instantiate(gate_cfg, **kw)
            return Evaluator(
                task=task,
                gate=gate,
                policy=policy,
                consultant=consultant,
                prompt=prompt,
                mc_samples=int(gate_cfg.get("mc_samples", 50)),
                seed=int(cfg.seed),
            )

        tau, trials = None, []
        if str(gate_cfg.get("tau")) == "auto":
            tau, trials = _tune(cfg, cell, evaluator, task, cell_dir)
            tracker.table("optuna_trials", trials)
        seeds = evaluation_seeds(cfg.eval.split, int(cfg.eval.n_episodes))
        rows = evaluator(tau).run(seeds, mode=cfg.eval.mode)
    finally:
        if consultant is not None:
            consultant.close()
    from benchmark.metrics import summarize

    summary = summarize(rows)
    summary.update(
        complete=True,
        cell=name,
        cell_hash=cell_dir.name,
        env=cfg.env.name,
        metric=cfg.env.metric,
        gate=gate_cfg.name,
        slm=cfg.slm.name if asks else None,
        prompt=cfg.prompt.name if asks else None,
        rationale=bool(cfg.prompt.get("rationale")) if asks else None,
        checkpoint=cfg.policy.checkpoint if policy is not None else None,
        checkpoint_path=str(checkpoint_path) if checkpoint_path else None,
        policy_seed=int(cfg.policy.seed) if policy is not None else None,
        tau=tau if tau is not None else gate_cfg.get("tau"),
        p=extra.get("p", gate_cfg.get("p")),
        mc_samples=gate_cfg.get("mc_samples"),
        split=cfg.eval.split,
        seeds=[min(seeds), max(seeds), len(seeds)],
        seeds_touched={
            "tuning": sorted({s for t in trials for s in range(t["seeds"][0], t["seeds"][1] + 1)})
            if trials
            else [],
            "evaluation": seeds,
        },
        wall_seconds=time.perf_counter() - t0,
        experiment=cfg.experiment_name,
        provenance=provenance(),
    )
    if consultant is not None and hasattr(consultant, "stats"):
        summary["cache"] = consultant.stats()
    outcome, costs = results.split_runtime(rows)
    results.write_jsonl(cell_dir / "episodes.jsonl", outcome)
    results.write_jsonl(cell_dir / "episode_costs.jsonl", costs)
    results.write_json(cell_dir / "summary.json", summary)  # last: marks the cell complete
    (cell_dir / "error.json").unlink(missing_ok=True)  # an earlier failure of this cell is over
    tracker.summary({k: v for k, v in summary.items() if isinstance(v, (int, float, str))})
    tracker.table("episodes", outcome)
    return summary


def policy_checkpoint(cfg: DictConfig, task, tracker: Tracker) -> Path:
    """A checkpoint the user gave (`policy.path`; SB3 zips hold pickles: only load files you
    trust), else the suite's own cache, trained once if missing."""
    from benchmark.policy import ensure

    if cfg.policy.get("path"):
        path = Path(cfg.policy.path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(
                f"policy.path={str(path)!r} does not exist: give an SB3 PPO .zip"
            )
        return path
    return ensure(cfg, task, log_fn=tracker.log)


def _tune(cfg, cell, evaluator, task, cell_dir: Path) -> tuple[float, list[dict]]:
    from benchmark.tuning import tune

    key = {k: v for k, v in cell.items() if k != "eval"}
    key["gate"] = {k: v for k, v in key["gate"].items() if k != "tau"}
    study_dir = Path(cfg.paths.root) / "tuning" / digest(key)

    def objective(tau: float, seeds: list[int]) -> tuple[float, float]:
        rows = evaluator(tau).run(seeds, mode=cfg.eval.mode)
        steps = sum(r["length"] for r in rows)
        return (
            sum(r["reward"] for r in rows) / len(rows),
            sum(r["queries"] for r in rows) / max(steps, 1),
        )

    low, high = cfg.gate.tau_range
    high = min(float(high), task_max_entropy(task))
    tau, trials = tune(
        objective,
        study_dir,
        tau_range=(float(low), high),
        n_trials=int(cfg.tuning.n_trials),
        n_episodes=int(cfg.tuning.n_episodes),
        sampler_seed=int(cfg.tuning.sampler_seed),
        max_reward=task.max_reward,
    )
    import pandas as pd

    results.write_text_atomic(cell_dir / "trials.csv", pd.DataFrame(trials).to_csv(index=False))
    return tau, trials


def task_max_entropy(task) -> float:
    """log2 |A|: the largest total predictive entropy a policy over the task's actions can have."""
    import math

    return math.log2(len(task.action_names))


def matched_query_rate(cfg: DictConfig, cell: dict) -> float:
    """`gate.p=match`: the pooled IR of the completed entropy-gate cell that differs from this
    one only in its gate (same N; tau = `gate.match_tau`, default the tuned `auto`), so the
    random gate spends the same query budget."""
    same = {k: v for k, v in cell.items() if k not in ("gate", "tuning")}
    want_tau = str(cfg.gate.get("match_tau", "auto"))
    want_n = cfg.gate.get("mc_samples")
    for path in sorted((Path(cfg.paths.root) / "cells").glob("*/cell.json")):
        conf = (results.read_json(path) or {}).get("config", {})
        gate = conf.get("gate", {})
        if gate.get("name") != "entropy" or str(gate.get("tau")) != want_tau:
            continue
        if want_n is not None and gate.get("mc_samples") != want_n:
            continue
        if {k: v for k, v in conf.items() if k not in ("gate", "tuning")} != same:
            continue
        done = results.complete_cell(path.parent)
        if done is not None:
            return float(done[0]["ir_pooled"])
    raise ValueError(
        f"gate.p=match needs the completed gate=entropy cell (tau={want_tau}, mc_samples={want_n}) "
        "with the same env, policy, slm, prompt and eval settings under paths.root; run it first "
        "(in a sweep, list entropy before random) or set gate.p to a number"
    )
