"""Results roots written before the current cell identity keep their work: a complete v1 cell is adopted
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
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from benchmark.cell import CellSpec, digest, tuning_key, without_default_decoding
from benchmark.gates import AlwaysGate, GateSettings
from benchmark.store import Store, file_sha256
from benchmark.tuning import OBJECTIVE_KEYS, Objective

log = logging.getLogger(__name__)
V1_KEYS = ("env", "policy", "slm", "prompt", "gate", "eval", "tuning", "seed", "splits")
# keys added to the configs after v1, removed to compute a cell's v1 hash
V2_KEYS = {
    "env": ("label", "kind"),
    "eval": ("step_records", "workers"),
    "tuning": ("scope", "shared", "clip_tau", *OBJECTIVE_KEYS),  # v1 knew only the reward objective
    "slm": ("decoding",),
    "prompt": ("autopilot", "sampling", "planner_hint", "style"),
    "policy": (
        "source",
        "revision",
        "recipe",
        "resume_every_steps",
        "env_workers",
        "dropout_placement",
        "image_scale",
    ),
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
    for group, key in (("slm", "decoding"), ("prompt", "sampling")):  # mode, source: later than v1
        if isinstance(cell.get(group), dict) and key in cell[group]:
            cell[group][key] = without_default_decoding(cell[group][key])
    gate = cell["gate"]
    if GateSettings.from_config(gate).cls is AlwaysGate:
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
    store = Store.of(cfg.paths)
    old_cell = v1_cell_config(cfg)
    old_hash, new_hash = digest(old_cell), spec.hash

    def record(summary: dict) -> tuple[dict, dict]:
        summary = dict(summary, cell_hash=new_hash, cell=spec.name)
        summary.update({k: spec.inputs.get(k) for k in ("checkpoint_sha256", "model")})
        migrated = {"identity_version": 1, "hash": old_hash}
        return {**spec.record(), "migrated_from": migrated}, summary

    studies = (tuning_key(old_cell), spec.tuning_key()) if spec.tunes_tau else None
    outcome = store.adopt_cell(
        old_hash,
        new_hash,
        lambda old_dir, summary: changed_inputs(spec, cfg, old_dir, summary),
        record,
        studies,
    )
    if outcome == "adopted":
        log.warning(
            "cell %s: adopted the v1 cell %s as %s (cell identity v2: inputs by content, no paths)",
            spec.name,
            old_hash,
            new_hash,
        )
        return True
    if outcome:
        log.warning(
            "cell %s: the results root holds a v1 cell of the same config (%s), not reused "
            "because %s; computing it anew",
            spec.name,
            old_hash,
            outcome,
        )
    return False


def changed_inputs(spec: CellSpec, cfg: DictConfig, old_dir: Path, summary: dict) -> str:
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
        return model_changed(cfg, old_dir)
    return ""


# ----------------------------------------------------------------------------- v2 -> v3
def adopt_v2_cell(spec: CellSpec, cfg: DictConfig, checkpoint: Path | None) -> bool:
    """Move the complete v2 cell equal to `spec` (and its tuning study) to `spec`'s v3 dir.

    v3 (this release) names the policy by its weights and loading settings instead of the zip's
    SHA-256, and a local model by every byte of its weights (not the first and last MB, nor
    finetune.json's timings). A v2 cell is provably the v3 cell a job asks for when its v2 hash,
    computed from the job's config and inputs, is the job's (the same config, code versions and
    checkpoint file: its SHA-256 is in the v2 hash) and a local model's files were last written
    before the cell's summary (the v2 fingerprint did not see a change in their middle)."""
    from benchmark.build import locate_inputs

    if spec.version < 3:
        return False
    try:
        legacy = locate_inputs(spec, cfg, checkpoint, legacy=True)
    except Exception as exc:  # noqa: BLE001 - no old identity to compute: nothing to adopt
        log.debug("cell %s: no v2 identity (%s)", spec.name, exc)
        return False
    if legacy is None or legacy.hash == spec.hash:
        return False
    store = Store.of(cfg.paths)
    new_hash = spec.hash

    def record(summary: dict) -> tuple[dict, dict]:
        summary = dict(summary, cell_hash=new_hash, cell=spec.name)
        summary.update({k: spec.inputs.get(k) for k in ("checkpoint_sha256", "model")})
        summary["policy_weights"] = spec.inputs.get("policy_weights")
        migrated = {"identity_version": 2, "hash": legacy.hash}
        return {**spec.record(), "migrated_from": migrated}, summary

    studies = None
    if spec.tunes_tau:
        studies = (str(legacy.inputs["tau_study"]), str(spec.inputs["tau_study"]))
    outcome = store.adopt_cell(
        legacy.hash, new_hash, lambda old_dir, _: model_changed(cfg, old_dir), record, studies
    )
    if outcome == "adopted":
        log.warning(
            "cell %s: adopted the v2 cell %s as %s (cell identity v3: the policy by its weights, "
            "a local model by all of its bytes)",
            spec.name,
            legacy.hash,
            new_hash,
        )
        return True
    if outcome:
        log.warning(
            "cell %s: the results root holds a v2 cell of the same config and inputs (%s), not "
            "reused because %s; computing it anew",
            spec.name,
            legacy.hash,
            outcome,
        )
    return False


def model_changed(cfg: DictConfig, old_dir: Path) -> str:
    """Why the local model's weights may differ from those the cell used ('' when not)."""
    if "slm" not in cfg or cfg.get("gate", {}).get("name") == "never":
        return ""
    model_dir = local_model_dir(cfg)
    if model_dir is None:
        return ""
    computed_at = (old_dir / "summary.json").stat().st_mtime
    newer = [f.name for f in model_dir.iterdir() if f.stat().st_mtime > computed_at]
    if newer:
        return f"the model at {model_dir} changed after it was computed ({newer[:3]})"
    return ""


def local_model_dir(cfg: DictConfig) -> Path | None:
    """The directory of the consultant's local model (None: a hub model, a server, no model)."""
    from hydra.utils import get_class

    backend = OmegaConf.to_container(cfg.slm.backend, resolve=True)
    target = get_class(str(backend.pop("_target_")))
    return target.local_dir(**backend)
