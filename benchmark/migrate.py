"""Results roots written before cell identity v2 keep their work: a complete v1 cell is adopted
(moved to its v2 hash, with its tuning study) the first time a job asks for it, once, and only
when its inputs provably did not change since it was computed. Otherwise it is left in place,
unused, with a warning that says why, and the cell is computed anew.

v1 hashed the resolved config (paths and all) and named inputs by path; v2 names them by
content (benchmark.cell). A v1 cell is provably the v2 cell a job asks for when:
- its config hashes to the job's v1 hash (the same config), and
- the checkpoint file it names is the job's (same SHA-256) and was last written before the
  cell's summary, and a local model directory's files were too (so the weights it used are the
  ones there now); a hub model is named by id and revision in both versions, and
- the code versions are the first ones (this release changed no prompt, parser or evaluation
  code; a later version bump makes every v1 cell of that code stale, as intended)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from filelock import FileLock
from omegaconf import DictConfig, OmegaConf

from benchmark import results
from benchmark.cell import CellSpec, digest, tuning_key, without_default_mode
from benchmark.results import file_sha256
from benchmark.tuning import OBJECTIVE_KEYS, Objective

log = logging.getLogger(__name__)
V1_KEYS = ("env", "policy", "slm", "prompt", "gate", "eval", "tuning", "seed", "splits")
# keys added to the configs after v1, removed to compute a cell's v1 hash
V2_KEYS = {
    "env": ("label", "kind"),
    "eval": ("step_records",),
    "tuning": ("scope", "shared", *OBJECTIVE_KEYS),  # v1 knew only the reward objective
    "slm": ("decoding",),
    "prompt": ("autopilot", "sampling"),
    "policy": ("source", "revision", "resume_every_steps"),
}
V1_CODE = {"evaluation": 1, "prompts": 1, "parser": 1}  # the code every v1 cell was computed with


def v1_cell_config(cfg: DictConfig) -> dict:
    """The v1 identity: the resolved config minus what the cell did not use."""
    data = OmegaConf.to_container(cfg, resolve=True)
    cell = {k: data[k] for k in V1_KEYS if k in data}
    for group, keys in V2_KEYS.items():
        for key in keys:
            cell.get(group, {}).pop(key, None)
    cell.get("slm", {}).get("backend", {}).pop("prefix_cache", None)
    cell.get("slm", {}).get("backend", {}).pop("lean_max_new_tokens", None)  # later than v1
    cell.get("slm", {}).get("backend", {}).pop("prompt_logprobs", None)
    for group, key in (("slm", "decoding"), ("prompt", "sampling")):  # mode: later than v1
        if isinstance(cell.get(group), dict) and key in cell[group]:
            cell[group][key] = without_default_mode(cell[group][key])
    gate = cell["gate"]
    if gate.get("_target_") == "benchmark.gates.AlwaysGate":
        gate["needs_policy"] = False  # v1's conf/gate/always.yaml carried it
    if not gate.get("needs_policy", True):
        cell.pop("policy", None)
    if str(gate.get("tau")) != "auto":
        cell.pop("tuning", None)
    if gate.get("name") == "never":
        cell.pop("slm", None)
        cell.pop("prompt", None)
    for key in ("mode", "torch_threads"):
        cell.get("eval", {}).pop(key, None)
    return cell


def adopt_legacy_cell(spec: CellSpec, cfg: DictConfig) -> bool:
    """Move the complete v1 cell equal to `spec` (and its tuning study) to `spec`'s v2 dir."""
    if Objective.from_config(cfg.tuning).identity():
        return False  # v1 tuned for reward only: no v1 cell is a cell of another objective
    root = Path(cfg.paths.root)
    old_cell = v1_cell_config(cfg)
    old_dir = root / "cells" / digest(old_cell)
    new_dir = spec.dir(root)
    if old_dir == new_dir or not (old_dir / "summary.json").exists():
        return False
    with FileLock(str(root / "cells" / ".migrate.lock")):
        done = results.complete_cell(old_dir)
        if done is None or new_dir.exists():
            return False
        reason = _changed_inputs(spec, cfg, old_dir, done[0])
        if reason:
            log.warning(
                "cell %s: the results root holds a v1 cell of the same config (%s), not reused "
                "because %s; computing it anew",
                spec.name,
                old_dir.name,
                reason,
            )
            return False
        try:
            os.rename(old_dir, new_dir)
        except OSError:  # another host adopted it first (the lock may not reach it)
            return results.complete_cell(new_dir) is not None
        summary = dict(done[0], cell_hash=new_dir.name, cell=spec.name)
        summary.update({k: spec.inputs.get(k) for k in ("checkpoint_sha256", "model")})
        migrated = {"identity_version": 1, "hash": old_dir.name}
        results.write_json(new_dir / "cell.json", {**spec.record(), "migrated_from": migrated})
        results.write_json(new_dir / "summary.json", summary)
        if spec.tunes_tau:
            _adopt_study(root, tuning_key(old_cell), spec.tuning_key())
    log.warning(
        "cell %s: adopted the v1 cell %s as %s (cell identity v2: inputs by content, no paths)",
        spec.name,
        old_dir.name,
        new_dir.name,
    )
    return True


def _changed_inputs(spec: CellSpec, cfg: DictConfig, old_dir: Path, summary: dict) -> str:
    """Why the v1 cell's inputs may differ from the job's ('' when they provably do not)."""
    if spec.tunes_tau and cfg.tuning.scope != "cell":
        return "its tau came from its own study, and this job reuses a shared one's"
    changed = [k for k, v in spec.identity["code"].items() if V1_CODE.get(k) != v]
    if changed:
        return f"the {' and '.join(changed)} code changed since (version {spec.identity['code']})"
    computed_at = (old_dir / "summary.json").stat().st_mtime
    if spec.uses_policy:
        path = Path(summary.get("checkpoint_path") or "")
        if not path.is_file():
            return f"its checkpoint {path} no longer exists"
        if file_sha256(path) != spec.inputs["checkpoint_sha256"]:
            return f"its checkpoint {path} is not the one this job uses"
        if path.stat().st_mtime > computed_at:
            return f"its checkpoint {path} was rewritten after the cell was computed"
    if spec.uses_consultant:
        backend: Any = cfg.slm.backend
        model_dir = backend.get("path")
        if model_dir and Path(model_dir).is_dir():
            newer = [f.name for f in Path(model_dir).iterdir() if f.stat().st_mtime > computed_at]
            if newer:
                return f"the model at {model_dir} changed after it was computed ({newer[:3]})"
    return ""


def _adopt_study(root: Path, old_key: str, new_key: str) -> None:
    old, new = root / "tuning" / old_key, root / "tuning" / new_key
    if old.is_dir() and not new.exists():
        try:
            os.rename(old, new)
        except OSError:  # another host moved it first
            pass
