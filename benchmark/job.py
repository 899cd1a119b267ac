"""One job = one cell of a sweep: skip it when its complete results exist, else compute it, and
record a failure in `error.json` so that, in a multirun, the sweep carries on. What a cell is
lives in benchmark.cell; how its objects are built, in benchmark.build; where it is stored, in
benchmark.store; its summary, files and provenance, in benchmark.results."""

from __future__ import annotations

import json
import logging
import time
import traceback
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from benchmark import protocol, results, workers
from benchmark.analysis import (
    STEPS_FILE,
    StepRecorder,
    gate_quality,
    read_checked_steps,
    steps_fields,
    write_steps,
)
from benchmark.analysis.belief import belief_metrics
from benchmark.analysis.steps import RERUN, UNCHECKED
from benchmark.build import (
    Evaluation,
    build,
    identity_warning,
    locate_inputs,
    policy_checkpoint,
    prepare,
)
from benchmark.cell import CellSpec
from benchmark.progress import EvaluationProgress, result_block, result_line
from benchmark.redact import redact_data
from benchmark.store import Store
from benchmark.tracking import Tracker
from benchmark.tuning import Objective

log = logging.getLogger(__name__)


def run_job(cfg: DictConfig, job_dir: Path, multirun: bool) -> dict | None:
    """Run (or skip) one cell; returns its summary, or None when it failed inside a multirun.
    Its inputs are located once (before building when they exist, else once building made
    them) and the store asked once, under the cell's lock, whether the cell is complete."""
    job_dir = Path(job_dir)
    store = Store.of(cfg.paths)
    store.check_writable()  # nothing can be stored, not even error.json
    spec, cell_dir, name, tracker, evaluation = None, None, str(cfg.env.name), None, None
    if _launcher_runs_cells_together() and str(cfg.policy.get("env_workers", "auto")) == "auto":
        with open_dict(cfg):  # cells side by side: a training they wait for steps in one process
            cfg.policy.env_workers = 1
    try:
        if not store.layout_current():  # a root of an earlier release (or a new one): once
            from benchmark.migrate import ensure_current

            ensure_current(cfg.paths)
        task, splits, spec = prepare(cfg)  # every bad input fails here, before any work
        name = spec.name
        if cfg.get("train_only"):
            return {"checkpoint_path": str(policy_checkpoint(cfg, task, splits))}
        if cfg.eval.get("torch_threads"):
            torch.set_num_threads(int(cfg.eval.torch_threads))
        checkpoint = policy_checkpoint(cfg, task, splits, train=False)
        located = locate_inputs(spec, cfg, checkpoint)
        try:
            if located is None:  # an input not made yet: building makes it (trains, builds)
                tracker = _tracker(cfg, spec)
                evaluation = build(cfg, prepared=(task, splits, spec), log_fn=tracker.log)
                located = locate_inputs(spec, cfg, evaluation.checkpoint_path, train=True)
            spec, name, cell_dir = located, located.name, located.dir(cfg.paths.root)
            if spec.uses_policy and str(cfg.policy.checkpoint) == "match":  # what it picked
                _say_match(cfg, checkpoint or evaluation.checkpoint_path)
            if spec.uses_consultant:  # a served model without weights identity: say so
                warning = identity_warning(cfg.slm, spec.inputs.get("model"))
                if warning is not None:
                    log.warning("cell %s: %s", cell_dir.name, warning)
            with store.computing(spec.hash, name):  # one job per cell at a time
                done = _reuse(spec, cfg, job_dir, evaluation)
                if done is not None:  # complete, maybe computed by a job we waited for
                    if tracker is None:
                        _log_reused(cfg, spec, done)
                    else:
                        tracker.finish(0)
                    _show(cfg, done, cell_dir, job_dir, multirun)
                    return done
                if evaluation is None:
                    tracker = _tracker(cfg, spec)
                    evaluation = build(cfg, prepared=(task, splits, spec), log_fn=tracker.log)
                evaluation.spec = spec
                summary = _compute(evaluation, cell_dir, tracker)
        finally:
            if evaluation is not None:
                evaluation.close()
        results.publish(cell_dir, job_dir)
        tracker.finish(0)
        _show(cfg, summary, cell_dir, job_dir, multirun)
        return summary
    except BaseException as exc:  # noqa: BLE001 - recorded, then re-raised or swallowed
        error = {
            "cell": name,
            "cell_hash": cell_dir.name if cell_dir else None,
            "type": type(exc).__name__,
            "message": str(exc),
            "cause": root_cause(exc),
            "traceback": traceback.format_exc(),
            "config": spec.config if spec is not None else None,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        error = redact_data(error)  # a key or a URL's credentials in a message stay here
        for d in (job_dir, cell_dir):
            if d is not None:
                try:
                    results.write_json(d / "error.json", error)
                except OSError as lost:  # a full disk: the error itself is what to report
                    log.error("could not write %s: %s", d / "error.json", lost)
        if tracker is not None:
            tracker.summary({"error": f"{error['type']}: {error['message']}"})
            tracker.finish(1)
        if not multirun or isinstance(exc, KeyboardInterrupt):
            raise
        log.error(
            "cell %s failed (%s: %s); the sweep carries on", name, error["type"], error["message"]
        )
        return None


def _say_match(cfg: DictConfig, path: Path) -> None:
    """Log, once per job, the checkpoint `policy.checkpoint=match` picked with its validation
    success beside the target (the paper's figure under +experiment=table1)."""
    from benchmark.policy.checkpoints import match_line

    tolerance = cfg.policy.get("match_tolerance")
    log.info("%s", match_line(Path(path), float(cfg.policy.match_success), tolerance))


def root_cause(exc: BaseException) -> dict[str, str]:
    """The error to show for a failed cell: `exc` less Hydra's wrappers (instantiate's "Error in
    call to target ..."), following __cause__/__context__ down to the error they wrap."""
    from hydra.errors import HydraException

    seen = {id(exc)}
    while isinstance(exc, HydraException):
        inner = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if inner is None or id(inner) in seen:
            break
        seen.add(id(inner))
        exc = inner
    return {"type": type(exc).__name__, "message": str(exc)}


def _reuse(
    spec: CellSpec,
    cfg: DictConfig,
    job_dir: Path,
    evaluation: Evaluation | None = None,
) -> dict | None:
    """The summary of the complete cell `spec`, published into the job dir; None if absent.
    Step records come from the cell's own evaluation (eval.step_records=true when it was
    computed); a complete cell without them is reused without them, with a warning, unless
    eval.step_records=rerun asks for its evaluation to be run again to record them."""
    cell_dir = spec.dir(cfg.paths.root)
    done = results.complete_cell(cell_dir)
    if done is None:
        return None
    log.info("cell %s (%s) is complete: skipped", spec.name, cell_dir.name)
    summary = done[0]
    asked = cfg.eval.get("step_records")
    steps = cell_dir / STEPS_FILE
    state = read_checked_steps(steps, summary, done[1])[1] if steps.exists() else "missing"
    if state not in ("ok", "missing"):
        log.warning("cell %s: %s", cell_dir.name, state)  # the sweep copies it: say so here
    if asked and state not in ("ok", UNCHECKED):
        if asked == RERUN:
            summary = _record_steps(spec, cfg, cell_dir, done, evaluation)
        else:
            log.warning(
                "cell %s (%s) is complete but its step records are %s: reused without them. "
                "eval.step_records=%s runs its test evaluation again to record them (its tau "
                "and p, the episodes checked against its own), or move its directory aside to "
                "compute it anew",
                spec.name,
                cell_dir.name,
                "missing" if state == "missing" else "not its own",
                RERUN,
            )
    results.publish(cell_dir, job_dir)
    results.write_json(
        job_dir / results.REUSED_FILE, {"cell_dir": str(cell_dir)}
    )  # the sweep's tally
    return summary


def _record_steps(
    spec: CellSpec,
    cfg: DictConfig,
    cell_dir: Path,
    done: tuple[dict, list[dict]],
    evaluation: Evaluation | None,
) -> dict:
    """Step records for a complete cell computed without them (eval.step_records=rerun; the
    records are an output option, not part of the identity): rerun its evaluation
    (deterministic, with its tau and p) only to record the steps; the rerun's episodes must
    equal the stored ones. Writes steps.jsonl.gz and adds the gate-quality fields to
    summary.json; nothing else changes."""
    summary, stored = done
    log.warning("cell %s: rerunning its evaluation to write its step records", spec.name)
    own = evaluation is None
    if own:
        evaluation = build(cfg, prepared=prepare(cfg))
        evaluation.spec = spec
    try:
        gate_args = {}
        if spec.tunes_tau:
            gate_args["tau"] = summary["tau"]
        if spec.gate.matches_ir:
            gate_args["p"] = summary["p"]
        seeds = evaluation.test_seeds()
        recorder = StepRecorder(evaluation.gate(**gate_args))
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
            "written. Recompute the cell (move its dir aside) to get both."
        )
    records = recorder.records  # sorted and (a trained gate) scored once
    write_steps(cell_dir / STEPS_FILE, records)
    summary = {**summary, **gate_quality(records), **belief_metrics(records)}
    summary.update(steps_fields(records))  # their count and digest, checked by readers
    results.write_json(cell_dir / "summary.json", summary)
    return summary


def _evaluate(
    evaluation: Evaluation,
    seeds: list[int],
    gate_args: dict,
    progress: EvaluationProgress,
    recorder: StepRecorder | None = None,
) -> list[dict]:
    """The cell's test episodes, over `eval.workers` processes; a recorder hears every step."""
    cfg = evaluation.cfg
    n = workers.resolve(cfg.eval.get("workers"), launcher_parallel=_launcher_runs_cells_together())
    return workers.run(
        evaluation.evaluator(**gate_args), seeds, n, str(cfg.eval.mode), progress, recorder
    )


def _launcher_runs_cells_together() -> bool:
    """Whether this job's Hydra launcher runs several cells at once on this machine (joblib's
    `parallel`, submitit's `local`): then each cell keeps one process."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return False
    target = str(HydraConfig.get().launcher.get("_target_", "")).lower()
    return "joblib" in target or "localexecutor" in target or "submitit_local" in target


def _numbers(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if isinstance(v, (int, float, str))}


def _tracker(cfg: DictConfig, spec: CellSpec) -> Tracker:
    """The cell's W&B run: group = experiment, job_type = gate, name = the cell."""
    return Tracker(
        cfg.get("tracking"),
        name=spec.name,
        group=cfg.experiment_name,
        job_type=spec.gate.name,
        config={**spec.config, "protocol": protocol.record(cfg, set(spec.config))},
    )


def _log_reused(cfg: DictConfig, spec: CellSpec, summary: dict) -> None:
    """A light W&B run for a cell reused from an earlier sweep, in this experiment's group, so
    this sweep's dashboard shows it (its summary, marked `reused`; no tables)."""
    tracker = _tracker(cfg, spec)
    tracker.summary({**_numbers(summary), "reused": True})
    tracker.finish(0)


def _tau_source_label(cfg: DictConfig, name: str) -> str:
    """The shared study's cell, with the `tuning.shared` values that make it that cell (a cell
    name need not show them: N, for one, is not in it)."""
    shared = OmegaConf.to_container(cfg.tuning.shared, resolve=True) or {}
    return f"{name} [{', '.join(f'{k}={v}' for k, v in sorted(shared.items()))}]"


def _compute(evaluation: Evaluation, cell_dir: Path, tracker: Tracker) -> dict:
    from benchmark.build import matched_query_rate

    t0 = time.perf_counter()
    cfg, spec = evaluation.cfg, evaluation.spec
    results.write_json(cell_dir / "cell.json", spec.record())
    gate_args, trials = {}, []
    if spec.gate.matches_ir:
        gate_args["p"] = matched_query_rate(cfg, spec)
    tau_from = None
    if spec.tunes_tau:
        source = evaluation.tuning_source()
        tau_from = _tau_source_label(cfg, source.spec.name) if source is not evaluation else None
        study_dir = Store.of(cfg.paths).study_dir(spec.inputs["tau_study"])
        gate_args["tau"], trials = source.tune(study_dir, on_trial=_trial_printer(cfg))
        _write_trials(cell_dir, trials)
        tracker.table("optuna_trials", trials)
    seeds = evaluation.test_seeds()
    recorder = StepRecorder(evaluation.gate(**gate_args)) if cfg.eval.get("step_records") else None
    with EvaluationProgress(len(seeds), enabled=not cfg.get("quiet", False)) as progress:
        rows = _evaluate(evaluation, seeds, gate_args, progress, recorder)
    records = recorder.records if recorder is not None else None
    summary = results.cell_summary(
        evaluation,
        rows,
        records,
        gate_args=gate_args,
        trials=trials,
        seeds=seeds,
        tau_from=tau_from,
        wall_seconds=time.perf_counter() - t0,
    )
    summary.update(_objective_fields(cfg, spec))
    ran = protocol.record(cfg, set(spec.config)) or {}
    summary.update(protocol=ran.get("name"), protocol_overrides=ran.get("overrides", {}))
    outcome = results.write_cell(cell_dir, rows, summary, records)
    tracker.summary(_numbers(summary))
    tracker.table("episodes", outcome)
    return summary


def _objective_fields(cfg: DictConfig, spec: CellSpec) -> dict:
    """How the tau was chosen (tuning.objective and the parameters it read), for tuned cells."""
    if not spec.tunes_tau:
        return {}
    goal = Objective.from_config(cfg.tuning)
    return {"tuning_objective": goal.name, "tuning_params": goal.params()}


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
