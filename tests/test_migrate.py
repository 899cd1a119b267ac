"""Results roots of earlier releases (benchmark.migrate, the one module that knows their layouts):
a root is brought to this release's layout once, by `python -m benchmark.migrate ROOT` or at a
sweep's start, and marked so in layout.json; a job on a current root never enters the module.
PPO checkpoint directories of the old name are renamed, fine-tuned models' old markers rewritten,
retired layouts (v1 and v2 cells, the SQLite response cache) named with the last release that
reads them, and no other module handles an old layout."""

from __future__ import annotations

import ast
import json
import logging
import re
import sys
import threading
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from benchmark import migrate
from benchmark.__main__ import check_root
from benchmark.build import prepare
from benchmark.consultants.fingerprint import FINGERPRINT_VERSION, local_fingerprint
from benchmark.finetune.store import intact as finetuned_intact
from benchmark.job import run_job
from benchmark.policy.checkpoints import (
    MARKER,
    checkpoint_dir,
    intact,
    recipe_payload,
    short_hash,
)
from benchmark.policy.train import as_dict
from benchmark.results import REUSED_FILE
from benchmark.seeds import Splits
from benchmark.store import LAYOUT_FILE, LAYOUT_VERSION, Store, file_sha256
from tests.conftest import compose_cfg

PACKAGE = Path(__file__).resolve().parents[1] / "benchmark"
PPO = ["env=empty5x5_random", "gate=never", "policy.checkpoint=final"]
ORACLE = ["env=higherlower", "gate=always", "slm=oracle", "prompt=basic", "eval.n_episodes=3"]


def _old_checkpoints(cfg) -> Path:
    """A complete checkpoint directory as the suite's first day wrote it: named by the hash of
    the recipe alone, its config.json without the validation split."""
    old = Store.of(cfg.paths).checkpoint_dir(str(cfg.env.name), short_hash(recipe_payload(cfg)))
    old.mkdir(parents=True)
    (old / "final.zip").write_bytes(b"weights")
    sha = file_sha256(old / "final.zip")
    (old / MARKER).write_text(json.dumps({"checkpoints": {"final": sha}}))
    env = OmegaConf.to_container(cfg.env, resolve=True)
    policy = {k: v for k, v in as_dict(cfg.policy).items() if k != "checkpoint"}
    (old / "config.json").write_text(json.dumps({"env": env, "policy": policy}))
    return old


def _migrate(root: Path, *args: str, capsys) -> str:
    assert migrate.main([str(root), *args]) == 0
    return capsys.readouterr().out


def test_the_command_renames_a_checkpoint_dir_of_the_old_name_once(tmp_path, capsys):
    cfg = compose_cfg(tmp_path, *PPO, "train_only=true")
    old = _old_checkpoints(cfg)
    new = checkpoint_dir(cfg)
    assert old != new and not new.exists()
    from benchmark.plan import plan_sweep

    (planned,) = plan_sweep([f"paths.root={tmp_path}", *PPO, "tracking=none"]).cells
    assert planned.note == (
        f"policy trained under an earlier release's name {old.name}, renamed when the sweep starts"
    )
    assert old.exists() and not (tmp_path / LAYOUT_FILE).exists()  # the plan changes nothing
    out = _migrate(tmp_path, capsys=capsys)
    assert f"checkpoint directory {old.name} renamed to {new.name}" in out
    assert not old.exists() and intact(new)
    assert json.loads((tmp_path / LAYOUT_FILE).read_text())["layout_version"] == LAYOUT_VERSION
    again = _migrate(tmp_path, capsys=capsys)  # once: nothing left to do
    assert "0 artifact(s) of earlier releases moved into place, 0 left" in again
    out = run_job(cfg, tmp_path / "job", multirun=False)  # would train (minutes) if not found
    assert out["checkpoint_path"] == str(new / "final.zip")


def test_a_sweep_migrates_its_root_once_at_its_start(tmp_path, monkeypatch, caplog):
    """`python -m benchmark ... -m` checks its root before Hydra starts any job: a root of an
    earlier layout is migrated there, once for the sweep; its jobs then find it current."""
    cfg = compose_cfg(tmp_path, *PPO)
    old = _old_checkpoints(cfg)
    calls = []
    real = migrate.migrate_root
    monkeypatch.setattr(migrate, "migrate_root", lambda *a, **k: calls.append(a) or real(*a, **k))
    caplog.set_level(logging.WARNING)
    sweep = [f"paths.root={tmp_path}", *PPO, "tracking=none", "seed=0,1,2"]
    check_root(sweep)
    assert len(calls) == 1 and not old.exists() and intact(checkpoint_dir(cfg))
    assert "renamed to " + checkpoint_dir(cfg).name in caplog.text
    check_root(sweep)  # a second sweep on the root: current, nothing to do
    assert len(calls) == 1


def test_a_checkpoint_dir_whose_name_is_not_its_recipe_is_left_with_a_reason(tmp_path, capsys):
    cfg = compose_cfg(tmp_path, *PPO)
    old = _old_checkpoints(cfg)
    stray = old.with_name("empty5x5_random-0123456789")
    old.rename(stray)
    out = _migrate(tmp_path, capsys=capsys)
    assert f"checkpoint directory {stray.name}: not renamed, its name is not the hash" in out
    assert stray.exists() and not checkpoint_dir(cfg).exists()


def _profiled_calls(filename: str) -> tuple[list[str], object]:
    """A profile function recording every call into the code of `filename`."""
    calls: list[str] = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == filename:
            calls.append(frame.f_code.co_name)

    return calls, profile


def test_a_job_on_a_current_root_never_enters_migrate(tmp_path):
    """The cell's whole path from run_job (computed, then reused) runs no line of
    benchmark/migrate.py once the root's layout.json is current; on a root without it, the job
    migrates (here: nothing to move) and writes it."""
    cfg = compose_cfg(tmp_path, *ORACLE, "eval.workers=1")
    assert migrate.ensure_current(cfg.paths) is not None  # a new root: marked current
    assert Store.of(cfg.paths).layout_current()
    calls, profile = _profiled_calls(migrate.__file__)
    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        first = run_job(cfg, tmp_path / "a", multirun=False)
        again = run_job(compose_cfg(tmp_path, *ORACLE, "eval.workers=1"), tmp_path / "b", False)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    assert again == first
    assert calls == []
    (tmp_path / LAYOUT_FILE).unlink()  # the counter sees a job that does migrate
    sys.setprofile(profile)
    try:
        run_job(compose_cfg(tmp_path, *ORACLE, "eval.workers=1"), tmp_path / "c", False)
    finally:
        sys.setprofile(None)
    assert "ensure_current" in calls and "migrate_root" in calls
    assert Store.of(cfg.paths).layout_current()


def test_a_root_of_a_newer_layout_is_refused(tmp_path):
    cfg = compose_cfg(tmp_path, *ORACLE)
    (tmp_path / LAYOUT_FILE).write_text(json.dumps({"layout_version": LAYOUT_VERSION + 1}))
    with pytest.raises(RuntimeError, match=f"newer than this release's {LAYOUT_VERSION}"):
        run_job(cfg, tmp_path / "job", multirun=False)
    assert not (tmp_path / "cells").exists()


def _finetuned_model(root: Path, name: str) -> Path:
    """A fine-tuned model directory with a COMPLETE marker of an earlier release."""
    model = root / "models" / "finetuned" / name
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "gpt2"}')
    (model / "model.safetensors").write_bytes(b"\1" * 4096)
    (model / MARKER).write_text(json.dumps({"fingerprint": migrate.v2_fingerprint(model)}))
    return model


def test_a_finetuned_models_old_marker_is_rewritten_once_when_it_holds(tmp_path, capsys):
    kept = _finetuned_model(tmp_path, "kept")
    changed = _finetuned_model(tmp_path, "changed")
    (changed / "model.safetensors").write_bytes(b"\2" * 4096)  # after its marker
    assert not finetuned_intact(kept)  # this release reads its own markers only
    out = _migrate(tmp_path, capsys=capsys)
    assert "fine-tuned model kept: its COMPLETE now holds" in out
    assert "fine-tuned model changed: its files changed since" in out
    marker = json.loads((kept / MARKER).read_text())
    assert marker["fingerprint_version"] == FINGERPRINT_VERSION
    assert marker["fingerprint"] == local_fingerprint(kept)
    assert marker["migrated_from"]["fingerprint"] == migrate.v2_fingerprint(kept)
    assert finetuned_intact(kept) and not finetuned_intact(changed)
    assert "fingerprint_version" not in json.loads((changed / MARKER).read_text())  # unchanged


def _v1_cell(root: Path) -> Path:
    """A cell as the suite's first day wrote it: cell.json without an identity."""
    cell = root / "cells" / "0123456789ab"
    cell.mkdir(parents=True)
    (cell / "cell.json").write_text(json.dumps({"name": "x", "config": {"env": {}}}))
    return cell


def test_the_migration_names_v1_cells_and_the_last_release_that_reads_them(tmp_path, caplog):
    from benchmark.plan import plan_sweep

    cell = _v1_cell(tmp_path)
    failed = tmp_path / "cells" / "ba9876543210"  # failed before its cell.json: not v1
    failed.mkdir()
    (failed / "error.json").write_text(json.dumps({"config": {"env": {}}}))
    assert [c.dir.name for c in migrate.v1_cells(Store(tmp_path).cells())] == ["0123456789ab"]
    caplog.set_level(logging.WARNING)
    plan_sweep([f"paths.root={tmp_path}", *PPO, "tracking=none"])
    assert "1 cell(s) of identity v1" in caplog.text
    assert migrate.LAST_READING in caplog.text
    assert "7a2be44" in migrate.LAST_READING  # a commit that still reads them
    migration = migrate.ensure_current(compose_cfg(tmp_path, *PPO).paths)
    assert any("1 cell(s) of identity v1" in line for line in migration.left)
    assert cell.is_dir() and (cell / "cell.json").is_file()  # never deleted
    caplog.clear()
    plan_sweep([f"paths.root={tmp_path}", *PPO, "tracking=none"])  # said once, by the migration
    assert "identity v1" not in caplog.text


def test_a_v2_root_gets_one_line_and_its_cells_are_computed_anew(tmp_path, capsys, caplog):
    """A root of the previous identity (v2): no crash, one line naming its cells, the command
    and the last release that adopts them; a job computes its cell anew beside the v2 one."""
    cfg = compose_cfg(tmp_path, *ORACLE, "eval.workers=1")
    first = run_job(cfg, tmp_path / "a", multirun=False)
    cell = tmp_path / "cells" / first["cell_hash"]
    v2 = cell.with_name("0123456789ab")  # as the previous release stored it
    cell.rename(v2)
    record = json.loads((v2 / "cell.json").read_text())
    record["identity"]["identity_version"] = 2
    (v2 / "cell.json").write_text(json.dumps(record))
    (tmp_path / LAYOUT_FILE).unlink()
    assert [c.dir for c in migrate.v2_cells(Store(tmp_path).cells())] == [v2]
    caplog.set_level(logging.WARNING)
    again = run_job(compose_cfg(tmp_path, *ORACLE, "eval.workers=1"), tmp_path / "b", False)
    (note,) = [r.getMessage() for r in caplog.records if "identity v2" in r.getMessage()]
    assert "1 cell(s) of identity v2" in note and "\n" not in note.strip()
    assert migrate.LAST_ADOPTING_V2 in note and f"python -m benchmark.migrate {tmp_path}" in note
    assert again["cell_hash"] == first["cell_hash"] and cell.is_dir()  # computed anew
    assert not (tmp_path / "b" / REUSED_FILE).exists()
    assert v2.is_dir() and (v2 / "summary.json").is_file()  # never deleted
    out = _migrate(tmp_path, capsys=capsys)
    assert "1 cell(s) of identity v2" in out


def test_the_migration_names_the_sqlite_response_cache_and_never_changes_it(tmp_path, caplog):
    cfg = compose_cfg(tmp_path, "env=empty5x5_random", "method=slm_only", "slm=oracle")
    old = Store.of(cfg.paths).cache / migrate.SQLITE_CACHE
    old.parent.mkdir(parents=True)
    old.write_bytes(b"SQLite format 3\0")
    caplog.set_level(logging.WARNING)
    migrate.ensure_current(cfg.paths)
    migrate.ensure_current(cfg.paths)  # current now: said once
    warned = [r.getMessage() for r in caplog.records if "no longer read" in r.getMessage()]
    assert len(warned) == 1 and migrate.LAST_READING in warned[0] and str(old) in warned[0]
    assert old.read_bytes() == b"SQLite format 3\0"  # never changed


def test_a_dry_run_changes_nothing(tmp_path, capsys):
    cfg = compose_cfg(tmp_path, *PPO)
    old = _old_checkpoints(cfg)
    out = _migrate(tmp_path, "--dry-run", capsys=capsys)
    assert "would be brought to layout" in out and f"{old.name} renamed to" in out
    assert old.exists() and not (tmp_path / LAYOUT_FILE).exists()


def test_the_command_refuses_a_root_that_is_not_a_directory(tmp_path, capsys):
    with pytest.raises(SystemExit):
        migrate.main([str(tmp_path / "missing")])
    assert "is not a directory" in capsys.readouterr().err


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


def test_only_the_entry_points_and_the_plan_reach_migrate():
    """Only the sweep's start (benchmark/__main__.py), a job on a root that is not current
    (benchmark/job.py) and the plan's read-only survey import benchmark.migrate."""
    users = {
        str(path.relative_to(PACKAGE.parent))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "migrate.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        and (node.module == "benchmark.migrate" or any(a.name == "migrate" for a in node.names))
    }
    assert users == {"benchmark/__main__.py", "benchmark/job.py", "benchmark/plan.py"}


def test_splits_other_than_the_default_never_take_a_renamed_checkpoint(tmp_path, capsys):
    """The old name did not record which validation seeds picked `best`: the directory is
    renamed to the default splits' name, which a job of other splits does not use."""
    cfg = compose_cfg(tmp_path, *PPO, "splits.validation=[0,50]", "tuning.n_episodes=20")
    splits = prepare(cfg)[1]
    assert splits != Splits()
    _old_checkpoints(cfg)
    _migrate(tmp_path, capsys=capsys)
    assert intact(checkpoint_dir(cfg)) and not checkpoint_dir(cfg, splits).exists()
