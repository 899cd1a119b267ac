"""Identity by the weights themselves: a local model is named by every byte of its weights (the
digest cached by path, size, mtime and inode), a policy by its tensors and loading settings, not
by the zip's bytes. The previous identity's (v2) model fingerprint, which fine-tuned models'
old markers hold, is benchmark.migrate's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmark.build import locate_inputs, prepare
from benchmark.consultants.fingerprint import local_fingerprint
from benchmark.consultants.hf import HFConsultant
from benchmark.migrate import v2_fingerprint
from benchmark.policy.checkpoints import policy_digest
from benchmark.store import cached_digest, file_sha256
from tests.conftest import compose_cfg

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
    different SHA-256s; the cell is the same."""
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
        cells.append(spec.hash)
    assert cells[0] == cells[1]  # same weights, same cell
