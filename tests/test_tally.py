"""A sweep ends with its tally (benchmark/tally.py) and a non-zero exit when a cell failed."""

from __future__ import annotations

import json
import re
import shlex
import socket

import pytest
from omegaconf import OmegaConf

from benchmark import job, tally
from tests.conftest import compose_cfg, run_cli


def _job(sweep, number, overrides, files):
    d = sweep / str(number)
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text(OmegaConf.to_yaml(overrides))
    for name, data in files.items():
        (d / name).write_text(json.dumps(data))


def test_tally_counts_each_outcome_and_names_the_failures(tmp_path):
    sweep = tmp_path / "sweep"
    _job(sweep, 0, ["seed=0"], {"summary.json": {"reward_mean": 1.0}})
    _job(sweep, 1, ["seed=1"], {"summary.json": {}, "reused.json": {"cell_dir": "x"}})
    error = {"type": "ValueError", "message": "eval.n_episodes=0 is invalid\ntraceback..."}
    _job(sweep, 2, ["seed=2"], {"error.json": error})
    config = OmegaConf.create(
        {"hydra": {"sweeper": {"params": {}}, "overrides": {"task": ["seed=0,1,2,3"]}}}
    )
    t = tally.tally(sweep, config)
    assert (t.jobs, t.completed, t.reused) == (4, ["0"], ["1"])
    assert t.failed == [("2", "seed=2", "ValueError: eval.n_episodes=0 is invalid")]
    assert t.unfinished == [("3", "seed=3")]  # expected by the sweep, never wrote a dir
    text = "\n".join(t.lines())
    assert "4 jobs: 1 completed, 1 reused, 1 failed, 1 not finished" in text
    assert f"python -m benchmark.report {sweep}" in text
    tally.LAST = t
    assert tally.exit_code() == 1
    t.fail_on_error = False
    assert tally.exit_code() == 0
    tally.LAST = tally.tally(sweep / "0")  # nothing failed: exit 0
    assert tally.exit_code() == 0
    tally.LAST = None


def test_a_failed_cell_shows_its_cause_and_the_report_command_pastes_back(tmp_path):
    """A consultant server that refuses connections: the tally names the refusal, not Hydra's
    "Error in call to target"; a sweep dir with spaces is quoted for the shell."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = tmp_path / "results root"
    cfg = compose_cfg(
        root,
        "+experiment=smoke",
        "method=slm_only",
        "slm=openai",
        f"slm.backend.base_url=http://127.0.0.1:{port}/v1",
    )
    sweep = root / "my sweep"
    assert job.run_job(cfg, sweep / "0", multirun=True) is None
    [(_, _, error)] = tally.tally(sweep).failed
    assert error.startswith("ConsultantError: OpenAI-compatible server unreachable"), error
    assert "Connection refused" in error
    line = next(x for x in tally.tally(sweep).lines() if x.startswith("report: "))
    command = line.removeprefix("report: ").split("   #")[0]
    assert shlex.split(command) == ["python", "-m", "benchmark.report", str(sweep)]


@pytest.mark.slow
def test_a_multirun_with_a_failing_cell_says_so_and_exits_1(tmp_path):
    """-m in the middle of the overrides; cell 1 fails validation; the rerun reuses cell 0 and,
    with fail_on_error=false, exits 0."""
    args = [
        "+experiment=smoke",
        "-m",
        "hydra.sweeper.params.method=slm_only",
        "hydra.sweeper.params.slm=oracle",
        "eval.n_episodes=2,-1",
        "tracking=none",
    ]
    proc = run_cli(tmp_path, *args, check=False)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert re.search(r"sweep .*: 2 jobs: 1 completed, 0 reused, 1 failed", out), out
    assert "failed job 1: " in out and "eval.n_episodes=-1" in out
    assert "ValueError: eval.n_episodes=-1 is invalid" in out
    assert "report: python -m benchmark.report " in out
    again = run_cli(tmp_path, *args, "hydra.callbacks.tally.fail_on_error=false", check=False)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert re.search(r"2 jobs: 0 completed, 1 reused, 1 failed", again.stdout), again.stdout
