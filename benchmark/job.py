"""One job = one cell of a sweep: skip it when its complete results exist, else compute it, and
record a failure in `error.json` so that, in a multirun, the sweep carries on. What a cell is
lives in benchmark.cell; how its objects are built, in benchmark.build."""

from __future__ import annotations

import json
import logging
import shutil
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch
from omegaconf import DictConfig

from benchmark import results
from benchmark.analysis import STEPS_FILE, StepRecorder, gate_quality, write_steps
from benchmark.build import Evaluation, build, locate_inputs, policy_checkpoint, prepare
from benchmark.cell import CellSpec
from benchmark.policy.provenance import package_versions
from benchmark.progress import EvaluationProgress, result_block, result_line
from benchmark.tracking import Tracker

log = logging.getLogger(__name__)
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
RESULT_FILES = (
    "summary.json",
    "episodes.jsonl",
    "episode_costs.jsonl",
    "trials.csv",
    "cell.json",
    "steps.jsonl.gz",  # eval.step_records=true (benchmark.analysis.steps)
)

REUSED_FILE = "reused.json"  # in a job dir: the cell was complete before the job, not computed


def run_job(cfg: DictConfig, job_dir: Path, multirun: bool) -> dict | None:
    """Run (or skip) one cell; returns its summary, or None when it failed inside a multirun."""
    job_dir = Path(job_dir)
    spec, cell_dir, name, tracker = None, None, str(cfg.env.name), None
    try:
        task, splits, spec = prepare(cfg)  # every bad input fails here, before any work
        name = spec.name
        if cfg.get("train_only"):
            return {"checkpoint_path": str(policy_checkpoint(cfg, task, splits))}
        located = locate_inputs(spec, cfg, policy_checkpoint(cfg, task, splits, train=False))
        if located is not None and (done := _reuse(located, cfg, job_dir)) is not None:
            _log_reused(cfg, located, done)
            _show(cfg, done, located.dir(cfg.paths.root), job_dir, multirun)
            return done
        tracker = _tracker(cfg, spec)
        if cfg.eval.get("torch_threads"):
            torch.set_num_threads(int(cfg.eval.torch_threads))
        evaluation = build(cfg, prepared=(task, splits, spec), log_fn=tracker.log)
        try:
            spec = locate_inputs(spec, cfg, evaluation.checkpoint_path, train=True)
            evaluation.spec = spec
            name, cell_dir = spec.name, spec.dir(cfg.paths.root)
            if (done := _reuse(spec, cfg, job_dir, evaluation)) is not None:  # computed meanwhile
                tracker.finish(0)
                _show(cfg, done, cell_dir, job_dir, multirun)
                return done
            summary = _compute(evaluation, cell_dir, tracker)
        finally:
            evaluation.close()
        _publish(cell_dir, job_dir)
        tracker.finish(0)
        _show(cfg, summary, cell_dir, job_dir, multirun)
        return summary
    except BaseException as exc:  # noqa: BLE001 - recorded, then re-raised or swallowed
        error = {
            "cell": name,
            "cell_hash": cell_dir.name if cell_dir else None,
            "type": type(exc).__name__,
            "message": str(exc),
            "traceback": traceback.format_exc(),
            "config": spec.config if spec is not None else None,
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


def _reuse(
    spec: CellSpec, cfg: DictConfig, job_dir: Path, evaluation: Evaluation | None = None
) -> dict | None:
    """The summary of the complete cell `spec`, published into the job dir; None if absent.
    With eval.step_records=true, a complete cell without step records gets them first."""
    from benchmark.migrate import adopt_legacy_cell

    cell_dir = spec.dir(cfg.paths.root)
    done = results.complete_cell(cell_dir)
    if done is None and adopt_legacy_cell(spec, cfg):
        done = results.complete_cell(cell_dir)
    if done is None:
        return None
    log.info("cell %s (%s) is complete: skipped", spec.name, cell_dir.name)
    summary = done[0]
    if cfg.eval.get("step_records") and not (cell_dir / STEPS_FILE).exists():
        summary = _record_steps(spec, cfg, cell_dir, done, evaluation)
    _publish(cell_dir, job_dir)
    results.write_json(job_dir / REUSED_FILE, {"cell_dir": str(cell_dir)})  # the sweep's tally
    return summary


def _record_steps(
    spec: CellSpec,
    cfg: DictConfig,
    cell_dir: Path,
    done: tuple[dict, list[dict]],
    evaluation: Evaluation | None,
) -> dict:
    """Step records for a complete cell computed without them (eval.step_records is an output
    option, not part of the identity): rerun its evaluation (deterministic, with its tau and p)
    only to record the steps; the rerun's episodes must equal the stored ones. Writes
    steps.jsonl.gz and adds the gate-quality fields to summary.json; nothing else changes."""
    summary, stored = done
    log.info("cell %s: no step records yet, rerunning its evaluation to write them", spec.name)
    own = evaluation is None
    if own:
        if cfg.eval.get("torch_threads"):
            torch.set_num_threads(int(cfg.eval.torch_threads))
        evaluation = build(cfg, prepared=prepare(cfg))
        evaluation.spec = spec
    try:
        gate_args = {}
        if spec.tunes_tau:
            gate_args["tau"] = summary["tau"]
        if spec.gate.matches_ir:
            gate_args["p"] = summary["p"]
        seeds = evaluation.test_seeds()
        recorder = StepRecorder()
        with EvaluationProgress(len(seeds), enabled=not cfg.get("quiet", False)) as progress:
            rows = _evaluate(evaluation, seeds, gate_args, progress, recorder)
    finally:
        if own:
            evaluation.close()
    rerun = json.loads(json.dumps(results.split_runtime(rows)[0], sort_keys=True))
    if rerun != stored:
        diff = next((a["seed"] for a, b in zip(rerun, stored, strict=False) if a != b), None)
        raise RuntimeError(
            f"cell {spec.name} ({cell_dir.name}): rerunning its evaluation for step records gave "
            f"other episodes than its episodes.jsonl (first at seed {diff}; {len(rerun)} vs "
            f"{len(stored)} episodes), so the records would not describe its results; nothing "
            "written. Recompute the cell (delete its dir) to get both."
        )
    write_steps(cell_dir / STEPS_FILE, recorder.records)
    summary = {**summary, **gate_quality(recorder.records)}
    results.write_json(cell_dir / "summary.json", summary)
    return summary


def _evaluate(
    evaluation: Evaluation,
    seeds: list[int],
    gate_args: dict,
    progress: EvaluationProgress,
    recorder: StepRecorder | None = None,
) -> list[dict]:
    """The cell's test episodes; a recorder hears every step (through the evaluator's hook)."""
    if recorder is None:
        return evaluation.run(seeds, progress=progress, **gate_args)
    mode = str(evaluation.cfg.eval.mode)
    return evaluation.evaluator(**gate_args).run(
        seeds, mode=mode, progress=progress, on_step=recorder
    )


def _numbers(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if isinstance(v, (int, float, str))}


def _tracker(cfg: DictConfig, spec: CellSpec) -> Tracker:
    """The cell's W&B run: group = experiment, job_type = gate, name = the cell."""
    return Tracker(
        cfg.get("tracking"),
        name=spec.name,
        group=cfg.experiment_name,
        job_type=spec.gate.name,
        config=spec.config,
    )


def _log_reused(cfg: DictConfig, spec: CellSpec, summary: dict) -> None:
    """A light W&B run for a cell reused from an earlier sweep, in this experiment's group, so
    this sweep's dashboard shows it (its summary, marked `reused`; no tables)."""
    tracker = _tracker(cfg, spec)
    tracker.summary({**_numbers(summary), "reused": True})
    tracker.finish(0)


def _publish(cell_dir: Path, job_dir: Path) -> None:
    """Copy the cell's result files into the job dir (the sweep's view of the cell)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "error.json").unlink(missing_ok=True)
    (job_dir / REUSED_FILE).unlink(missing_ok=True)
    for f in RESULT_FILES:
        if (cell_dir / f).exists() and cell_dir.resolve() != job_dir.resolve():
            shutil.copy2(cell_dir / f, job_dir / f)


def _compute(evaluation: Evaluation, cell_dir: Path, tracker: Tracker) -> dict:
    from benchmark.build import matched_query_rate
    from benchmark.metrics import summarize

    t0 = time.perf_counter()
    cfg, spec = evaluation.cfg, evaluation.spec
    results.write_json(cell_dir / "cell.json", spec.record())
    gate_args, trials = {}, []
    if spec.gate.matches_ir:
        gate_args["p"] = matched_query_rate(cfg, spec)
    tau_from = None
    if spec.tunes_tau:
        source = evaluation.tuning_source()
        tau_from = source.spec.name if source is not evaluation else None
        study_dir = Path(cfg.paths.root) / "tuning" / spec.inputs["tau_study"]
        gate_args["tau"], trials = source.tune(study_dir, on_trial=_trial_printer(cfg))
        _write_trials(cell_dir, trials)
        tracker.table("optuna_trials", trials)
    seeds = evaluation.test_seeds()
    recorder = StepRecorder() if cfg.eval.get("step_records") else None
    with EvaluationProgress(len(seeds), enabled=not cfg.get("quiet", False)) as progress:
        rows = _evaluate(evaluation, seeds, gate_args, progress, recorder)
    summary = summarize(rows)
    if recorder is not None:  # precision, recall, AUROC, help and harm rates (gate_*)
        summary.update(gate_quality(recorder.records))
    summary.update(spec.labels())
    summary.update(
        complete=True,
        cell_hash=cell_dir.name,
        checkpoint_path=str(evaluation.checkpoint_path) if evaluation.checkpoint_path else None,
        checkpoint_sha256=spec.inputs.get("checkpoint_sha256"),
        model=spec.inputs.get("model"),
        tau=gate_args.get("tau", spec.gate.args.get("tau")),
        tau_from=tau_from,  # None: a fixed tau or this cell's own study
        p=gate_args.get("p", spec.gate.args.get("p")),
        seeds=[min(seeds), max(seeds), len(seeds)],
        seeds_touched={
            "tuning": sorted({s for t in trials for s in range(t["seeds"][0], t["seeds"][1] + 1)}),
            "evaluation": seeds,
        },
        wall_seconds=time.perf_counter() - t0,
        experiment=cfg.experiment_name,
        provenance=provenance(),
    )
    if evaluation.consultant is not None and hasattr(evaluation.consultant, "stats"):
        summary["cache"] = evaluation.consultant.stats()
    outcome, costs = results.split_runtime(rows)
    if recorder is not None:
        write_steps(cell_dir / STEPS_FILE, recorder.records)
    results.write_jsonl(cell_dir / "episodes.jsonl", outcome)
    results.write_jsonl(cell_dir / "episode_costs.jsonl", costs)
    results.write_json(cell_dir / "summary.json", summary)  # last: marks the cell complete
    (cell_dir / "error.json").unlink(missing_ok=True)  # an earlier failure of this cell is over
    tracker.summary(_numbers(summary))
    tracker.table("episodes", outcome)
    return summary


def _trial_printer(cfg: DictConfig):
    """Progress of the tuning study: one line per trial (at most tuning.n_trials lines)."""
    if cfg.get("quiet", False):
        return None
    n = int(cfg.tuning.n_trials)

    def on_trial(k: int, row: dict, best: dict) -> None:
        print(
            f"tuning: trial {k}/{n} | tau {row['tau']:.4f} | validation reward "
            f"{row['reward']:.3f} | IR {row['ir']:.3f} | best tau {best['tau']:.4f} "
            f"(reward {best['reward']:.3f})",
            flush=True,
        )

    return on_trial


def _show(cfg: DictConfig, summary: dict, cell_dir: Path, job_dir: Path, multirun: bool) -> None:
    """The result block (one line per cell in a multirun) on stdout, unless quiet."""
    if cfg.get("quiet", False):
        return
    if multirun:
        print(result_line(summary), flush=True)
        return
    files = {
        f: str(job_dir / f) for f in ("summary.json", "episodes.jsonl") if (job_dir / f).exists()
    }
    files["cell dir"] = str(cell_dir)
    print(result_block(summary, files), flush=True)


def _write_trials(cell_dir: Path, trials: list[dict]) -> None:
    import pandas as pd

    results.write_text_atomic(cell_dir / "trials.csv", pd.DataFrame(trials).to_csv(index=False))


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

    versions = package_versions(PACKAGES)
    return {
        "git_commit": git("rev-parse", "HEAD") or None,
        "git_dirty": bool(git("status", "--porcelain")),
        "python": sys.version.split()[0],
        "packages": versions,
        "hostname": socket.gethostname(),
        "device": "cuda:" + torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "torch_threads": torch.get_num_threads(),
    }
