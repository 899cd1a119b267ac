"""The results store (benchmark.store): the one atomic publish and build-once helpers, and the
cleanup of what a killed or failing build leaves behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.job import run_job
from benchmark.store import RootNotWritable, Store, build_once, work_dir, write_json_atomic
from tests.conftest import compose_cfg, run_cli

REPO = Path(__file__).resolve().parents[1]

_KILLED_BUILD = """
import sys, time
from pathlib import Path
from benchmark.store import build_once

def make(work):
    (work / "weights.bin").write_bytes(b"x" * 1000)
    print("BUILDING", flush=True)
    time.sleep(600)

build_once(Path(sys.argv[1]), make, lambda d: (d / "done").exists())
"""


def _done(d: Path) -> bool:
    return (d / "done").exists()


def test_killed_build_leaves_a_work_dir_that_the_next_build_removes(tmp_path):
    target = tmp_path / "model"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_BUILD, str(target)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "BUILDING"
    proc.send_signal(signal.SIGKILL)  # as a preemption or the OOM killer would
    proc.wait(timeout=30)
    left = f".model.work-{socket.gethostname()}-{proc.pid}"
    assert (tmp_path / left / "weights.bin").exists()  # the fault: debris of the killed build

    built = build_once(target, lambda w: (w / "done").write_text("1"), _done)
    assert built and _done(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "model.lock"]


def test_failed_build_removes_its_work_dir_and_keeps_the_error(tmp_path):
    target = tmp_path / "model"

    def make(work: Path) -> None:
        (work / "part").write_bytes(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        build_once(target, make, _done)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.lock"]


def test_live_builds_of_other_processes_are_left_alone(tmp_path):
    target = tmp_path / "model"
    other_host = tmp_path / ".model.work-otherhost-1"
    other_host.mkdir()
    alive = tmp_path / f".model.work-{socket.gethostname()}-{os.getppid()}"
    alive.mkdir()
    build_once(target, lambda w: (w / "done").write_text("1"), _done)
    assert other_host.is_dir() and alive.is_dir()


def test_incomplete_target_is_set_aside_never_deleted(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "part").write_text("someone's work")
    assert build_once(target, lambda w: (w / "done").write_text("1"), _done, aside="incomplete")
    (aside,) = tmp_path.glob(".model.incomplete-*")
    assert (aside / "part").read_text() == "someone's work"
    assert not build_once(target, lambda w: pytest.fail("built twice"), _done)


def test_work_dir_is_private_to_the_process(tmp_path):
    assert work_dir(tmp_path / "m").name == f".m.work-{socket.gethostname()}-{os.getpid()}"


def test_atomic_json_and_layout(tmp_path):
    write_json_atomic(tmp_path / "a" / "x.json", {"b": 1, "a": 2})
    assert (tmp_path / "a" / "x.json").read_text() == '{\n  "a": 2,\n  "b": 1\n}\n'
    assert not [p for p in (tmp_path / "a").iterdir() if p.name != "x.json"]
    store = Store(tmp_path)
    assert store.cell_dir("abc") == tmp_path / "cells" / "abc"
    assert store.study_dir("k") == tmp_path / "tuning" / "k"
    assert store.checkpoint_dir("env", "h") == tmp_path / "checkpoints" / "env-h"
    assert store.responses_dir() == tmp_path / "cache" / "responses"
    (tmp_path / "cells").mkdir()
    assert Store.root_of(tmp_path / "sweeps" / "x") == tmp_path


def test_a_root_that_cannot_be_written_fails_first_in_one_line(tmp_path):
    """A root under a regular file cannot be written, even by root (whom chmod does not stop):
    the store, the job and the CLI (before Hydra makes its run dir there) say so in one line."""
    (tmp_path / "a file").write_text("")
    root = tmp_path / "a file" / "root"
    with pytest.raises(RootNotWritable, match=f"results root {root} is not writable"):
        Store(root).check_writable()
    Store(tmp_path / "fine").check_writable()
    assert list((tmp_path / "fine").iterdir()) == []  # the probe file is gone
    if os.geteuid() != 0:  # permission bits hold for other users
        (tmp_path / "ro").mkdir(mode=0o555)
        with pytest.raises(RootNotWritable, match="is not writable"):
            Store(tmp_path / "ro").check_writable()
    cfg = compose_cfg(root, "method=slm_only", "slm=oracle", "eval.n_episodes=1")
    with pytest.raises(RootNotWritable, match=f"results root {root} is not writable"):
        run_job(cfg, tmp_path / "job", multirun=False)
    for multirun in ([], ["-m"]):
        proc = run_cli(root, "method=slm_only", "slm=oracle", *multirun, check=False)
        assert proc.returncode == 1
        assert proc.stderr.strip() == (
            f"Error: results root {root} is not writable (Not a directory): set paths.root or "
            "BENCHMARK_ROOT to a directory you can write"
        ), proc.stderr
