"""Identity by the weights themselves and the one migration of results
roots written with the previous identity (v2): a local model is named by every byte of its
weights (the digest cached by path, size, mtime and inode), a policy by its tensors and loading
settings, not by the zip's bytes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmark import migrate, results
from benchmark.build import locate_inputs, prepare
from benchmark.cell import IDENTITY_VERSION, digest
from benchmark.consultants.fingerprint import local_fingerprint
from benchmark.consultants.hf import HFConsultant
from benchmark.job import run_job
from benchmark.migrate import v2_fingerprint, v2_hash, v2_identity, v2_model
from benchmark.policy.checkpoints import policy_digest
from benchmark.store import LAYOUT_FILE, cached_digest, file_sha256
from tests.conftest import SMALL_POLICY, compose_cfg

REPO = Path(__file__).resolve().parents[1]
MB = 1 << 20


def _model(directory: Path, size: int = 16 * MB) -> Path:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text('{"model_type": "qwen3"}')
    (directory / "model.safetensors").write_bytes(os.urandom(size))
    return directory


def _rewrite_middle(path: Path) -> None:
    with path.open("r+b") as f:
        f.seek(path.stat().st_size // 2)
        f.write(b"\xff" * 4096)  # a frozen-embedding fine-tune: first and last MB unchanged


def test_a_change_in_the_middle_of_a_weight_file_is_a_new_identity(tmp_path):
    model = _model(tmp_path / "m")
    digests = tmp_path / "root" / "digests"
    before = HFConsultant.weights_identity(path=str(model), digests=str(digests))
    old = v2_fingerprint(model)
    _rewrite_middle(model / "model.safetensors")
    assert v2_fingerprint(model) == old  # the fault: the old fingerprint saw nothing
    after = HFConsultant.weights_identity(path=str(model), digests=str(digests))
    assert after != before  # re-hashed: the file's mtime (and size, inode) are in the key
    assert after == "hf-local:" + local_fingerprint(model)  # without the cache, the same


def test_logs_beside_the_weights_are_not_the_identity(tmp_path):
    model = _model(tmp_path / "m", size=1000)
    before = local_fingerprint(model)
    (model / "finetune.json").write_text(json.dumps({"train": {"train_seconds": 12.5}}))
    assert local_fingerprint(model) == before
    (model / "generation_config.json").write_text('{"do_sample": false}')  # shapes the output
    assert local_fingerprint(model) != before


def test_small_models_keep_their_identity(tmp_path):
    """Files of at most 2 MB were covered whole by the first and last MB: the tiny models'
    identities (and every slm=tiny cell) are unchanged."""
    model = _model(tmp_path / "m", size=2 * MB)
    assert local_fingerprint(model) == v2_fingerprint(model)


# v2 hashes (and the tuned cell's study) as the code of identity v2 computed them
# (CellSpec(version=2), benchmark 0.1.0 at commit 7a2be44) for these configs and the inputs below:
# a job finds a v2 cell only while benchmark.migrate derives the same from the v3 identity (a
# change of config or code version that moves one makes every v2 cell of it stale: say so)
V2_HASHES = {
    "5637644fd7e1": ["gate=never", "env=fourrooms"],
    "ab544a084136": ["gate=entropy", "env=doorkey8", "slm=tiny", "prompt=basic", "gate.tau=0.5"],
    "3452738671bc": ["gate=entropy", "env=fourrooms", "slm=qwen3.5-2b", "prompt=stateful"],
    "1c03fd3bbea8": [
        "gate=always",
        "env=higherlower",
        "slm=oracle",
        "prompt=stateful",
        "prompt.rationale=true",
    ],
}
V2_STUDY = {"3452738671bc": "3d9211c17202"}
# the prompt version a v2 cell that asked a consultant holds is its family's (grid and cards:
# still 2, the version v2 computed with), so those cells are derived, and adopted, as computed
V2_PROMPTS = {"ab544a084136": 2, "3452738671bc": 2, "1c03fd3bbea8": 2}


@pytest.mark.parametrize("old_hash", sorted(V2_HASHES))
def test_v2_identity_of_a_cell_is_the_one_v2_computed(old_hash):
    from benchmark.build import normalize_checkpoint
    from benchmark.cell import tuning_key

    # `paper` then took repetition penalty 1.0 and dtype auto (now the released 1.1 and float16)
    then = ["slm.decoding.repetition_penalty=1.0"] if "slm=tiny" in V2_HASHES[old_hash] else []
    if "slm=qwen3.5-2b" in V2_HASHES[old_hash]:
        then = ["slm.decoding.repetition_penalty=1.0", "slm.backend.dtype=auto"]
    cfg = compose_cfg(Path("/tmp/v2root"), *V2_HASHES[old_hash], *then)
    normalize_checkpoint(cfg)
    spec = prepare(cfg)[2]
    inputs = {}
    if spec.uses_policy:
        inputs.update(checkpoint_sha256="c" * 64, policy_weights="w" * 64)
    if spec.uses_consultant:
        inputs["model"] = "hf-local:new"
    if spec.tunes_tau:
        inputs["tau_study"] = "v3 study"
    spec = spec.with_inputs(**inputs)
    model = "hf-local:old" if spec.uses_consultant else None  # its v2 fingerprint
    study = tuning_key(v2_identity(spec, model, None)) if spec.tunes_tau else None
    identity = v2_identity(spec, model, study)
    assert identity["identity_version"] == 2 and spec.hash != old_hash
    assert identity["code"].get("prompts") == V2_PROMPTS.get(old_hash)
    assert study == V2_STUDY.get(old_hash)
    assert digest(identity) == old_hash


def test_digest_is_cached_by_path_size_mtime_and_inode(tmp_path):
    f = tmp_path / "w.bin"
    f.write_bytes(os.urandom(3 * MB))
    calls = []

    def count(path: Path) -> str:
        calls.append(path)
        return file_sha256(path)

    digests = tmp_path / "digests"
    first = cached_digest(f, digests, count)
    assert cached_digest(f, digests, count) == first and len(calls) == 1  # a later job: cached
    copy = tmp_path / "w2.bin"
    shutil.copy2(f, copy)
    os.replace(copy, f)  # same bytes, same mtime, another inode: hashed again
    assert cached_digest(f, digests, count) == first and len(calls) == 2
    _rewrite_middle(f)
    assert cached_digest(f, digests, count) != first and len(calls) == 3


def test_a_same_size_change_with_its_mtime_restored_is_hashed_again(tmp_path):
    """A rewrite that keeps the size and puts the old mtime back (os.utime, as rsync -t or a
    restore does) still moves the inode's ctime, which the cache key holds."""
    f = tmp_path / "w.bin"
    f.write_bytes(os.urandom(3 * MB))
    digests = tmp_path / "digests"
    first = cached_digest(f, digests)
    st = f.stat()
    time.sleep(0.05)  # past the kernel's coarse timestamp clock, so the ctime can move
    _rewrite_middle(f)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (f.stat().st_size, f.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert cached_digest(f, digests) == file_sha256(f) != first


_RESAVE = """
import sys
from benchmark.policy.checkpoints import load
load(sys.argv[1]).save(sys.argv[2])
"""


@pytest.mark.slow  # two PPO trainings (~20 s)
def test_identical_weights_name_the_same_cell(trained_root, tmp_path):
    """Two zips of the same weights (saved by two processes: the zip's pickles differ) have
    different SHA-256s and, before identity v3, different cells; now the same."""
    ckpt = next((trained_root / "checkpoints").glob("empty5x5_random-*/final.zip"))
    again = tmp_path / "again.zip"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", _RESAVE, str(ckpt), str(again)], check=True, env=env)
    assert file_sha256(again) != file_sha256(ckpt)  # the fault's cause
    assert policy_digest(again) == policy_digest(ckpt)
    cells = []
    for zip_path in (ckpt, again):
        cfg = compose_cfg(tmp_path / "root", "env=empty5x5_random", f"policy.path={zip_path}")
        spec = locate_inputs(prepare(cfg)[2], cfg, zip_path)
        cells.append((spec.hash, v2_hash(spec, cfg)[0]))
    assert cells[0][0] == cells[1][0]  # same weights, same cell
    assert cells[0][1] != cells[1][1]  # identity v2 told them apart


@pytest.mark.slow  # five cells computed twice (~20 s)
def test_a_v2_root_is_migrated_once_and_never_silently(trained_root, tmp_path, capsys):
    """A root written by the previous release (identity v2), brought to this release's layout
    by `python -m benchmark.migrate ROOT`: its complete cells are adopted under their v3 hash
    without recomputation, once, each said; a cell whose local model changed after it was
    computed is not (the report says why), and a job computes it anew."""
    root = tmp_path / "root"
    over = [
        "env=empty5x5_random",
        *SMALL_POLICY,
        f"paths.checkpoints={trained_root / 'checkpoints'}",
        "eval.n_episodes=2",
        "quiet=true",
    ]
    ppo = compose_cfg(root, *over, "gate=never")
    tiny = compose_cfg(root, *over, "method=slm_only", "slm=tiny", "prompt=basic")
    for cfg in (ppo, tiny):  # the cells as the previous release wrote them
        _write_as_v2(cfg, tmp_path / "v2job")
    (root / LAYOUT_FILE).unlink()  # that release wrote none
    from benchmark.plan import plan_sweep
    from benchmark.plan_data import COMPLETE

    (planned,) = plan_sweep([f"paths.root={root}", "tracking=none", *over, "gate=never"]).cells
    assert planned.status == COMPLETE and planned.note.startswith("v2 cell ")  # read-only
    # the tiny model was rewritten after its v2 cell was computed: not adopted
    os.utime(Path(str(tiny.slm.backend.path)) / "config.json")
    checkpoints = f"paths.checkpoints={trained_root / 'checkpoints'}"
    assert migrate.main([str(root), checkpoints]) == 0
    out = capsys.readouterr().out
    assert out.count(": adopted as ") == 1 and "not adopted because the model at" in out
    summary = run_job(ppo, tmp_path / "job1", multirun=False)
    spec = locate_inputs(prepare(ppo)[2], ppo, Path(summary["checkpoint_path"]))
    assert spec.identity["identity_version"] == IDENTITY_VERSION == 3
    assert summary["cell_hash"] == spec.hash and f"adopted as {spec.hash}" in out
    assert (tmp_path / "job1" / results.REUSED_FILE).is_file()
    cell = json.loads((spec.dir(root) / "cell.json").read_text())
    assert cell["migrated_from"]["identity_version"] == 2
    episodes = (spec.dir(root) / "episodes.jsonl").read_bytes()
    assert episodes == (tmp_path / "v2job" / "gate=never.jsonl").read_bytes()  # not recomputed
    assert migrate.main([str(root), checkpoints]) == 0
    assert ": adopted as " not in capsys.readouterr().out  # once
    done = run_job(tiny, tmp_path / "job3", multirun=False)
    assert done["cell_hash"] != json.loads((tmp_path / "v2job" / "tiny.json").read_text())
    assert not (tmp_path / "job3" / results.REUSED_FILE).exists()  # computed anew


def _write_as_v2(cfg, job_dir: Path) -> None:
    """Compute the cell with the current code, then store it where identity v2 put it (as the
    previous release did: the v2 hash, a v2 cell.json, no v3 dir)."""
    from benchmark.policy import ensure

    job_dir.mkdir(exist_ok=True)
    summary = run_job(cfg, job_dir / "tmp", multirun=False)
    task, splits, spec = prepare(cfg)
    checkpoint = ensure(cfg, task, splits=splits) if spec.uses_policy else None
    new = locate_inputs(spec, cfg, checkpoint)
    old_hash, study = v2_hash(new, cfg)
    model = v2_model(cfg, new.inputs.get("model"))
    record = {"name": new.name, "identity": v2_identity(new, model, study), "config": new.config}
    root = Path(cfg.paths.root)
    old_dir = root / "cells" / old_hash
    os.rename(new.dir(root), old_dir)
    results.write_json(old_dir / "cell.json", record)
    results.write_json(old_dir / "summary.json", dict(summary, cell_hash=old_hash))
    name = "gate=never" if not spec.uses_consultant else "tiny"
    shutil.copy(old_dir / "episodes.jsonl", job_dir / f"{name}.jsonl")
    (job_dir / f"{name}.json").write_text(json.dumps(old_hash))
    shutil.rmtree(job_dir / "tmp")
