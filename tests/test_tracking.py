"""W&B tracking (benchmark.tracking): the run config carries the report's method label, and an
online run without a reachable server falls back to offline within a bounded time and still logs.
The servers here are local sockets (a closed port, a port that accepts and
never answers): nothing outside 127.0.0.1 is contacted. The offline runs are read back from their
transaction log (`run-*.wandb`), so what the dashboards need is checked in a real run."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from benchmark.cell import CellSpec
from benchmark.tracking import DEFAULT_INIT_TIMEOUT, init_timeout, run_config
from tests.conftest import CONF, REPO

# One Tracker, as a job makes it, in a fresh process (wandb keeps its settings per process):
# how long the start took, why it fell back, and then a summary, a table and a finish.
SCRIPT = r"""
import json, sys, time
from omegaconf import OmegaConf
from benchmark.tracking import Tracker
cfg = OmegaConf.create(json.loads(sys.argv[1]))
config = json.loads(sys.argv[2])
out = {}
for i in range(2):
    t0 = time.monotonic()
    tracker = Tracker(cfg, name=f"fourrooms/entropy/{i}", group="table1", job_type="entropy",
                      config=config)
    out[f"start{i}"] = time.monotonic() - t0
    out[f"fallback{i}"] = tracker.fallback
    out[f"offline{i}"] = bool(tracker.run.offline)
    with tracker:
        tracker.log({"timesteps": 100, "eval_reward": 0.5})
        tracker.summary({"reward_mean": 0.75, "reward_ci95_low": 0.7, "reward_ci95_high": 0.8,
                         "tau": 0.3, "cell": "fourrooms/entropy"})
        tracker.table("episodes", [{"seed": 100, "reward": 0.75}])
print(json.dumps(out))
"""


def _cell_config(*overrides: str) -> dict:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["paths.root=/tmp/unused", *overrides])
    return CellSpec.from_config(cfg).config


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path: Path, base_url: str, config: dict, **tracking) -> dict:
    cfg = {"enabled": True, "project": "ask-benchmark", "entity": None, "mode": "online"}
    cfg.update(dir=str(tmp_path / "wandb"), **tracking)
    env = {
        **os.environ,
        "WANDB_MODE": "online",
        "WANDB_BASE_URL": base_url,
        "WANDB_API_KEY": "x" * 40,  # credentials present: the server is what is missing
        "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
    }
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(cfg), json.dumps(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process"] = time.monotonic() - t0  # the whole process: imports, runs, exit
    print(json.dumps(out))  # the timings, shown with -s
    out["stderr"] = proc.stderr
    return out


def read_run(path: Path) -> dict:
    """config, summary and history of an offline run from its `run-*.wandb` transaction log
    (LevelDB log format after a 7-byte W&B header; each record a wandb `Record` protobuf)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, block = path.read_bytes(), 7, 32768
    records, partial = [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            break
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            partial = chunk
        elif kind == 3:
            partial += chunk
        elif kind == 4:
            records.append(partial + chunk)
    out: dict = {"config": {}, "summary": {}, "history": [], "kinds": []}
    for raw in records:
        rec = pb.Record()
        rec.ParseFromString(raw)
        kind = rec.WhichOneof("record_type")
        out["kinds"].append(kind)
        if kind == "run":
            for item in rec.run.config.update:
                out["config"][item.key] = json.loads(item.value_json)
            out["group"], out["job_type"] = rec.run.run_group, rec.run.job_type
        elif kind == "config":
            for item in rec.config.update:
                out["config"][item.key] = json.loads(item.value_json)
        elif kind == "summary":
            for item in rec.summary.update:
                key = item.key or ".".join(item.nested_key)
                out["summary"][key] = json.loads(item.value_json)
        elif kind == "history":
            row = {}
            for item in rec.history.item:
                row[item.key or ".".join(item.nested_key)] = json.loads(item.value_json)
            out["history"].append(row)
    return out


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, label",
    [
        (["method=ppo"], "PPO"),
        (["method=slm_only"], "SLM-only tiny"),
        (["method=ask"], "ASK tiny"),
        (["method=ask_plus", "slm=qwen3.5-4b"], "ASK+ qwen3.5-4b"),
        (["method=ask_stateful_min"], "stateful_min tiny"),
        (["method=ask_plus_nohint"], "stateful_nohint+rationale tiny"),
        (
            ["method=ask_plus", "gate=random", "slm=oracle", "gate.p=0.25"],
            "ASK+ oracle (random gate p=0.25)",
        ),
    ],
)
def test_run_config_carries_the_report_method_label(overrides, label):
    config = _cell_config(*overrides)
    logged = run_config(config)
    assert {k: v for k, v in logged.items() if k != "method"} == config
    assert logged["method"] == label


def test_run_config_leaves_other_configs_alone():
    report_run = {"sweep_dir": "/x", "jobs": 3}
    assert run_config(report_run) is report_run


def test_init_timeout_setting(monkeypatch):
    monkeypatch.delenv("WANDB_INIT_TIMEOUT", raising=False)
    assert init_timeout(OmegaConf.create({})) == DEFAULT_INIT_TIMEOUT == 30
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "12")
    assert init_timeout(OmegaConf.create({})) == 12
    assert init_timeout(OmegaConf.create({"init_timeout": 5})) == 5
    with pytest.raises(ValueError, match="init_timeout"):
        init_timeout(OmegaConf.create({"init_timeout": 0}))


@pytest.mark.slow
def test_online_without_a_server_falls_back_offline_at_once(tmp_path):
    """WANDB_MODE=online, the server's port closed: no 96 s wait, no failed job; the run is
    offline, says why, and holds the config, summary, history row and table."""
    config = _cell_config("method=ask_plus")
    out = _run(tmp_path, f"http://127.0.0.1:{_closed_port()}", config)
    assert out["offline0"] and out["offline1"]
    assert "Connection refused" in out["fallback0"] or "connect" in out["fallback0"]
    assert "earlier run of this process" in out["fallback1"]
    assert out["start0"] < 15 and out["start1"] < 15
    assert out["process"] < 60
    assert "logged offline" in out["stderr"] and "wandb sync" in out["stderr"]
    runs = sorted((tmp_path / "wandb" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 2
    run = read_run(runs[0])
    assert run["group"] == "table1" and run["job_type"] == "entropy"
    assert run["config"]["method"] == "ASK+ tiny"
    assert run["config"]["env"]["name"] == "fourrooms"
    assert run["config"]["gate"]["name"] == "entropy"
    assert run["summary"]["reward_mean"] == 0.75 and run["summary"]["reward_ci95_low"] == 0.7
    assert "tracking_fallback" in run["summary"]
    assert any(r.get("eval_reward") == 0.5 and r.get("timesteps") == 100 for r in run["history"])
    assert any(r.get("reward_mean") == 0.75 and r.get("tau") == 0.3 for r in run["history"])
    tables = [r for r in run["history"] if "episodes._type" in r]  # the per-episode table
    assert len(tables) == 1 and tables[0]["episodes.nrows"] == 1


@pytest.mark.slow
def test_online_with_a_silent_server_waits_init_timeout_then_goes_offline(tmp_path):
    """A server that accepts connections and never answers: wandb.init is cut at
    tracking.init_timeout, the run goes offline, and the next run of the process does not wait
    again."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        port = server.getsockname()[1]
        out = _run(tmp_path, f"http://127.0.0.1:{port}", _cell_config("method=ppo"), init_timeout=4)
    assert out["offline0"] and out["offline1"]
    assert "CommError" in out["fallback0"]
    assert 3.5 < out["start0"] < 30
    assert out["start1"] < 4
    # and the process is not held at exit by wandb's own telemetry to the silent server (~20 s)
    assert out["process"] < out["start0"] + 20
    runs = sorted((tmp_path / "wandb" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 2
    assert read_run(runs[1])["config"]["method"] == "PPO"


@pytest.mark.slow  # two W&B runs (~3 s)
def test_a_reused_cell_logs_a_light_run_in_the_new_experiment(tmp_path):
    """A complete cell skipped by a later sweep still shows in its dashboard."""
    from benchmark.job import run_job
    from tests.conftest import compose_cfg

    job = ["env=empty5x5_random", "gate=always", "slm=oracle", "eval.n_episodes=2"]
    first = run_job(
        compose_cfg(tmp_path, *job, "tracking=wandb", "experiment_name=first"),
        tmp_path / "j1",
        multirun=False,
    )
    again = run_job(
        compose_cfg(tmp_path, *job, "tracking=wandb", "experiment_name=second"),
        tmp_path / "j2",
        multirun=False,
    )
    assert again["wall_seconds"] == first["wall_seconds"]  # reused, not recomputed
    import wandb

    # wandb's service may still be writing a finished run's log (CI read one half-written);
    # shutting the service down closes every log, as a job process's exit does.
    wandb.teardown()
    runs = sorted((tmp_path / "wandb" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 2
    light = [read_run(r) for r in runs]
    reused = [r for r in light if r.get("group") == "second"]
    seen = [
        (r.get("group"), p.stat().st_size, r["kinds"]) for r, p in zip(light, runs, strict=True)
    ]
    assert len(reused) == 1, f"(group, log bytes, records) of the runs: {seen}"
    assert reused[0]["summary"]["reused"] is True
    assert reused[0]["summary"]["reward_mean"] == first["reward_mean"]
    assert reused[0]["config"]["method"] == "Oracle"
