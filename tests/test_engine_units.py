"""Gates, metrics, atomic result files and the tuning study, on their own."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmark import results
from benchmark.gates import EntropyGate, EpistemicGate, RandomGate
from benchmark.metrics import (
    bootstrap_ci,
    episode_rates,
    paired_difference,
    ratio_bootstrap_ci,
    summarize,
)
from benchmark.tuning import tune
from benchmark.uncertainty import Uncertainty
from tests.conftest import compose_cfg


def _unc(total, epi):
    total = np.asarray(total, dtype=float)
    epi = np.asarray(epi, dtype=float)
    return Uncertainty(
        action=np.zeros(len(total), dtype=int), total=total, aleatoric=total - epi, epistemic=epi
    )


def test_entropy_and_epistemic_gates_threshold_their_own_field():
    unc = _unc([0.1, 0.5, 1.2], [0.9, 0.0, 0.05])
    assert EntropyGate(tau=0.5).mask(unc, [1, 2, 3], [0, 0, 0]).tolist() == [False, True, True]
    assert EpistemicGate(tau=0.5).mask(unc, [1, 2, 3], [0, 0, 0]).tolist() == [True, False, False]
    assert EntropyGate(tau=0).mask(unc, [1, 2, 3], [0, 0, 0]).all()


def test_gate_settings_read_the_class_not_the_yaml(tmp_path):
    """needs_policy / needs_uncertainty come from the class; constructor arguments are only the
    ones the class declares; tau=auto is a setting, not an argument value."""
    from benchmark.gates import AlwaysGate, GateSettings

    cfg = compose_cfg(tmp_path, "gate=entropy", "protocol=suite")  # the suite's N = 50
    gate = GateSettings.from_config(cfg.gate)
    assert gate.cls is EntropyGate and gate.tunes_tau and gate.mc_samples == 50
    assert gate.args == {"tau": "auto"} and gate.build(tau=0.4).tau == 0.4
    always = GateSettings.from_config(compose_cfg(tmp_path, "gate=always").gate)
    assert always.cls is AlwaysGate and not always.needs_policy and always.mc_samples is None
    random = GateSettings.from_config(compose_cfg(tmp_path, "gate=random").gate)
    assert set(random.args) == {"p", "seed"} and not random.tunes_tau
    with pytest.raises(ValueError, match=r"gate.tau=-0.1 .*allowed 'auto' or a number >= 0"):
        from benchmark.build import prepare

        prepare(compose_cfg(tmp_path, "gate=entropy", "gate.tau=-0.1"))


def test_random_gate_is_batch_independent_and_hits_its_rate():
    gate = RandomGate(p=0.3, seed=4)
    seeds = list(range(100, 200))
    together = gate.mask(None, seeds, [7] * 100)
    alone = np.concatenate([gate.mask(None, [s], [7]) for s in seeds])
    assert (together == alone).all()
    many = np.concatenate([gate.mask(None, seeds, [t] * 100) for t in range(50)])
    assert abs(many.mean() - 0.3) < 0.03


def test_bootstrap_ci_brackets_the_mean_and_shrinks_with_n():
    rng = np.random.default_rng(0)
    small, large = rng.random(20), rng.random(2000)
    lo_s, hi_s = bootstrap_ci(small)
    lo_l, hi_l = bootstrap_ci(large)
    assert lo_s <= small.mean() <= hi_s and lo_l <= large.mean() <= hi_l
    assert hi_l - lo_l < hi_s - lo_s
    d = paired_difference([1.0, 1.0, 1.0], [0.0, 0.5, 1.0])
    assert d["diff_mean"] == pytest.approx(0.5)


def test_rates_follow_the_paper_definitions():
    row = episode_rates({"length": 10, "queries": 4, "overwrites": 1, "invalid": 1})
    assert (row["ir"], row["or"], row["invalid_rate"]) == (0.4, 0.1, 0.25)
    slm_only = episode_rates({"length": 10, "queries": 10, "overwrites": None, "invalid": 0})
    assert slm_only["or"] is None
    summary = summarize(
        [dict(row, reward=1.0, success=1.0), dict(slm_only, reward=0.0, success=0.0)]
    )
    assert summary["reward_mean"] == 0.5 and summary["ir_pooled"] == pytest.approx(14 / 20)
    assert summary["or_mean"] == 0.1  # episodes without a PPO policy have no overwrite rate


def test_truncated_results_are_never_read_as_valid(tmp_path):
    rows = [{"seed": 100, "reward": 1.0}, {"seed": 101, "reward": 0.0}]
    results.write_jsonl(tmp_path / "episodes.jsonl", rows)
    results.write_json(tmp_path / "summary.json", {"n_episodes": 2, "complete": True})
    assert results.complete_cell(tmp_path) is not None
    text = (tmp_path / "summary.json").read_text()
    (tmp_path / "summary.json").write_text(text[: len(text) // 2])
    assert results.complete_cell(tmp_path) is None
    results.write_json(tmp_path / "summary.json", {"n_episodes": 2, "complete": True})
    (tmp_path / "episodes.jsonl").write_text(json.dumps(rows[0]) + "\n")
    assert results.complete_cell(tmp_path) is None


def test_tuning_study_uses_validation_seeds_and_resumes_without_extra_trials(tmp_path):
    seen: list[int] = []

    def objective(tau, seeds):
        seen.extend(seeds)
        return -((tau - 0.7) ** 2), 1.0 - tau / 2

    kw = dict(tau_range=(0.1, 1.5), seeds=list(range(10)), sampler_seed=0, max_reward=math.inf)
    tau, rows = tune(objective, tmp_path, n_trials=4, **kw)
    assert len(rows) == 4 and set(seen) == set(range(10))
    calls = len(seen)
    tau2, rows2 = tune(objective, tmp_path, n_trials=4, **kw)  # rerun: nothing left to do
    assert len(seen) == calls and rows2 == rows and tau2 == tau
    _, rows3 = tune(objective, tmp_path, n_trials=6, **kw)  # asks for 6 in all: runs 2 more
    assert len(rows3) == 6 and len(seen) == calls + 20
    assert all(0.1 <= r["tau"] <= 1.5 and r["seeds"] == [0, 9, 10] for r in rows3)


def test_tuning_stops_early_at_the_maximum_reward(tmp_path):
    _, rows = tune(
        lambda tau, seeds: (1.0, 0.2),
        tmp_path,
        tau_range=(0.1, 2.0),
        n_trials=15,
        seeds=[0, 1, 2],
        sampler_seed=0,
        max_reward=1.0,
    )
    assert len(rows) == 1


def _bumpy(tau, seeds):
    """A deterministic objective with several local optima (TPE has something to choose)."""
    return math.sin(5 * tau) + 0.3 * tau, tau / 2


TUNE_KW = dict(tau_range=(0.1, 2.0), seeds=[0, 1], sampler_seed=0, max_reward=math.inf)


def test_resumed_study_proposes_the_taus_of_an_uninterrupted_one(tmp_path):
    """Killed mid-trial (a RUNNING trial left behind), then resumed; or extended from 4 to 8
    trials: the same taus in the same order, and the same tuned tau."""
    tau, rows = tune(_bumpy, tmp_path / "straight", n_trials=8, **TUNE_KW)

    calls = []

    def killed_at_trial_4(t, seeds):
        calls.append(t)
        if len(calls) == 4:
            raise KeyboardInterrupt  # like SIGINT: the trial stays RUNNING in the journal
        return _bumpy(t, seeds)

    with pytest.raises(KeyboardInterrupt):
        tune(killed_at_trial_4, tmp_path / "killed", n_trials=8, **TUNE_KW)
    tau_k, rows_k = tune(_bumpy, tmp_path / "killed", n_trials=8, **TUNE_KW)
    tune(_bumpy, tmp_path / "extended", n_trials=4, **TUNE_KW)
    tau_e, rows_e = tune(_bumpy, tmp_path / "extended", n_trials=8, **TUNE_KW)
    taus = [r["tau"] for r in rows]
    assert len(set(taus)) == 8
    assert [r["tau"] for r in rows_k] == taus and tau_k == tau
    assert [r["tau"] for r in rows_e] == taus and tau_e == tau


def test_torn_journal_tail_is_set_aside_and_the_study_goes_on(tmp_path):
    tune(_bumpy, tmp_path, n_trials=3, **TUNE_KW)
    journal = tmp_path / "study.journal"
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"op_code": 5, "worker_id": "x", "tri')  # killed writer
    _, rows = tune(_bumpy, tmp_path, n_trials=5, **TUNE_KW)
    assert len(rows) == 5
    (aside,) = tmp_path.glob("study.journal.torn-*")
    assert aside.read_bytes().endswith(b'"tri')  # nothing is lost
    lines = journal.read_bytes().splitlines()
    journal.write_bytes(b"\n".join([lines[0], b"garbage", *lines[1:]]) + b"\n")
    with pytest.raises(ValueError, match=r"study.journal is corrupt at line 2"):
        tune(_bumpy, tmp_path, n_trials=6, **TUNE_KW)


def test_pooled_invalid_rate_ignores_episodes_without_queries():
    asked = episode_rates({"length": 10, "queries": 4, "overwrites": 0, "invalid": 2})
    quiet = [episode_rates({"length": 8, "queries": 0, "overwrites": 0, "invalid": 0})] * 3
    assert quiet[0]["invalid_rate"] == 0.0  # the episodes.jsonl placeholder is unchanged
    summary = summarize([asked, *quiet])
    # 2 invalid of 4 queries: the query-free episodes count neither as 0% nor at all
    assert summary["invalid_rate_pooled"] == 0.5 and summary["invalid_rate_mean"] == 0.5
    assert summary["invalid_rate_pooled_ci95_low"] == summary["invalid_rate_pooled_ci95_high"]
    assert summary["queried_episodes"] == 1 and summary["n_episodes"] == 4
    more = episode_rates({"length": 30, "queries": 16, "overwrites": 0, "invalid": 2})
    both = summarize([asked, more, *quiet])
    assert both["invalid_rate_pooled"] == pytest.approx(4 / 20)  # pooled over queries
    assert both["invalid_rate_mean"] == pytest.approx((0.5 + 2 / 16) / 2)  # queried episodes
    low, high = both["invalid_rate_pooled_ci95_low"], both["invalid_rate_pooled_ci95_high"]
    assert 2 / 16 <= low <= 4 / 20 <= high <= 0.5
    never = summarize(quiet)  # nothing asked: no invalid rate at all, not 0%
    assert "invalid_rate_pooled" not in never and "invalid_rate_mean" not in never
    assert never["ir_pooled"] == 0.0 and never["or_pooled"] == 0.0


def test_or_pooled_by_hand():
    rows = [
        episode_rates({"length": 10, "queries": 5, "overwrites": 1, "invalid": 0}),
        episode_rates({"length": 30, "queries": 9, "overwrites": 9, "invalid": 1}),
        episode_rates({"length": 20, "queries": 20, "overwrites": None, "invalid": 0}),  # SLM
    ]
    summary = summarize(rows)
    # pooled over the steps of the episodes with a PPO policy: (1 + 9) / (10 + 30)
    assert summary["or_pooled"] == pytest.approx(0.25)
    assert summary["or_mean"] == pytest.approx((0.1 + 0.3) / 2)  # per-episode mean
    assert summary["ir_pooled"] == pytest.approx(34 / 60)
    assert summary["ir_mean"] == pytest.approx((0.5 + 0.3 + 1.0) / 3)
    # CI: ratio of sums with episodes resampled; its extremes are the single episodes' rates
    assert 0.1 <= summary["or_pooled_ci95_low"] <= 0.25 <= summary["or_pooled_ci95_high"] <= 0.3
    lo, hi = ratio_bootstrap_ci([1, 9], [10, 30])
    assert (lo, hi) == (summary["or_pooled_ci95_low"], summary["or_pooled_ci95_high"])
    assert "or_pooled" not in summarize(rows[2:])  # SLM-only: no overwrite rate
