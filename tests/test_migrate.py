"""Results roots of earlier releases (benchmark.migrate, the one module that knows their layouts):
PPO checkpoint directories of the old name are renamed once; retired layouts (v1 cells, the
SQLite response cache) are named with the last release that reads them; and no other module
handles an old layout. Cells of identity v2: tests/test_identity.py."""

from __future__ import annotations

import ast
import json
import logging
import re
from pathlib import Path

from benchmark import migrate
from benchmark.build import prepare
from benchmark.job import run_job
from benchmark.policy.checkpoints import MARKER, checkpoint_dir, intact
from benchmark.seeds import Splits
from benchmark.store import Store, file_sha256
from tests.conftest import compose_cfg

PACKAGE = Path(__file__).resolve().parents[1] / "benchmark"
PPO = ["env=empty5x5_random", "gate=never", "policy.checkpoint=final"]


def _old_checkpoints(cfg) -> Path:
    """A complete checkpoint directory under the name of the suite's first day."""
    old = migrate.old_checkpoint_dir(cfg)
    old.mkdir(parents=True)
    (old / "final.zip").write_bytes(b"weights")
    sha = file_sha256(old / "final.zip")
    (old / MARKER).write_text(json.dumps({"checkpoints": {"final": sha}}))
    return old


def test_a_checkpoint_dir_of_the_old_name_is_renamed_once_by_the_job(tmp_path, caplog):
    cfg = compose_cfg(tmp_path, *PPO, "train_only=true")
    old = _old_checkpoints(cfg)
    new = checkpoint_dir(cfg)
    assert old != new and not new.exists()
    from benchmark.plan import plan_sweep

    (planned,) = plan_sweep([f"paths.root={tmp_path}", *PPO, "tracking=none"]).cells
    assert planned.note == migrate.checkpoint_note(cfg, Splits()) and old.name in planned.note
    caplog.set_level(logging.WARNING)
    out = run_job(cfg, tmp_path / "job", multirun=False)  # would train (minutes) if not found
    assert out["checkpoint_path"] == str(new / "final.zip")
    assert not old.exists() and intact(new)
    assert "renamed to " + new.name in caplog.text
    caplog.clear()
    assert not migrate.adopt_checkpoint_dir(cfg)  # once
    assert "renamed" not in caplog.text and migrate.checkpoint_note(cfg, Splits()) is None


def test_a_checkpoint_dir_of_the_old_name_is_not_taken_for_other_validation_seeds(tmp_path, caplog):
    """The old name did not record which validation seeds picked `best`."""
    cfg = compose_cfg(tmp_path, *PPO, "splits.validation=[0,50]", "tuning.n_episodes=20")
    splits = prepare(cfg)[1]
    assert splits != Splits()
    old = _old_checkpoints(cfg)
    caplog.set_level(logging.WARNING)
    assert not migrate.adopt_checkpoint_dir(cfg, splits)
    assert old.exists() and not checkpoint_dir(cfg, splits).exists()
    assert "not reused" in caplog.text


def test_a_policy_from_elsewhere_never_renames_the_cache(tmp_path):
    cfg = compose_cfg(tmp_path, *PPO, f"policy.path={tmp_path / 'mine.zip'}")
    old = _old_checkpoints(cfg)
    assert not migrate.adopt_checkpoint_dir(cfg) and old.exists()


def _v1_cell(root: Path) -> Path:
    """A cell as the suite's first day wrote it: cell.json without an identity."""
    cell = root / "cells" / "0123456789ab"
    cell.mkdir(parents=True)
    (cell / "cell.json").write_text(json.dumps({"name": "x", "config": {"env": {}}}))
    return cell


def test_the_plan_names_v1_cells_and_the_last_release_that_reads_them(tmp_path, caplog):
    from benchmark.plan import plan_sweep

    _v1_cell(tmp_path)
    failed = tmp_path / "cells" / "ba9876543210"  # failed before its cell.json: not v1
    failed.mkdir()
    (failed / "error.json").write_text(json.dumps({"config": {"env": {}}}))
    assert [c.dir.name for c in migrate.v1_cells(Store(tmp_path).cells())] == ["0123456789ab"]
    caplog.set_level(logging.WARNING)
    plan_sweep([f"paths.root={tmp_path}", *PPO, "tracking=none"])
    assert "1 cell(s) of identity v1" in caplog.text
    assert migrate.LAST_READING in caplog.text
    assert "7a2be44" in migrate.LAST_READING  # a commit that still reads them


def test_a_job_that_would_use_the_sqlite_response_cache_warns_once(tmp_path, caplog):
    over = ["env=empty5x5_random", "method=slm_only", "slm=oracle", "slm.cache=true"]
    cfg = compose_cfg(tmp_path, *over)
    spec = prepare(cfg)[2]
    old = Store.of(cfg.paths).cache / migrate.SQLITE_CACHE
    old.parent.mkdir(parents=True)
    old.write_bytes(b"SQLite format 3\0")
    caplog.set_level(logging.WARNING)
    migrate.retired_layouts(cfg, spec)
    migrate.retired_layouts(cfg, spec)
    warned = [r.getMessage() for r in caplog.records if "no longer read" in r.getMessage()]
    assert len(warned) == 1 and migrate.LAST_READING in warned[0] and str(old) in warned[0]
    assert old.read_bytes() == b"SQLite format 3\0"  # never changed


# identifiers of old-layout handling: a name (function, class, variable, argument, attribute)
# that says legacy, v1 or v2
OLD_LAYOUT_NAME = re.compile(r"(^|_)(legacy|v1|v2)(_|$)", re.IGNORECASE)


def _names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return names


def test_no_module_but_migrate_handles_an_old_layout():
    """Old layouts live in benchmark/migrate.py only: any other module that names one (a
    `legacy` flag, a `v2_...` helper) is reading an old layout on its own."""
    found = {
        str(path.relative_to(PACKAGE.parent)): sorted(hits)
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "migrate.py" or path.parent != PACKAGE
        if (hits := {n for n in _names(ast.parse(path.read_text())) if OLD_LAYOUT_NAME.search(n)})
    }
    assert not found, f"old layouts handled outside benchmark/migrate.py: {found}"
    assert OLD_LAYOUT_NAME.search("adopt_v2_cell") and OLD_LAYOUT_NAME.search("legacy")
    assert not OLD_LAYOUT_NAME.search("rev2") and not OLD_LAYOUT_NAME.search("v2x")
