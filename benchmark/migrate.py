"""Results roots of earlier releases: the one module that knows their layouts. Everything else
reads and writes the current layout only. A root is brought up to this release's layout once
(`python -m benchmark.migrate ROOT`, which a sweep, or a job, runs at its start when the root's
`layout.json` is missing or older: `ensure_current`); a job on a root of the current layout
never enters this module. Nothing is deleted and nothing is silently reused: each artifact is
moved or renamed into place, or has its marker rewritten, only when it provably did not change,
and every step is said. Each step is idempotent, so a migration killed half-way resumes where it
stopped when run again; layout.json is written last.

Kept (worth the code: each stands for hours of training or evaluation):
- PPO checkpoint directories named before the validation split and the training version
  entered their hash (the suite's first day): renamed to their current name, found by their
  config.json;
- fine-tuned models whose COMPLETE marker holds the v2 fingerprint: checked as it was made,
  then the marker holds the current fingerprint (no re-fine-tuning);
- cells of identity v2 (policy by its zip's SHA-256, a local model by the size and first and
  last MB of each weight file): the job config rebuilt from the config parts of their cell.json,
  and adopted under their v3 hash when that config gives back their v2 hash (proof it is the
  same cell) and a local model's files were not written after the cell's summary.

Retired (the last release that reads them: LAST_READING), named in the migration's report:
- cells of identity v1 (paths in the identity; from the suite's first day): adopting one needed
  a list of every config key added since, kept up to date forever, and by now only PPO-only v1
  cells qualified (every v1 cell that asked a consultant has older prompt code), which take
  seconds to compute anew;
- the SQLite response cache (`<paths.cache>/responses.sqlite`): a cache, not results (an answer
  not found is asked again), whose migration ran through the response cache's compaction
  protocol."""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from benchmark.cell import (
    ADDED_KEY_DEFAULTS,
    DECODING_DEFAULTS,
    CellSpec,
    digest,
    tuning_key,
)
from benchmark.consultants.fingerprint import MARKER, marker
from benchmark.seeds import DEFAULT_SPLITS
from benchmark.store import (
    LAYOUT_FILE,
    LAYOUT_VERSION,
    Store,
    StoredCell,
    read_json,
    target_lock,
    write_json_atomic,
)

log = logging.getLogger(__name__)

# the last release that reads the retired layouts (no later code does)
LAST_READING = "benchmark 0.1.0 up to commit 7a2be44"
SQLITE_CACHE = "responses.sqlite"  # the response cache before its directory of shards
_MB = 1 << 20


# ----------------------------------------------------------------------------- the root
@dataclass
class Migration:
    """What bringing a results root to this release's layout did (or, surveyed, would do)."""

    root: Path
    applied: bool = True
    moved: list[str] = field(default_factory=list)  # moved, renamed or rewritten, one a line
    left: list[str] = field(default_factory=list)  # left in place, and why
    cells: dict[str, str] = field(default_factory=dict)  # v3 hash -> the v2 cell adopted as it
    checkpoints: dict[str, str] = field(default_factory=dict)  # current dir -> dir of the old name

    def lines(self) -> list[str]:
        verb = "brought" if self.applied else "would be brought"
        head = (
            f"results root {self.root} {verb} to layout {LAYOUT_VERSION}: {len(self.moved)} "
            f"artifact(s) of earlier releases moved into place, {len(self.left)} left as they are"
        )
        return [head, *(f"  {line}" for line in self.moved + self.left)]

    def record(self) -> dict[str, Any]:
        """What layout.json keeps of it."""
        return {
            "written": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "moved": len(self.moved),
            "left": self.left,
        }


def ensure_current(paths: Any, force: bool = False, say: bool = True) -> Migration | None:
    """Bring the results root of `paths` (a config's `paths` node) to this release's layout,
    once: nothing when its layout.json says it is (unless `force`), else every artifact of an
    earlier layout migrated, then layout.json written; what it did is logged (`say`). One
    process does it (the root's layout lock); the others wait, then find it done."""
    paths = _plain(paths)
    store = Store.of(paths)
    if not force and store.layout_current():
        return None
    with store.layout_lock():
        if not force and store.layout_current():
            return None
        _refuse_newer(store)
        migration = migrate_root(paths)
        store.write_layout(migration.record())
    if say and (migration.moved or migration.left):
        for line in migration.lines():
            log.warning("%s", line)
    return migration


def pending(paths: Any) -> Migration | None:
    """What migrating the root would do (None: it is of this release's layout); read-only, for
    `python -m benchmark.plan`."""
    paths = _plain(paths)
    store = Store.of(paths)
    if store.layout_current():
        return None
    _refuse_newer(store)
    return migrate_root(paths, apply=False)


def migrate_root(paths: Mapping[str, Any], apply: bool = True) -> Migration:
    """Every artifact of an earlier layout under `paths`, brought into place (`apply` False: only
    surveyed). Checkpoint directories and model markers first: the cells' inputs are found
    under their current names."""
    store = Store.of(paths)
    migration = Migration(Path(str(store.root)), applied=apply)
    _checkpoint_dirs(paths, store, migration)
    _finetuned_markers(store, migration)
    _cells(paths, store, migration)
    _retired(store, migration)
    return migration


def _refuse_newer(store: Store) -> None:
    version = store.layout_version()
    if version is not None and version > LAYOUT_VERSION:
        raise RuntimeError(
            f"results root {store.root} is of layout {version} ({LAYOUT_FILE}), newer than this "
            f"release's {LAYOUT_VERSION}: use the release that wrote it, or another paths.root"
        )


def _plain(paths: Any) -> dict[str, Any]:
    if OmegaConf.is_config(paths):
        return OmegaConf.to_container(paths, resolve=True)
    return dict(paths)


# ----------------------------------------------------------------------------- PPO checkpoints
def _checkpoint_dirs(paths: Mapping[str, Any], store: Store, migration: Migration) -> None:
    """Rename each complete checkpoint directory of the suite's first day (its config.json holds
    no validation split: the hash of the recipe alone) to its current name, under the current
    name's build lock. Only to the name of the default splits (the old name did not record
    which validation seeds picked `best`; the default ones are all the presets ever used) and
    with training version 1 (the code that trained it)."""
    from benchmark.policy.checkpoints import checkpoint_dir, intact, recipe_payload, short_hash
    from benchmark.policy.train import TRAINING_VERSION

    if store.checkpoints is None or not store.checkpoints.is_dir():
        return
    for old in sorted(store.checkpoints.iterdir()):
        config = read_json(old / "config.json") if old.is_dir() else None
        if old.name.startswith(".") or not isinstance(config, dict) or "validation" in config:
            continue  # not a checkpoint directory, or one of the current layout
        try:
            cfg = OmegaConf.create({"env": config["env"], "policy": config["policy"]})
            cfg.paths = paths
            named = f"{config['env']['name']}-{short_hash(recipe_payload(cfg))}"
            new = checkpoint_dir(cfg, DEFAULT_SPLITS)
        except Exception as exc:  # noqa: BLE001 - a config.json this release cannot read
            migration.left.append(f"checkpoint directory {old.name}: its config.json ({exc})")
            continue
        if old == new:  # renamed by an earlier migration (its config.json stays as trained)
            continue
        why = _not_renamed(old, new, named, intact, TRAINING_VERSION)
        if why:
            migration.left.append(f"checkpoint directory {old.name}: not renamed, {why}")
            continue
        if migration.applied:
            with target_lock(new):
                if not intact(new):
                    try:
                        os.rename(old, new)
                    except OSError:  # another host renamed it first (the lock may not reach it)
                        if not intact(new):
                            raise
        migration.checkpoints[str(new)] = str(old)
        migration.moved.append(
            f"checkpoint directory {old.name} renamed to {new.name} (its name now holds the "
            f"validation split and the training version {TRAINING_VERSION}; the weights are "
            "unchanged)"
        )


def _not_renamed(old: Path, new: Path, named: str, intact: Any, training_version: int) -> str:
    """Why the first-day checkpoint directory `old` keeps its name ('' when it is renamed)."""
    if old.name != named:
        return f"its name is not the hash of its config.json's recipe ({named})"
    if training_version != 1:
        return f"trained by training version 1, this release trains version {training_version}"
    if not intact(old):
        return "incomplete, or a zip no longer matches its COMPLETE manifest"
    if intact(new):
        return f"{new.name} exists already"
    return ""


# ----------------------------------------------------------------------------- fine-tuned models
def old_marker_holds(model_dir: Path, recorded: dict) -> bool:
    """A fine-tuned model's COMPLETE marker written before markers recorded their
    `fingerprint_version` holds the v2 fingerprint of its files: checked as it was made."""
    return "fingerprint_version" not in recorded and recorded.get("fingerprint") == v2_fingerprint(
        model_dir
    )


def _finetuned_markers(store: Store, migration: Migration) -> None:
    """A fine-tuned model whose marker of an earlier release still holds gets a marker of the
    current fingerprint (the old one kept in it), so it is not fine-tuned again."""
    models = store.models_dir("finetuned") if store.models is not None else None
    if models is None or not models.is_dir():
        return
    for model_dir in sorted(models.iterdir()):
        recorded = read_json(model_dir / MARKER) if model_dir.is_dir() else None
        if model_dir.name.startswith(".") or not isinstance(recorded, dict):
            continue
        if "fingerprint_version" in recorded:
            continue
        if not old_marker_holds(model_dir, recorded):
            migration.left.append(
                f"fine-tuned model {model_dir.name}: its files changed since its {MARKER} of an "
                "earlier release was written; fine-tuned again when a job asks for it"
            )
            continue
        if migration.applied:
            old = {"fingerprint": recorded.get("fingerprint")}
            write_json_atomic(
                model_dir / MARKER,
                {**recorded, **marker(model_dir, store.digests_dir()), "migrated_from": old},
            )
        migration.moved.append(
            f"fine-tuned model {model_dir.name}: its {MARKER} now holds the fingerprint of every "
            "byte (its files checked against the earlier fingerprint; not fine-tuned again)"
        )


# ----------------------------------------------------------------------------- v2 cells
def _cells(paths: Mapping[str, Any], store: Store, migration: Migration) -> None:
    """Adopt each complete cell of identity v2 under its v3 hash (its tuning study too)."""
    from benchmark.config import session

    old = [c for c in store.cells() if (c.identity or {}).get("identity_version") == 2]
    if not old:
        return
    with session() as compose:
        for stored in old:
            label = f"v2 cell {stored.hash} ({(stored.config or {}).get('env', {}).get('name')})"
            if not stored.complete:
                migration.left.append(f"{label}: incomplete, computed anew when asked for")
                continue
            found = _rebuilt(stored, paths, compose)
            if isinstance(found, str):
                migration.left.append(f"{label}: not adopted, {found}; computed anew when asked")
                continue
            _adopt(stored, *found, store, migration)


def _rebuilt(
    stored: StoredCell, paths: Mapping[str, Any], compose: Any
) -> tuple[CellSpec, DictConfig] | str:
    """The v3 cell (located) and the job config of the v2 cell `stored`, rebuilt from the
    config parts its cell.json holds and proven the same by giving back its v2 hash; else why
    not. A v2 identity holds the checkpoint's SHA-256 and the model's v2 fingerprint, so the
    config found with the same v2 hash evaluates the same policy and model."""
    from benchmark.build import locate_inputs, policy_checkpoint, prepare

    want = digest(stored.identity)
    why = "its config could not be rebuilt by this release"
    for overrides in _choices(stored.config or {}):
        try:
            cfg = _config(overrides, stored.config or {}, paths, compose)
            task, splits, spec = prepare(cfg)
            uses = spec.uses_policy
            checkpoint = policy_checkpoint(cfg, task, splits, train=False) if uses else None
            located = locate_inputs(spec, cfg, checkpoint)
            if located is None:
                why = "its policy checkpoint or model is not found under paths"
                continue
            if v2_hash(located, cfg)[0] == want and stored.hash in (want, located.hash):
                return located, cfg
            why = "its config, as this release reads it, is not the cell it was computed as"
        except Exception as exc:  # noqa: BLE001 - this candidate is not it: the reason kept
            first = (str(exc).strip().splitlines() or [""])[0]
            why = f"its config, as this release reads it, fails ({type(exc).__name__}: {first})"
    return why


# the config groups whose option a stored part is laid over (its `name`, else the most alike)
GROUPS = ("env", "policy", "slm", "prompt", "gate")
_CANDIDATES = 4  # configs tried per cell at most


def _choices(config: dict) -> list[tuple[str, ...]]:
    """The group choices of the job configs the v2 `config` parts may have come from: the
    option of each group its part names, else the two whose keys are most alike."""
    from benchmark.config import options

    choices = []
    for group in GROUPS:
        part = config.get(group)
        if not isinstance(part, dict):
            continue
        names = options(group)
        if str(part.get("name")) in names:
            choices.append([f"{group}={part['name']}"])
        else:
            alike = sorted(names, key=lambda n, g=group, p=part: -_alike(g, n, p))[:2]
            choices.append([f"{group}={n}" for n in alike])
    return list(itertools.islice(itertools.product(*choices), _CANDIDATES))


def _config(
    overrides: tuple[str, ...], config: dict, paths: Mapping[str, Any], compose: Any
) -> DictConfig:
    """The job config of `overrides` with the v2 `config` parts laid over it, keys added since
    v2 at the value that reproduces what v2 computed, and the root's `paths`."""
    cfg = compose(list(overrides))
    OmegaConf.set_struct(cfg, False)
    cfg.paths = dict(paths)
    for key, part in config.items():
        OmegaConf.update(cfg, key, _as_v2_ran(key, part, cfg.get(key)), merge=True)
    return cfg


def _alike(group: str, name: str, part: dict) -> int:
    from benchmark.config import load_yaml, option_file

    keys = set(load_yaml(option_file(group, name))) - {"defaults"}
    return len(keys & set(part)) - len(keys - set(part))


def _as_v2_ran(key: str, part: Any, base: Any) -> Any:
    """A stored config part with the keys added since v2 that the current option has, at the
    value that reproduces what every cell before them computed (they leave the identity there);
    the gate without the tuning objective CellSpec adds to it."""
    from benchmark.policy.checkpoints import ADDED_POLICY_KEY_DEFAULTS

    if not isinstance(part, dict):
        return part
    added = {"policy": ADDED_POLICY_KEY_DEFAULTS, **ADDED_KEY_DEFAULTS}.get(key, {})
    have = set(base) if OmegaConf.is_config(base) or isinstance(base, dict) else set()
    part = {**{k: v for k, v in added.items() if k in have}, **part}
    if key == "gate":
        part.pop("match_objective", None)
    for node, sub in (("slm", "decoding"), ("prompt", "sampling")):
        if key == node and isinstance(part.get(sub), dict):
            part[sub] = {**DECODING_DEFAULTS, **part[sub]}
    return part


def _adopt(stored: StoredCell, spec: CellSpec, cfg: DictConfig, store: Store, m: Migration) -> None:
    old_hash, old_study = v2_hash(spec, cfg)
    new_hash, label = spec.hash, f"v2 cell {old_hash} ({spec.name})"
    if not m.applied:
        exists = store.cell_dir(new_hash).exists() and stored.hash != new_hash
        outcome = "exists" if exists else (model_changed(cfg, stored.dir) or "adopted")
    else:

        def record(summary: dict) -> tuple[dict, dict]:
            summary = dict(summary, cell_hash=new_hash, cell=spec.name)
            summary.update({k: spec.inputs.get(k) for k in ("checkpoint_sha256", "model")})
            summary["policy_weights"] = spec.inputs.get("policy_weights")
            migrated = {"identity_version": 2, "hash": old_hash}
            return {**spec.record(), "migrated_from": migrated}, summary

        studies = (str(old_study), str(spec.inputs["tau_study"])) if spec.tunes_tau else None
        outcome = store.adopt_cell(
            old_hash, new_hash, lambda old_dir, _: model_changed(cfg, old_dir), record, studies
        )
        outcome = outcome or "exists"
    if outcome == "adopted":
        m.cells[new_hash] = old_hash
        m.moved.append(
            f"{label}: adopted as {new_hash} (cell identity v3: the policy by its weights, a "
            "local model by all of its bytes; not recomputed)"
        )
    elif outcome == "exists":
        m.left.append(f"{label}: not adopted, the cell {new_hash} exists already")
    else:
        m.left.append(f"{label}: not adopted because {outcome}; computed anew when asked")


# ----------------------------------------------------------------------------- v2 identities
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


# ----------------------------------------------------------------------------- retired layouts
def v1_cells(cells: list[StoredCell]) -> list[StoredCell]:
    """The cells of identity v1 among `cells`: a cell.json without an identity."""
    return [c for c in cells if c.identity is None and (c.dir / "cell.json").is_file()]


def retired_cells(cells: list[StoredCell]) -> str:
    """What the migration says about the cells of a retired identity (v1) among `cells` (''
    when there are none)."""
    old = v1_cells(cells)
    if not old:
        return ""
    return (
        f"{len(old)} cell(s) of identity v1 (the suite's first day) under "
        f"{old[0].dir.parent} are no longer read: the last release that adopts them is "
        f"{LAST_READING}. Run the sweep once with it to adopt those still valid, or leave "
        "them: this release computes their cells anew and never deletes them."
    )


def _retired(store: Store, migration: Migration) -> None:
    """Name what this release no longer reads, and the last release that does."""
    if note := retired_cells(store.cells()):
        migration.left.append(note)
    old = store.cache / SQLITE_CACHE if store.cache is not None else None
    if old is not None and old.exists():
        migration.left.append(
            f"{old} is a response cache of an earlier layout, no longer read: its answers are "
            f"asked again. The last release that reads it is {LAST_READING} (a job of it folds "
            f"the file into {store.responses_dir()} on first use: run one there to keep its "
            "answers); then delete it, or leave it."
        )


# ----------------------------------------------------------------------------- the command
def root_paths(root: Path, overrides: list[str] = ()) -> dict[str, Any]:
    """The `paths` node of the results root `root` (the other locations under it unless
    `overrides` set them: paths.checkpoints=..., paths.models=..., paths.cache=...)."""
    from benchmark.config import compose

    cfg = compose(list(overrides))
    cfg.paths.root = str(Path(root).expanduser().resolve())
    return _plain(cfg.paths)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmark.migrate",
        description=(
            "Bring a results root of an earlier release to this release's layout, once: "
            "checkpoint directories renamed, fine-tuned models' markers rewritten, v2 cells "
            "adopted under their current hash; moves and renames only, nothing recomputed or "
            "deleted. A sweep runs it at its start when the root's layout.json is missing or "
            "older; run again, it resumes a migration that was stopped."
        ),
    )
    parser.add_argument("root", type=Path, help="the results root (paths.root)")
    parser.add_argument(
        "overrides",
        nargs="*",
        help="paths.checkpoints=DIR, paths.models=DIR, paths.cache=DIR where the root's "
        "sweeps keep them elsewhere",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="say what it would do, change nothing"
    )
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        parser.error(f"results root {str(args.root)!r} is not a directory")
    paths = root_paths(args.root, args.overrides)
    if args.dry_run:
        migration = migrate_root(paths, apply=False)
    else:
        migration = ensure_current(paths, force=True, say=False)  # its lines are printed below
    print("\n".join(migration.lines()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
