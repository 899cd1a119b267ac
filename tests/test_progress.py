"""What a job shows: plain progress lines at a bounded rate when stdout is not a terminal, the
tuning trials, and the result block whose values are those of summary.json."""

from __future__ import annotations

import io
import json
import re

import pytest

from benchmark.progress import EvaluationProgress, Progress
from tests.conftest import SMALL_POLICY, run_cli


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_plain_lines_come_at_every_tenth_or_every_interval():
    out, clock = io.StringIO(), _Clock()
    with Progress("work", 1000, "items", stream=out, clock=clock, interval_s=30) as p:
        for i in range(1, 1001):
            clock.t += 0.01  # 10 s in all: only the tenths print
            p.update(i, "x")
    lines = out.getvalue().splitlines()
    assert len(lines) == 10
    assert lines[0].startswith("work: 100/1000 items | 10%") and lines[-1].startswith(
        "work: 1000/1000 items | 100%"
    )
    out, clock = io.StringIO(), _Clock()
    with Progress("slow", 10, "items", stream=out, clock=clock, interval_s=30) as p:
        p.update(0)
        for _ in range(10):  # 100 s without progress: a line every 30 s, no more
            clock.t += 10
            p.update(0, "waiting")
    assert len(out.getvalue().splitlines()) == 3
    out = io.StringIO()
    with Progress("off", 10, "items", stream=out, enabled=False) as p:
        p.update(10)
    assert out.getvalue() == ""


def test_evaluation_progress_reports_rate_queries_and_ir():
    out, clock = io.StringIO(), _Clock()
    with EvaluationProgress(2, stream=out, clock=clock) as p:
        clock.t = 2.0
        p.step(decisions=2, queries=1)
        p.episode({})
        p.step(decisions=2, queries=0)
        p.episode({})
    first = out.getvalue().splitlines()[0]
    assert "1/2 episodes" in first and "1.0 decisions/s" in first and "IR 0.500" in first


JOB = [
    "env=empty5x5_random",
    *SMALL_POLICY,
    "gate=entropy",
    "gate.tau=auto",
    "gate.mc_samples=8",
    "tuning.n_trials=3",
    "tuning.n_episodes=5",
    "slm=oracle",
    "prompt=basic",
    "eval.n_episodes=20",
    "tracking=none",
]


@pytest.mark.slow
def test_job_prints_bounded_progress_and_the_result_of_summary_json(trained_root, tmp_path):
    run = tmp_path / "run"
    proc = run_cli(trained_root, *JOB, f"hydra.run.dir={run}")
    out = proc.stdout.splitlines()
    trials = [line for line in out if line.startswith("tuning: trial")]
    assert [t.split("|")[0].strip() for t in trials] == [f"tuning: trial {k}/3" for k in (1, 2, 3)]
    evaluation = [line for line in out if line.startswith("evaluation:")]
    assert 1 <= len(evaluation) <= 11 and "20/20 episodes | 100%" in evaluation[-1]
    summary = json.loads((run / "summary.json").read_text())
    block = "\n".join(out[out.index(next(x for x in out if x.startswith("cell "))) :])
    assert summary["cell"] in block and str(run / "summary.json") in block
    for name in ("reward", "success", "ir"):
        mean = f"{summary[f'{name}_mean']:.3f}"
        low, high = (f"{summary[f'{name}_ci95_{k}']:.3f}" for k in ("low", "high"))
        assert re.search(rf"^  {name} +{mean}  \[{low}, {high}\]$", block, re.M), block
    assert re.search(rf"^  tau +{summary['tau']:.4g} \(tuned on validation seeds\)$", block, re.M)
    quiet = run_cli(trained_root, *JOB, "quiet=true", f"hydra.run.dir={tmp_path / 'q'}")
    assert "tuning: trial" not in quiet.stdout and "evaluation:" not in quiet.stdout
    assert not [line for line in quiet.stdout.splitlines() if line.startswith("cell ")]
