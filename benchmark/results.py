"""Local result files, written atomically (temp file + rename) so a killed job never leaves a
half-written file that could be read as valid."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmark.analysis import STEPS_FILE, gate_quality, steps_fields, write_steps
from benchmark.analysis.belief import belief_metrics

# the one atomic writer, file hash and reader of a cell's files live with the results root's
# layout (benchmark.store)
from benchmark.store import (  # noqa: F401 - re-exported
    complete_cell,
    file_sha256,
    read_json,
    read_jsonl,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)

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
REUSED_FILE = "reused.json"  # in a job dir: the cell was complete before the job, not computed
RESULT_FILES = (
    "summary.json",
    "episodes.jsonl",
    "episode_costs.jsonl",
    "trials.csv",
    "cell.json",
    STEPS_FILE,  # eval.step_records=true (benchmark.analysis.steps)
)
# per-episode fields that depend on the machine or on the cache, kept out of episodes.jsonl so
# that the same config gives byte-identical episodes.jsonl (they go to episode_costs.jsonl)
RUNTIME_FIELDS = ("consultant_seconds", "wall_seconds", "cache_hits")


def write_json(path: Path, data: Any) -> None:
    write_json_atomic(path, data)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    write_text_atomic(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def split_runtime(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(deterministic episode rows, per-episode runtime costs)."""
    outcome = [{k: v for k, v in r.items() if k not in RUNTIME_FIELDS} for r in rows]
    costs = [{"seed": r["seed"], **{k: r[k] for k in RUNTIME_FIELDS if k in r}} for r in rows]
    return outcome, costs


# ----------------------------------------------------------------------------- one cell
def cell_summary(
    evaluation: Any,
    rows: list[dict],
    records: list[dict] | None,
    *,
    gate_args: dict,
    trials: list[dict],
    seeds: list[int],
    tau_from: str | None,
    wall_seconds: float,
) -> dict:
    """summary.json of a computed cell: the metrics with CIs, the gate-quality fields when step
    records were taken, the labels, the inputs by content, the settings decided at run time
    (tuned tau, matched p), the seeds it touched, and where and with what it was computed."""
    from benchmark.metrics import summarize

    spec, cfg = evaluation.spec, evaluation.cfg
    summary = summarize(rows)
    if records is not None:  # precision, recall, AUROC, help and harm rates (gate_*)
        summary.update(gate_quality(records))
        summary.update(belief_metrics(records))  # context length, belief correctness
        summary.update(steps_fields(records))  # their count and digest, checked by readers
    summary.update(spec.labels())
    checkpoint = evaluation.checkpoint_path
    summary.update(
        complete=True,
        cell_hash=spec.hash,
        checkpoint_path=str(checkpoint) if checkpoint else None,
        checkpoint_sha256=spec.inputs.get("checkpoint_sha256"),
        policy_weights=spec.inputs.get("policy_weights"),
        model=spec.inputs.get("model"),
        tau=gate_args.get("tau", spec.gate.args.get("tau")),
        tau_from=tau_from,  # None: a fixed tau or this cell's own study
        p=gate_args.get("p", spec.gate.args.get("p")),
        seeds=[min(seeds), max(seeds), len(seeds)],
        seeds_touched={
            "tuning": sorted({s for t in trials for s in range(t["seeds"][0], t["seeds"][1] + 1)}),
            "evaluation": seeds,
        },
        wall_seconds=wall_seconds,
        experiment=cfg.experiment_name,
        provenance=provenance(),
    )
    if evaluation.gate_info is not None:  # a learned gate: None, or why it ranks nothing
        summary["gate_degenerate"] = evaluation.gate_info.get("degenerate")
    if evaluation.consultant is not None and hasattr(evaluation.consultant, "stats"):
        summary["cache"] = evaluation.consultant.stats()
    return summary


def write_cell(
    cell_dir: Path, rows: list[dict], summary: dict, records: list[dict] | None = None
) -> list[dict]:
    """Write a computed cell's files, summary.json last (it marks the cell complete); returns
    the deterministic episode rows (episodes.jsonl)."""
    outcome, costs = split_runtime(rows)
    if records is not None:
        write_steps(cell_dir / STEPS_FILE, records)
    write_jsonl(cell_dir / "episodes.jsonl", outcome)
    write_jsonl(cell_dir / "episode_costs.jsonl", costs)
    write_json(cell_dir / "summary.json", summary)  # last: marks the cell complete
    (cell_dir / "error.json").unlink(missing_ok=True)  # an earlier failure of this cell is over
    return outcome


def publish(cell_dir: Path, job_dir: Path) -> None:
    """Copy the cell's result files into the job dir (the sweep's view of the cell)."""
    import shutil

    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "error.json").unlink(missing_ok=True)
    (job_dir / REUSED_FILE).unlink(missing_ok=True)
    for f in RESULT_FILES:
        if (cell_dir / f).exists() and cell_dir.resolve() != job_dir.resolve():
            shutil.copy2(cell_dir / f, job_dir / f)


def provenance() -> dict:
    """Where and with what a result was computed."""
    import socket
    import sys

    import torch

    from benchmark import lockfile
    from benchmark.measured import git
    from benchmark.policy.provenance import package_versions

    versions = package_versions(PACKAGES)
    return {
        "git_commit": git("rev-parse", "HEAD") or None,
        "git_dirty": bool(git("status", "--porcelain")),
        "python": sys.version.split()[0],
        "packages": versions,
        "lock": lockfile.provenance(),
        "hostname": socket.gethostname(),
        "device": "cuda:" + torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "torch_threads": torch.get_num_threads(),
    }
