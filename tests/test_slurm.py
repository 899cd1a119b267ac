"""Sweeps on a real single-node SLURM cluster (launchers/local-slurm), as job arrays.

Why: the submitit path (sbatch script, pickled job, job array, results back to the submitter,
resume after a cancelled task) only breaks on a cluster, after the queue wait. A real slurmctld
and slurmd on 127.0.0.1 catch those breaks in CI.

Without the SLURM binaries these tests skip, or fail when BENCHMARK_REQUIRE_SLURM=1 (CI, where
.ci/run installs Debian's slurm first): tests/conftest.py decides, for every `slurm` test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock

from tests.conftest import run_scratch

# not timed here (no SLURM on the dev machine): the timeout covers each test's own subprocess
# limits (up to 120 + 600 + 900 s) plus bringing the cluster up
pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[1]
LOCAL_SLURM = REPO / "launchers" / "local-slurm"
PYTHON = sys.executable
# One CPU and little memory per cell: the local node has as many CPUs as this machine.
SMALL = [
    "hydra.launcher.gpus_per_node=null",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=2",
    "hydra.launcher.timeout_min=15",
]


@pytest.fixture(scope="module")
def slurm_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Bring the cluster up (unless it already is), yield the env to reach it, bring it down;
    one test module at a time uses it (pytest-xdist runs modules side by side)."""
    with FileLock(str(run_scratch(tmp_path_factory) / "local-slurm.lock")):
        yield from _cluster()


def _cluster() -> Iterator[dict[str, str]]:
    state = Path(os.environ.get("LOCAL_SLURM_DIR", "/tmp/local-slurm"))
    pidfile = state / "run" / "slurmctld.pid"
    already_up = pidfile.exists() and _alive(int(pidfile.read_text() or 0))
    t0 = time.perf_counter()
    up = subprocess.run(
        ["bash", str(LOCAL_SLURM / "up.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        # the node gets every CPU: nproc would count OMP_NUM_THREADS (1 per test process)
        env={k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"},
    )
    try:
        assert up.returncode == 0, f"up.sh failed ({up.returncode}):\n{up.stderr[-3000:]}"
        print(f"local slurm up in {time.perf_counter() - t0:.1f}s")
        env = dict(os.environ)
        env["SLURM_CONF"] = str(state / "slurm.conf")
        env["PATH"] = f"{LOCAL_SLURM / 'bin'}:{env['PATH']}"
        env["BENCHMARK_REPO"] = str(REPO)
        env.pop("SLURM_JOB_ID", None)  # a test run inside a SLURM job must not look nested
        yield env
    finally:
        if not already_up:
            subprocess.run(["bash", str(LOCAL_SLURM / "down.sh")], timeout=120, check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return pid > 0


def _run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float = 900):
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _tail(proc: subprocess.CompletedProcess | subprocess.Popen, out: str = "") -> str:
    text = out or (getattr(proc, "stdout", "") or "") + (getattr(proc, "stderr", "") or "")
    return text[-4000:]


def test_cluster_runs_srun_and_sbatch(slurm_env: dict[str, str], tmp_path: Path) -> None:
    node = _run(["sinfo", "-h", "-o", "%n %t %c"], slurm_env, tmp_path).stdout.split()
    assert node[0] == "localhost" and node[1] in {"idle", "mix", "alloc"}
    assert int(node[2]) == os.cpu_count()
    srun = _run(["srun", "--mem=100", "hostname"], slurm_env, tmp_path, timeout=60)
    assert srun.returncode == 0 and srun.stdout.strip(), _tail(srun)
    out = tmp_path / "wrap.out"
    sb = _run(
        ["sbatch", "--wait", "--mem=100", f"--output={out}", "--wrap", "echo job $SLURM_JOB_ID"],
        slurm_env,
        tmp_path,
        timeout=60,
    )
    assert sb.returncode == 0, _tail(sb)
    assert out.read_text().startswith("job ")


TINY_APP = """
import json, os, time
from pathlib import Path
import hydra
from hydra.core.hydra_config import HydraConfig

@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    time.sleep(cfg.sleep)
    out = Path(HydraConfig.get().runtime.output_dir)
    record = {"x": cfg.x, "job": os.environ.get("SLURM_ARRAY_JOB_ID"),
              "task": os.environ.get("SLURM_ARRAY_TASK_ID"), "pid": os.getpid()}
    (out / "result.json").write_text(json.dumps(record))
    return cfg.x * 10

if __name__ == "__main__":
    main()
"""


def test_tiny_hydra_sweep_runs_as_job_array(slurm_env: dict[str, str], tmp_path: Path) -> None:
    """hydra/launcher=slurm submits one array; every cell runs as its own array task."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.yaml").write_text(
        textwrap.dedent(
            f"""
            hydra:
              searchpath:
                - file://{REPO / "launchers"}
            experiment_name: tiny
            x: 0
            sleep: 0
            """
        )
    )
    (tmp_path / "app.py").write_text(TINY_APP)
    sweep = tmp_path / "sweep"
    cmd = [PYTHON, "app.py", "-m", "hydra/launcher=slurm", *SMALL, "x=1,2,3"]
    proc = _run([*cmd, f"hydra.sweep.dir={sweep}"], slurm_env, tmp_path, timeout=300)
    assert proc.returncode == 0, _tail(proc)
    records = [json.loads((sweep / str(i) / "result.json").read_text()) for i in range(3)]
    assert sorted(r["x"] for r in records) == [1, 2, 3]
    assert len({r["job"] for r in records}) == 1, records  # one array ...
    assert sorted(r["task"] for r in records) == ["0", "1", "2"]  # ... three tasks
    scripts = list((sweep / ".submitit").glob("*/*_submission.sh"))
    assert len(scripts) == 1
    script = scripts[0].read_text()
    assert "#SBATCH --array=0-2%3" in script
    assert "#SBATCH --job-name=tiny" in script
    assert "export HF_HUB_OFFLINE=1" in script


def _smoke_cmd(root: Path, sweep: Path) -> list[str]:
    """The smoke sweep cut to two cells (PPO-only and ASK with the oracle), on SLURM."""
    return [
        PYTHON,
        "-m",
        "benchmark",
        "-m",  # anywhere: benchmark/__main__.py moves it where Hydra wants it
        "+experiment=smoke",
        "hydra/launcher=slurm",
        *SMALL,
        "method=ppo,ask",
        "slm=oracle",
        "tracking=none",
        f"paths.root={root}",
        f"hydra.sweep.dir={sweep}",
    ]


def _complete_cells(sweep: Path, n: int) -> list[dict]:
    summaries = []
    for i in range(n):
        job = sweep / str(i)
        assert (job / "summary.json").is_file(), f"cell {i}: no summary.json in {job}"
        summary = json.loads((job / "summary.json").read_text())
        episodes = (job / "episodes.jsonl").read_text().splitlines()
        assert len(episodes) == summary["n_episodes"] == 5, (i, len(episodes), summary)
        for line in episodes:
            json.loads(line)
        summaries.append(summary)
    return summaries


def test_smoke_sweep_on_slurm_and_report(slurm_env: dict[str, str], tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = _run(_smoke_cmd(tmp_path / "root", sweep), slurm_env, REPO)
    assert proc.returncode == 0, _tail(proc)
    _complete_cells(sweep, 2)
    assert len(list((sweep / ".submitit").glob("*/*_submission.sh"))) == 1  # one job array
    report = _run([PYTHON, "-m", "benchmark.report", str(sweep)], slurm_env, REPO, timeout=300)
    assert report.returncode == 0, _tail(report)


def _array_tasks(env: dict[str, str], name: str) -> dict[str, str]:
    """{array task id: state} of the jobs named `name` on the cluster."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-n", name, "-o", "%i %T"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def test_cancelled_cell_is_resumed_by_rerunning(slurm_env: dict[str, str], tmp_path: Path) -> None:
    """scancel one array task: the submitter reports it; a rerun runs only the missing cell."""
    root, sweep = tmp_path / "root", tmp_path / "sweep"
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen(
        _smoke_cmd(root, sweep), env=slurm_env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        target = None
        deadline = time.monotonic() + 120
        while target is None and time.monotonic() < deadline:
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-4000:]
            running = [t for t, s in _array_tasks(slurm_env, "smoke").items() if s == "RUNNING"]
            target = next((t for t in running if t.endswith("_1")), None)
            time.sleep(0.5)
        assert target is not None, "array task 1 never started"
        subprocess.run(["scancel", target], env=slurm_env, check=True)
        rc = first.wait(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
        log.close()
    first_log = (tmp_path / "first.log").read_text()
    assert rc != 0 and "CANCELLED" in first_log, first_log[-4000:]
    assert not (sweep / "1" / "summary.json").exists()
    done_before = {p: p.stat().st_mtime_ns for p in root.glob("cells/*/summary.json")}
    assert len(done_before) == 1, done_before  # the cell that was not cancelled

    rerun = _run(_smoke_cmd(root, sweep), slurm_env, REPO)
    assert rerun.returncode == 0, _tail(rerun)
    _complete_cells(sweep, 2)
    done_after = {p: p.stat().st_mtime_ns for p in root.glob("cells/*/summary.json")}
    assert len(done_after) == 2
    for path, mtime in done_before.items():
        assert done_after[path] == mtime, f"{path} was recomputed instead of skipped"
