"""Every per-episode rate of the metrics table (benchmark.metrics.RATES: IR, OR, invalid rate),
recounted from a real run's own step records by its documented definition (docs/metrics.md) and
compared with the run's episodes.jsonl and summary.json, for each kind of gate: never (PPO-only),
always (the consultant alone, no policy) and a selective entropy gate whose threshold lies
between the entropies PPO shows, so that an episode is asked on some steps and not on others
(a rate that only ever came out 0 or 1 would hide a wrong denominator)."""

from __future__ import annotations

import statistics

import pytest

from benchmark import results
from benchmark.analysis.steps import STEPS_FILE, by_episode, read_steps
from benchmark.metrics import RATES
from tests.conftest import SMALL_POLICY, compose_cfg

COMMON = [
    "env=empty5x5_random",
    *SMALL_POLICY,
    "eval.n_episodes=4",
    "eval.step_records=true",
    "quiet=true",
]
# the tiny random model answers invalid text; sampled (seeded per query) it also gives a valid
# action now and then, so an episode's invalid rate comes out strictly between 0 and 1
TINY = [
    "slm=tiny",
    "prompt=basic",
    "slm.decoding.repetition_penalty=1.0",
    "slm.decoding.temperature=1.0",
]
# the dice consultant's valid random actions agree with PPO's on some asked steps only: OR lies
# strictly between 0 and IR
DICE = ["gate=entropy", "slm=random", "prompt=basic", "gate.mc_samples=5"]


def run(root, job, *overrides: str) -> tuple[dict, list[dict], dict[int, list[dict]]]:
    """A real job: (summary.json, episodes.jsonl, step records by episode seed)."""
    from benchmark.job import run_job

    summary = run_job(compose_cfg(root, *COMMON, *overrides), job, multirun=False)
    episodes = results.read_jsonl(job / "episodes.jsonl")
    steps = by_episode(read_steps(job / STEPS_FILE))
    assert sorted(steps) == [e["seed"] for e in episodes]
    return summary, episodes, steps


def recount(records: list[dict]) -> dict:
    """An episode's counts and rates by their definitions, from its step records alone:
    IR = queried steps / steps, OR = steps whose action differs from PPO's / steps (None
    without a policy), invalid rate = queried steps without a valid answer / queried steps."""
    steps = len(records)
    queried = [r for r in records if r["queried"]]
    invalid = sum(r["consultant"] is None for r in queried)
    has_policy = all(r["ppo"] is not None for r in records)
    changed = sum(r["action"] != r["ppo"] for r in records) if has_policy else None
    return {
        "length": steps,
        "queries": len(queried),
        "invalid": invalid,
        "overwrites": changed,
        "ir": len(queried) / steps,
        "or": None if changed is None else changed / steps,
        "invalid_rate": invalid / len(queried) if queried else None,
    }


def check_rates(summary: dict, episodes: list[dict], steps: dict[int, list[dict]]) -> list[dict]:
    """Each episode's rates and counts against its recount, and the summary's per-episode means
    and pooled rates against the recounts; returns the recounts."""
    mine = [recount(steps[e["seed"]]) for e in episodes]
    for row, want in zip(episodes, mine, strict=True):
        for key in ("length", "queries", "invalid", "overwrites"):
            assert row[key] == want[key], (row["seed"], key)
        for rate in RATES:
            if want[rate] is None and rate == "invalid_rate":  # nothing asked: the placeholder
                assert row[rate] == 0.0, row["seed"]
            elif want[rate] is None:
                assert row[rate] is None, (row["seed"], rate)
            else:
                assert row[rate] == pytest.approx(want[rate], abs=1e-12), (row["seed"], rate)
    # an overwrite is a valid answer other than PPO's action (an invalid one keeps PPO's)
    for records in steps.values():
        for r in records:
            if r["ppo"] is not None:
                answered = r["queried"] and r["consultant"] is not None
                assert (r["action"] != r["ppo"]) == (answered and r["consultant"] != r["ppo"])
    pooled = {"ir": ("queries", "length"), "or": ("overwrites", "length")}
    pooled["invalid_rate"] = ("invalid", "queries")
    for rate in RATES:
        values = [m[rate] for m in mine if m[rate] is not None]
        if values:
            assert summary[f"{rate}_mean"] == pytest.approx(statistics.fmean(values), abs=1e-12)
        else:
            assert f"{rate}_mean" not in summary, rate
        num, den = pooled[rate]
        of = [m for m in mine if m[num] is not None]
        if sum(m[den] for m in of):
            want = sum(m[num] for m in of) / sum(m[den] for m in of)
            assert summary[f"{rate}_pooled"] == pytest.approx(want, abs=1e-12), rate
        else:
            assert f"{rate}_pooled" not in summary or summary[f"{rate}_pooled"] == 0.0, rate
    assert summary["steps_total"] == sum(m["length"] for m in mine)
    assert summary["queries_total"] == sum(m["queries"] for m in mine)
    assert summary["invalid_total"] == sum(m["invalid"] for m in mine)
    assert summary["queried_episodes"] == sum(1 for m in mine if m["queries"])
    return mine


def test_the_never_gate_asks_nothing_and_overwrites_nothing(trained_root, tmp_path):
    summary, episodes, steps = run(trained_root, tmp_path / "job", "method=ppo")
    mine = check_rates(summary, episodes, steps)
    assert all(m["ir"] == 0.0 and m["or"] == 0.0 for m in mine)
    assert "invalid_rate_mean" not in summary and "invalid_rate_pooled" not in summary


def test_the_always_gate_asks_every_step_without_a_policy(trained_root, tmp_path):
    summary, episodes, steps = run(
        trained_root, tmp_path / "job", "gate=always", *TINY, "++env.task.step_limit=25"
    )
    mine = check_rates(summary, episodes, steps)
    assert all(m["ir"] == 1.0 and m["or"] is None for m in mine)
    assert "or_mean" not in summary and "or_pooled" not in summary
    assert any(0.0 < m["invalid_rate"] < 1.0 for m in mine)  # valid and invalid answers


def test_a_selective_entropy_gate_asks_on_some_steps_of_an_episode(trained_root, tmp_path):
    """tau lies halfway between two middle entropies of PPO's own episodes (a run at the
    maximum entropy of 4 actions, which asks nothing), so the gated run asks on some steps and
    not on others within one episode."""
    _, _, quiet = run(trained_root, tmp_path / "quiet", *DICE, "gate.tau=2.0")
    entropies = sorted({r["total"] for records in quiet.values() for r in records})
    assert len(entropies) > 2 and entropies[0] < entropies[-1]
    middle = len(entropies) // 2
    tau = (entropies[middle - 1] + entropies[middle]) / 2
    summary, episodes, steps = run(trained_root, tmp_path / "job", *DICE, f"gate.tau={tau!r}")
    mine = check_rates(summary, episodes, steps)
    for records in steps.values():  # the gate asks where the entropy reaches tau (the
        # records hold float32 entropies: a step within their rounding of tau is not judged)
        clear = [r for r in records if abs(r["total"] - tau) > 1e-6]
        assert [r["queried"] for r in clear] == [r["total"] >= tau for r in clear]
    assert any(0.0 < m["ir"] < 1.0 for m in mine)
    assert any(0.0 < m["or"] < m["ir"] for m in mine)
    assert all(m["invalid_rate"] in (None, 0.0) for m in mine)  # dice answers are valid
    assert summary["ir_mean"] != pytest.approx(summary["ir_pooled"], abs=1e-9)
