"""Cell identity: what enters a cell's hash (inputs by content, code versions, splits) and what
never does (paths, execution settings); the one-time adoption of v1 cells."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from benchmark import results
from benchmark.build import locate_inputs, prepare
from benchmark.cell import CellSpec, digest
from benchmark.config import compose
from benchmark.job import run_job
from benchmark.migrate import V1_CODE, v1_cell_config
from benchmark.policy.checkpoints import config_hash
from benchmark.prompts import PROMPT_VERSION
from benchmark.seeds import DEFAULT_SPLITS, Splits
from tests.conftest import SMALL_POLICY, compose_cfg

GOLDEN = Path(__file__).parent / "golden"
SLM_ONLY = ["env=empty5x5_random", "gate=always", "prompt=basic", "eval.n_episodes=2"]


def _spec(root, *overrides, checkpoint=None):
    cfg = compose_cfg(root, *overrides)
    return locate_inputs(prepare(cfg)[2], cfg, checkpoint, train=True)  # builds the tiny model


def test_identity_does_not_depend_on_the_results_root(tmp_path):
    """The tiny model lives under each root; its weights, not its path, enter the identity."""
    a = _spec(tmp_path / "a", *SLM_ONLY, "slm=tiny")
    b = _spec(tmp_path / "b", *SLM_ONLY, "slm=tiny")
    assert a.hash == b.hash and a.inputs["model"].startswith("hf-local:")
    assert str(tmp_path) not in repr(a.identity)
    # execution settings are not part of the results
    c = _spec(tmp_path / "a", *SLM_ONLY, "slm=tiny", "eval.mode=sequential", "eval.torch_threads=2")
    assert c.hash == a.hash
    assert _spec(tmp_path / "a", *SLM_ONLY, "slm=tiny", "seed=1").hash != a.hash


def test_replaced_weights_change_the_cell_and_its_name(tmp_path):
    ckpt = tmp_path / "mine.zip"
    ckpt.write_bytes(b"weights one")
    over = ["env=empty5x5_random", "gate=never", f"policy.path={ckpt}"]
    first = _spec(tmp_path, *over, checkpoint=ckpt)
    ckpt.write_bytes(b"weights two")
    second = _spec(tmp_path, *over, checkpoint=ckpt)
    assert first.hash != second.hash
    sha = hashlib.sha256(b"weights two").hexdigest()
    assert second.name == f"empty5x5_random/never/mine@{sha[:8]}"
    # the same file elsewhere is the same cell
    moved = tmp_path / "elsewhere" / "mine.zip"
    moved.parent.mkdir()
    shutil.copy(ckpt, moved)
    over_moved = ["env=empty5x5_random", "gate=never", f"policy.path={moved}"]
    assert _spec(tmp_path, *over_moved, checkpoint=moved).hash == second.hash


def test_unused_components_are_not_part_of_a_cell(tmp_path):
    """PPO-only ignores the consultant and prompt; SLM-only ignores the policy."""
    ckpt = tmp_path / "p.zip"
    ckpt.write_bytes(b"x")
    ppo = ["env=empty5x5_random", "gate=never", f"policy.path={ckpt}"]
    base = _spec(tmp_path, *ppo, checkpoint=ckpt)
    assert _spec(tmp_path, *ppo, "slm=oracle", "prompt=stateful", checkpoint=ckpt).hash == base.hash
    assert not base.uses_consultant and "slm" not in base.identity
    slm_only = _spec(tmp_path, *SLM_ONLY, "slm=oracle")
    assert _spec(tmp_path, *SLM_ONLY, "slm=oracle", "policy.seed=3").hash == slm_only.hash
    assert slm_only.labels()["checkpoint"] is None and "policy" not in slm_only.identity


def test_validation_split_and_training_version_enter_the_checkpoint_hash(tmp_path):
    cfg = compose_cfg(tmp_path, "env=empty5x5_random")
    other = Splits.from_config({"validation": [0, 50], "test": [100, 200]})
    assert config_hash(cfg, DEFAULT_SPLITS) == config_hash(cfg)
    assert config_hash(cfg, other) != config_hash(cfg)
    # the test split does not pick checkpoints
    test_only = Splits.from_config({"validation": [0, 100], "test": [100, 150]})
    assert config_hash(cfg, test_only) == config_hash(cfg)


def test_prompt_version_follows_the_golden_files():
    """A change to any prompt text shows in tests/golden/ and must come with a new
    PROMPT_VERSION (benchmark/prompts/__init__.py), so cells of the old text are not reused.
    Each env's golden files have their own record, tests/golden/<env>.version ('<PROMPT_VERSION>
    <digest>'): a new env adds its files and its record, and changes no other."""
    files: dict[str, list[Path]] = {}
    for f in sorted(GOLDEN.glob("*.txt")):
        files.setdefault(f.name.split("__")[0], []).append(f)
    assert {"fourrooms", "doorkey8", "higherlower", "memory_s11"} <= set(files)
    records = {p.stem for p in GOLDEN.glob("*.version")}
    assert records <= set(files), f"records without golden files: {sorted(records - set(files))}"
    for env, env_files in files.items():
        h = hashlib.sha256()
        for f in env_files:
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        record = GOLDEN / f"{env}.version"
        line = f"{PROMPT_VERSION} {h.hexdigest()}"
        assert record.is_file(), f"a new env's golden prompts: write '{line}' into {record}"
        recorded = record.read_text().split()
        assert recorded == line.split(), (
            f"the golden prompts of {env} changed: bump PROMPT_VERSION in "
            f"benchmark/prompts/__init__.py and record it in every tests/golden/*.version "
            f"({record}: '{PROMPT_VERSION + 1} {h.hexdigest()}')"
            if recorded[0] == str(PROMPT_VERSION)
            else f"PROMPT_VERSION changed: record it in {record} ('{line}')"
        )


TINY_JOB = [*SLM_ONLY, "slm=tiny"]
PPO_JOB = ["env=empty5x5_random", *SMALL_POLICY, "gate=never", "eval.n_episodes=3"]


def _v1_cell(root: Path, over: list[str]) -> tuple[Path, dict]:
    """Run a cell, then turn it into the v1 cell an older release would have written."""
    run_job(compose_cfg(root, *over), root / "j1", multirun=False)
    summary = results.read_json(root / "j1" / "summary.json")
    v1_dir = root / "cells" / digest(v1_cell_config(compose_cfg(root, *over)))
    os.replace(root / "cells" / summary["cell_hash"], v1_dir)
    return v1_dir, summary


def _rerun(root: Path, over: list[str]) -> dict:
    return run_job(compose_cfg(root, *over), root / "j2", multirun=False)


def _later(path: Path, than: Path) -> None:
    """Mark `path` as rewritten after `than` was written."""
    t = than.stat().st_mtime + 10
    os.utime(path, (t, t))


@pytest.mark.slow
def test_v1_cell_is_adopted_once_when_its_inputs_are_unchanged(trained_root):
    v1_dir, before = _v1_cell(trained_root, PPO_JOB)
    episodes = (v1_dir / "episodes.jsonl").read_bytes()
    again = _rerun(trained_root, PPO_JOB)
    assert not v1_dir.exists()
    assert again["wall_seconds"] == before["wall_seconds"]  # reused, not recomputed
    assert again["cell_hash"] == before["cell_hash"]
    v2_dir = trained_root / "cells" / again["cell_hash"]
    assert (v2_dir / "episodes.jsonl").read_bytes() == episodes
    assert results.read_json(v2_dir / "cell.json")["migrated_from"]["hash"] == v1_dir.name
    # and once only: the next run finds the v2 cell
    assert _rerun(trained_root, PPO_JOB)["wall_seconds"] == before["wall_seconds"]


@pytest.mark.slow
def test_v1_cell_whose_checkpoint_was_rewritten_since_is_not_reused(trained_root, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(trained_root / "checkpoints", root / "checkpoints")
    v1_dir, before = _v1_cell(root, PPO_JOB)
    _later(Path(before["checkpoint_path"]), v1_dir / "summary.json")
    again = _rerun(root, PPO_JOB)
    assert v1_dir.exists()  # left in place, never deleted
    assert again["wall_seconds"] != before["wall_seconds"]  # computed anew


@pytest.mark.slow
def test_v1_cell_whose_model_changed_since_is_not_reused(tmp_path, monkeypatch):
    import benchmark.prompts

    monkeypatch.setattr(benchmark.prompts, "PROMPT_VERSION", V1_CODE["prompts"])
    v1_dir, before = _v1_cell(tmp_path, TINY_JOB)
    model_dir = Path(compose_cfg(tmp_path, *TINY_JOB).slm.backend.path)
    _later(model_dir / "config.json", v1_dir / "summary.json")
    again = _rerun(tmp_path, TINY_JOB)
    assert v1_dir.exists()  # left in place, never deleted
    assert again["wall_seconds"] != before["wall_seconds"]  # computed anew


@pytest.mark.slow
def test_v1_cell_of_older_prompt_code_is_not_reused(tmp_path, monkeypatch):
    import benchmark.prompts

    monkeypatch.setattr(benchmark.prompts, "PROMPT_VERSION", V1_CODE["prompts"] + 1)
    v1_dir, before = _v1_cell(tmp_path, TINY_JOB)
    again = _rerun(tmp_path, TINY_JOB)
    assert v1_dir.exists()  # left in place: its prompts were an older version
    assert again["wall_seconds"] != before["wall_seconds"]


# v1 hashes computed by the v1 code (b674162, benchmark.job.cell_config) for the same overrides
# under paths.root=/tmp/v1root: keys added to the configs since must be left out of the v1 hash,
# or old results roots could never be adopted
V1_HASHES = {
    "37b6c5ba9bc3": ["gate=never", "env=fourrooms"],
    "062d76768e96": ["gate=entropy", "env=doorkey8", "slm=tiny", "prompt=basic"],
    "a83ec9dff83d": [
        "gate=always",
        "env=higherlower",
        "slm=oracle",
        "prompt=stateful",
        "prompt.rationale=true",
    ],
    "0a7eec7447be": [
        "+experiment=table3",
        "env=fourrooms",
        "method=ask_plus",
        "policy.checkpoint=t2",
        "slm=qwen3.5-2b",
    ],
}


@pytest.mark.parametrize("v1_hash", sorted(V1_HASHES))
def test_v1_hash_of_a_config_is_the_one_v1_computed(v1_hash):
    from benchmark.build import normalize_checkpoint

    # v1 cells were computed with what is now the suite's protocol
    cfg = compose_cfg(Path("/tmp/v1root"), "protocol=suite", *V1_HASHES[v1_hash])
    normalize_checkpoint(cfg)
    assert digest(v1_cell_config(cfg)) == v1_hash


def _hint_cell(env: str, hint: str, *extra: str) -> CellSpec:
    cfg = compose(
        ["+experiment=hint_ablation", f"env={env}", "method=ask_plus", "slm=tiny",
         f"prompt.planner_hint={hint}", *extra]
    )  # fmt: skip
    return CellSpec.from_config(cfg).with_inputs(
        checkpoint_sha256="c" * 64, policy_weights="w", model="m", tau_study="s"
    )


def test_identity_holds_the_prompt_keys_the_family_reads():
    """The hint ablation: MiniGrid Memory's stateful prompts print a `Planner hint:` line as the
    grid's do, so its three hints are three cells, each named apart; HigherLower's prompt prints
    none, so its three are one cell. A key the family's texts do not read at the cell's level
    (the hint at `basic`) stays out of the identity."""
    hints = ("seen_target", "frontier", "none")
    for env in ("memory_s11", "fourrooms"):
        cells = [_hint_cell(env, h) for h in hints]
        assert len({c.hash for c in cells}) == 3, env
        assert len({c.name for c in cells}) == 3, [c.name for c in cells]
        # frontier, the hint of the cells computed before the key existed, is left out (LEGACY_VALUES)
        held = [c.identity["prompt"].get("planner_hint") for c in cells]
        assert held == ["seen_target", None, "none"]
    cards = [_hint_cell("higherlower", h) for h in hints]
    assert len({c.hash for c in cards}) == 1 and len({c.name for c in cards}) == 1
    assert "planner_hint" not in cards[0].identity["prompt"]
    basic = [_hint_cell("memory_s11", h, "prompt=basic", "prompt.rationale=false") for h in hints]
    assert len({c.hash for c in basic}) == 1
    assert "planner_hint" not in basic[0].identity["prompt"]
    named = _hint_cell("memory_s11", "none").name
    assert "stateful+r,planner_hint=none" in named, named


def test_families_declare_the_prompt_keys_their_texts_read():
    from benchmark.envs.family import get_family

    grid, memory, cards = (get_family(f) for f in ("grid", "memory", "cards"))
    assert grid.prompt_keys("basic") == frozenset()
    assert grid.prompt_keys("stateful_min") == {"planner_hint"}
    assert grid.prompt_keys("stateful") == {"planner_hint", "map_radius"}
    assert memory.prompt_keys("stateful") == grid.prompt_keys("stateful")
    assert all(cards.prompt_keys(level) == frozenset() for level in ("basic", "stateful"))
