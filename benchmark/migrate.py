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
  then the marker holds the current fingerprint (no re-fine-tuning).

Retired, named in the migration's report with the last release that reads them:
- cells of identity v1 (paths in the identity; from the suite's first day; LAST_READING):
  adopting one needed a list of every config key added since, kept up to date forever, and by
  now only PPO-only v1 cells qualified (every v1 cell that asked a consultant has older prompt
  code), which take seconds to compute anew;
- cells of identity v2 (a policy by its zip's SHA-256, a local model by the size and first and
  last MB of each weight file; the identity of one day's results; LAST_ADOPTING_V2): adopting one
  rebuilt its job config from its cell.json, laid every key added since at the value v2 ran
  with, and kept the v2 hash code frozen here; computed anew when a sweep asks for them;
- the SQLite response cache (`<paths.cache>/responses.sqlite`; LAST_READING): a cache, not
  results (an answer not found is asked again), whose migration ran through the response cache's
  compaction protocol."""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

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
LAST_ADOPTING_V2 = "benchmark 0.2.0 up to commit 1eb267b"  # its migration adopts v2 cells
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
    surveyed)."""
    store = Store.of(paths)
    migration = Migration(Path(str(store.root)), applied=apply)
    _checkpoint_dirs(paths, store, migration)
    _finetuned_markers(store, migration)
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


# ----------------------------------------------------------------------------- retired layouts
def v1_cells(cells: list[StoredCell]) -> list[StoredCell]:
    """The cells of identity v1 among `cells`: a cell.json without an identity."""
    return [c for c in cells if c.identity is None and (c.dir / "cell.json").is_file()]


def v2_cells(cells: list[StoredCell]) -> list[StoredCell]:
    """The cells of identity v2 among `cells`."""
    return [c for c in cells if (c.identity or {}).get("identity_version") == 2]


def retired_cells(cells: list[StoredCell], root: Path) -> list[str]:
    """What the migration says, one line each, about the cells of a retired identity (v1, v2)
    among `cells` of the results root `root`."""
    notes = []
    for version, old, last, since in (
        ("v1", v1_cells(cells), LAST_READING, "the suite's first day"),
        ("v2", v2_cells(cells), LAST_ADOPTING_V2, "the policy by its zip's SHA-256"),
    ):
        if old:
            notes.append(
                f"{len(old)} cell(s) of identity {version} ({since}) under {old[0].dir.parent} "
                "are no longer read: this release computes their cells anew when a sweep asks "
                f"for them and never deletes them. To adopt those still valid instead, run "
                f"`python -m benchmark.migrate {root}` once with {last} before any sweep of "
                "this release there."
            )
    return notes


def _retired(store: Store, migration: Migration) -> None:
    """Name what this release no longer reads, and the last release that does."""
    migration.left.extend(retired_cells(store.cells(), migration.root))
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
            "checkpoint directories renamed, fine-tuned models' markers rewritten; moves and "
            "renames only, nothing recomputed or deleted; what it no longer reads (cells of "
            "identity v1 and v2, the SQLite response cache) named with the last release that "
            "reads it. A sweep runs it at its start when the root's layout.json is missing or "
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
