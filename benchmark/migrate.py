"""Results roots of earlier releases: the one module that knows their layouts. Everything else
reads and writes the current layout only, and calls here where an older artifact may stand in
for a current one. Each is brought into place lazily, once, with a warning, and only when it
provably did not change; nothing is deleted and nothing is silently reused.

Kept (worth the code: each stands for hours of training or evaluation):
- cells of identity v2 (policy by its zip's SHA-256, a local model by the size and first and
  last MB of each weight file): adopted under their v3 hash (`adopt_cell`, from the job;
  `adoptable`, the plan's read-only view);
- fine-tuned models whose COMPLETE marker holds the v2 fingerprint (`old_marker_holds`, from
  finetune.store);
- PPO checkpoint directories named before the validation split and the training version entered
  their hash: renamed to their current name (`adopt_checkpoint_dir`, from the job and
  fine-tuning; `checkpoint_note`, the plan's view).

Retired (the last release that reads them: LAST_READING), with a message where they are met:
- cells of identity v1 (paths in the identity; from the suite's first day): adopting one needed
  a list of every config key added since, kept up to date forever, and by now only PPO-only v1
  cells qualified (every v1 cell that asked a consultant has older prompt code), which take
  seconds to compute anew. `python -m benchmark.plan` names them (`retired_cells`);
- the SQLite response cache (`<paths.cache>/responses.sqlite`): a cache, not results (an answer
  not found is asked again), whose migration ran through the response cache's compaction
  protocol. A job that would use it warns (`retired_layouts`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from benchmark.cell import CellSpec, digest, tuning_key
from benchmark.seeds import DEFAULT_SPLITS, Splits
from benchmark.store import Store, StoredCell, target_lock

log = logging.getLogger(__name__)

# the last release that reads the retired layouts (no later code does)
LAST_READING = "benchmark 0.1.0 up to commit 7a2be44"
_MB = 1 << 20


# ----------------------------------------------------------------------------- v2 cells
def v2_fingerprint(directory: Path) -> str:
    """A local model's identity in v2 cells: every config-like file (finetune.json included) and
    of each weight file only its size and first and last MB (a change in the middle of a large
    weight file went unseen: why v3 hashes every byte). Frozen here as v2 computed it."""
    h = hashlib.sha256()
    for f in sorted(directory.iterdir()):
        if not f.is_file():
            continue
        if f.suffix in (".json", ".jinja", ".txt", ".model") and f.stat().st_size < 64 * _MB:
            h.update(json.dumps([f.name, f.stat().st_size]).encode())
            h.update(f.read_bytes())
        elif f.suffix in (".safetensors", ".bin", ".gguf"):
            size = f.stat().st_size
            h.update(json.dumps([f.name, size]).encode())
            with f.open("rb") as fh:
                h.update(fh.read(_MB))
                fh.seek(max(0, size - _MB))
                h.update(fh.read(_MB))
    return h.hexdigest()[:16]


def v2_identity(spec: CellSpec, model: str | None, study: str | None) -> dict[str, Any]:
    """The identity v2 gave the cell `spec` (located: its v3 inputs known), given the v2 model
    identity and tuning study: v3's but for the version, the policy (the zip's SHA-256 instead of
    its weights' digest), the model and the study."""
    identity = json.loads(json.dumps(spec.identity))
    identity["identity_version"] = 2
    if "policy" in identity:
        identity["policy"] = {"checkpoint_sha256": spec.inputs["checkpoint_sha256"]}
    backend = identity.get("slm", {}).get("backend", {})
    if "weights" in backend:
        backend["weights"] = model
    if "tuning" in identity:
        identity["tuning"]["study"] = study
    return identity


def v2_model(cfg: DictConfig, model: str | None) -> str | None:
    """The v2 identity of the consultant's model whose v3 identity is `model`: a local model by
    its v2 fingerprint; a hub model by id and revision in both versions."""
    if not (isinstance(model, str) and model.startswith("hf-local:")):
        return model
    directory = local_model_dir(cfg)
    if directory is None:
        raise ValueError(f"no local directory for the model {model}")
    return "hf-local:" + v2_fingerprint(directory)


def v2_hash(spec: CellSpec, cfg: DictConfig) -> tuple[str, str | None]:
    """(v2 hash, v2 tuning study) of the located cell `spec`; the study is that of the cell
    whose validation study supplies its tau (tuning.scope=shared) when not its own."""
    from benchmark.build import locate_inputs, policy_checkpoint, prepare, shared_tuning_config

    model = v2_model(cfg, spec.inputs.get("model")) if spec.uses_consultant else None
    study = None
    if spec.tunes_tau:
        source_cfg, source = shared_tuning_config(cfg), spec
        if source_cfg is not None:
            task, splits, source_spec = prepare(source_cfg)
            checkpoint = policy_checkpoint(source_cfg, task, splits, train=False)
            source = locate_inputs(source_spec, source_cfg, checkpoint)
            if source is None:
                raise ValueError("the cell that supplies its tau has no inputs yet")
            cfg = source_cfg
        source_model = v2_model(cfg, source.inputs.get("model")) if source.uses_consultant else None
        study = tuning_key(v2_identity(source, source_model, None))
    return digest(v2_identity(spec, model, study)), study


def adopt_cell(spec: CellSpec, cfg: DictConfig) -> bool:
    """Move the complete v2 cell equal to `spec` (and its tuning study) to `spec`'s v3 dir.

    v3 names the policy by its weights and loading settings instead of the zip's SHA-256, and a
    local model by every byte of its weights (not the first and last MB, nor finetune.json's
    timings). A v2 cell is provably the v3 cell a job asks for when its v2 hash, computed from
    the job's config and inputs, is the job's (the same config, code versions and checkpoint
    file: its SHA-256 is in the v2 hash) and a local model's files were last written before the
    cell's summary (the v2 fingerprint did not see a change in their middle)."""
    try:
        old_hash, old_study = v2_hash(spec, cfg)
    except Exception as exc:  # noqa: BLE001 - no old identity to compute: nothing to adopt
        log.debug("cell %s: no v2 identity (%s)", spec.name, exc)
        return False
    if old_hash == spec.hash:
        return False
    new_hash = spec.hash

    def record(summary: dict) -> tuple[dict, dict]:
        summary = dict(summary, cell_hash=new_hash, cell=spec.name)
        summary.update({k: spec.inputs.get(k) for k in ("checkpoint_sha256", "model")})
        summary["policy_weights"] = spec.inputs.get("policy_weights")
        migrated = {"identity_version": 2, "hash": old_hash}
        return {**spec.record(), "migrated_from": migrated}, summary

    studies = (str(old_study), str(spec.inputs["tau_study"])) if spec.tunes_tau else None
    outcome = Store.of(cfg.paths).adopt_cell(
        old_hash, new_hash, lambda old_dir, _: model_changed(cfg, old_dir), record, studies
    )
    if outcome == "adopted":
        log.warning(
            "cell %s: adopted the v2 cell %s as %s (cell identity v3: the policy by its weights, "
            "a local model by all of its bytes)",
            spec.name,
            old_hash,
            new_hash,
        )
        return True
    if outcome:
        log.warning(
            "cell %s: the results root holds a v2 cell of the same config and inputs (%s), not "
            "reused because %s; computing it anew",
            spec.name,
            old_hash,
            outcome,
        )
    return False


def adoptable(spec: CellSpec, cfg: DictConfig) -> str | None:
    """The plan's note for a complete v2 cell a job would adopt as the located cell `spec`
    (None: none); read-only."""
    store = Store.of(cfg.paths)
    if store.cell_dir(spec.hash).exists():
        return None
    try:
        old_hash = v2_hash(spec, cfg)[0]
    except Exception:  # noqa: BLE001 - no old identity: nothing to adopt
        return None
    old_dir = store.cell_dir(old_hash)
    if old_hash == spec.hash or store.complete_cell(old_hash) is None:
        return None
    if model_changed(cfg, old_dir):
        return None
    return f"v2 cell {old_hash}, adopted as this one when the sweep runs"


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


# ----------------------------------------------------------------------------- fine-tuned models
def old_marker_holds(model_dir: Path, marker: dict) -> bool:
    """A fine-tuned model's COMPLETE marker written before markers recorded their
    `fingerprint_version` holds the v2 fingerprint of its files: checked as it was made, so the
    model is not fine-tuned again."""
    return "fingerprint_version" not in marker and marker.get("fingerprint") == v2_fingerprint(
        model_dir
    )


# ----------------------------------------------------------------------------- PPO checkpoints
def old_checkpoint_dir(cfg: DictConfig) -> Path:
    """Where the suite's first day put the checkpoints of `cfg`'s policy: the hash of the recipe
    alone, without the validation split and the training version."""
    from benchmark.policy.checkpoints import recipe_payload, short_hash

    return Store.of(cfg.paths).checkpoint_dir(str(cfg.env.name), short_hash(recipe_payload(cfg)))


def adopt_checkpoint_dir(cfg: DictConfig, splits: Splits = DEFAULT_SPLITS) -> bool:
    """Rename a complete checkpoint directory of the old name to its current one, once, under
    its build lock. Only with the default splits (the old hash did not record which validation
    seeds picked `best`; the default ones are all the presets ever used) and training version 1
    (the code that trained it). A policy from elsewhere (`policy.path`, `policy.source`) never
    comes from the cache."""
    from benchmark.policy.checkpoints import checkpoint_dir, intact
    from benchmark.policy.train import TRAINING_VERSION

    if cfg.policy.get("path") or cfg.policy.get("source"):
        return False
    old, new = old_checkpoint_dir(cfg), checkpoint_dir(cfg, splits)
    if TRAINING_VERSION != 1 or old == new or not intact(old) or intact(new):
        return False
    if splits != DEFAULT_SPLITS:
        log.warning(
            "%s was trained before checkpoint identities recorded the validation split; this job "
            "uses splits.validation=%s, so it is not reused: training %s",
            old,
            splits.bounds("validation"),
            new.name,
        )
        return False
    with target_lock(new):
        if intact(new):
            return False
        try:
            os.rename(old, new)
        except OSError:  # another host adopted it first (the lock may not reach it)
            return intact(new)
    log.warning(
        "checkpoint directory %s renamed to %s (its name now holds the validation split and the "
        "training version %d; the weights are unchanged)",
        old.name,
        new.name,
        TRAINING_VERSION,
    )
    return True


def checkpoint_note(cfg: DictConfig, splits: Splits) -> str | None:
    """The plan's note for a policy whose checkpoints stand under the old name, which a job
    renames (None: none); read-only."""
    from benchmark.policy.checkpoints import checkpoint_dir, intact
    from benchmark.policy.train import TRAINING_VERSION

    if cfg.policy.get("path") or cfg.policy.get("source"):
        return None
    old = old_checkpoint_dir(cfg)
    if TRAINING_VERSION != 1 or splits != DEFAULT_SPLITS or old == checkpoint_dir(cfg, splits):
        return None
    if not intact(old):
        return None
    return f"policy trained under an earlier release's name {old.name}, renamed when the sweep runs"


# ----------------------------------------------------------------------------- retired layouts
def v1_cells(cells: list[StoredCell]) -> list[StoredCell]:
    """The cells of identity v1 among `cells`: a cell.json without an identity."""
    return [c for c in cells if c.identity is None and (c.dir / "cell.json").is_file()]


def retired_cells(cells: list[StoredCell]) -> str:
    """What the plan says about the cells of a retired identity (v1) among `cells` ('' when
    there are none)."""
    old = v1_cells(cells)
    if not old:
        return ""
    return (
        f"{len(old)} cell(s) of identity v1 (the suite's first day) under "
        f"{old[0].dir.parent} are no longer read: the last release that adopts them is "
        f"{LAST_READING}. Run the sweep once with it to adopt those still valid, or leave "
        "them: this release computes their cells anew and never deletes them."
    )


SQLITE_CACHE = "responses.sqlite"  # the response cache before its directory of shards
_warned: set[Path] = set()


def retired_layouts(cfg: DictConfig, spec: CellSpec) -> None:
    """Warn (once per process) about an artifact of a retired layout this job would have used:
    the SQLite response cache."""
    if not spec.uses_consultant or not cfg.slm.get("cache", False):
        return
    old = Store.of(cfg.paths).cache / SQLITE_CACHE
    if old in _warned or not old.exists():
        return
    _warned.add(old)
    log.warning(
        "%s is a response cache of an earlier layout, no longer read: its answers are asked "
        "again. The last release that reads it is %s (a job of it folds the file into %s on "
        "first use: run one there to keep its answers); then delete it, or leave it.",
        old,
        LAST_READING,
        Store.of(cfg.paths).responses_dir(),
    )


# ----------------------------------------------------------------------------- the job
def before_job(cfg: DictConfig, spec: CellSpec, splits: Splits) -> None:
    """What a job asks of earlier releases' layouts before it locates its inputs: the PPO
    checkpoint directories of its policy (and of the cell whose study supplies its tau) under
    their current names, and a warning about retired layouts it would have used."""
    from benchmark.build import prepare, shared_tuning_config

    if spec.uses_policy:
        adopt_checkpoint_dir(cfg, splits)
    source = shared_tuning_config(cfg) if spec.tunes_tau else None
    if source is not None:
        _, source_splits, source_spec = prepare(source)
        if source_spec.uses_policy:
            adopt_checkpoint_dir(source, source_splits)
    retired_layouts(cfg, spec)
