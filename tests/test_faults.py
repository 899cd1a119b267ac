"""Faults with real processes and signals: a cell killed mid-evaluation, reruns that must give
byte-identical results, two sweeps on one outputs root at once, and a planted API key that must
never reach a file."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from benchmark.policy.checkpoints import checkpoint_dir
from tests.conftest import SMALL_POLICY, compose_cfg, run_cli, start_cli

pytestmark = pytest.mark.slow
SLM_ONLY = [
    "env=fourrooms",
    "gate=always",
    "slm=tiny",
    "prompt=basic",
    "eval.n_episodes=4",
    "tracking=none",
]


@pytest.mark.timeout(900)  # about 170 s on 2 cores
def test_cell_killed_mid_evaluation_reruns_to_identical_results(tmp_path):
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    run_cli(clean, *SLM_ONLY, f"hydra.run.dir={clean / 'run'}")
    proc = start_cli(killed, *SLM_ONLY, f"hydra.run.dir={killed / 'run'}")
    cache = killed / "cache" / "responses"
    deadline = time.time() + 300
    while time.time() < deadline and not (cache.is_dir() and any(cache.glob("shard-*"))):
        time.sleep(0.1)  # mid-evaluation: answers are being cached (a shard every ~5 s)
    assert proc.poll() is None, "the job finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "run" / "summary.json").exists()
    run_cli(killed, *SLM_ONLY, f"hydra.run.dir={killed / 'run'}")
    a = (clean / "run" / "episodes.jsonl").read_bytes()
    assert a == (killed / "run" / "episodes.jsonl").read_bytes()
    assert a.count(b"\n") == 4


def test_same_config_twice_gives_byte_identical_episodes(trained_root, tmp_path):
    ckpt = checkpoint_dir(compose_cfg(trained_root, "env=empty5x5_random", *SMALL_POLICY))
    args = [
        "env=empty5x5_random",
        f"policy.path={ckpt / 'final.zip'}",
        "gate=entropy",
        "gate.tau=0.2",
        "gate.mc_samples=16",
        "slm=tiny",
        "prompt=stateful",
        "eval.n_episodes=10",
        "tracking=none",
    ]
    for name in ("a", "b"):
        run_cli(tmp_path / name, *args, f"hydra.run.dir={tmp_path / name / 'run'}")
    a = (tmp_path / "a" / "run" / "episodes.jsonl").read_bytes()
    assert a == (tmp_path / "b" / "run" / "episodes.jsonl").read_bytes()
    assert b'"queries": 0,' not in a or b'"queries": 1' in a  # the gate did something
    import json

    summary = json.loads((tmp_path / "a" / "run" / "summary.json").read_text())
    prov = summary["provenance"]
    assert {"git_commit", "git_dirty", "packages", "hostname", "device", "torch_threads"} <= set(
        prov
    )


def test_two_sweeps_on_one_root_train_once_and_corrupt_nothing(tmp_path):
    args = [
        "+experiment=smoke",
        "method=ppo,ask",
        "slm=oracle",
        "eval.n_episodes=4",
        "tuning.n_episodes=4",
        "tuning.n_trials=2",
        "tracking=none",
        "-m",
    ]
    procs = [
        start_cli(tmp_path, *args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    logs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs[0][-2000:] + logs[1][-2000:]
    assert len(list((tmp_path / "checkpoints").glob("*/COMPLETE"))) == 1
    assert sum(log.count("training PPO for") for log in logs) == 1  # trained once
    sweeps = list((tmp_path / "sweeps" / "smoke").iterdir())
    assert len(sweeps) == 2  # unique suffix: no collision even within the same second
    for sweep in sweeps:
        a = (sweep / "1" / "episodes.jsonl").read_bytes()
        assert a == (sweeps[0] / "1" / "episodes.jsonl").read_bytes()


def test_planted_api_key_never_reaches_a_file(tmp_path, monkeypatch):
    secret = "sk-planted-0123456789abcdef-NEVER-WRITE"
    monkeypatch.setenv("BENCH_PLANTED_KEY", secret)
    proc = run_cli(
        tmp_path,
        "+experiment=smoke",
        "method=slm_only",
        "slm=openai",
        "slm.backend.api_key_env=BENCH_PLANTED_KEY",
        "slm.backend.max_retries=1",
        "eval.n_episodes=2",
        "tracking=wandb",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "-m",
        check=False,
    )
    assert secret not in proc.stdout + proc.stderr
    assert (tmp_path / "sweep" / "0" / "error.json").exists()
    written = [p for p in Path(tmp_path).rglob("*") if p.is_file()]
    assert written
    for path in written:
        assert secret.encode() not in path.read_bytes(), f"the API key leaked into {path}"
