"""Agreement rates with a stated tolerance (benchmark.bench.agreement), the bench's widening of
bf16's tolerance to the shape-only noise floor, and the gate check's step agreement: pure
functions on hand-made answers."""

from __future__ import annotations

import math

import pytest

from benchmark.bench.agreement import BF16, FP32, checks, compare, passed, tolerance
from benchmark.bench.gpu import widened
from benchmark.bench.gpu_ask import step_agreement
from benchmark.consultants.base import Answer


def scored(text: str, **probs: float) -> Answer:
    return Answer(text, 10, 0, 0.0, choices=probs)


def test_compare_counts_identical_answers_and_the_largest_log_prob_delta():
    ref = [scored("a", a=0.6, b=0.4), scored("b", a=0.3, b=0.7), scored("a", a=0.9, b=0.1)]
    got = [scored("a", a=0.61, b=0.39), scored("a", a=0.51, b=0.49), scored("a", a=0.9, b=0.1)]
    r = compare(ref, got)
    assert r["agreement"] == pytest.approx(2 / 3)
    assert r["max_abs_dlogp"] == pytest.approx(math.log(0.51 / 0.3))
    assert r["finite"] is True
    assert not passed(r, BF16)
    same = compare(ref, ref)
    assert same["agreement"] == 1.0 and same["max_abs_dlogp"] == 0.0 and passed(same, FP32)


def test_a_nan_score_fails_every_tolerance_and_shows_as_a_miss():
    ref = [scored("a", a=0.6, b=0.4)]
    got = [scored("a", a=math.nan, b=math.nan)]
    r = compare(ref, got)
    assert r["finite"] is False and math.isnan(r["max_abs_dlogp"])
    assert not passed(r, BF16)
    rows = checks("gpu", "x", r, BF16)
    assert {c.status for c in rows} == {"MISS", "PASS"}  # finite and delta miss, agreement holds
    assert [c.status for c in rows][:2] == ["MISS", "MISS"]


def test_generated_answers_compare_by_text_only():
    ref = [Answer("go left", 10, 2, 0.0), Answer("go right", 10, 2, 0.0)]
    r = compare(ref, [Answer("go left", 10, 2, 0.0), Answer("stop", 10, 1, 0.0)])
    assert r == {"answers": 2, "agreement": 0.5, "max_abs_dlogp": None, "finite": True}
    assert len(checks("gpu", "x", r, BF16)) == 2  # no delta row
    with pytest.raises(ValueError, match="equal, non-empty"):
        compare(ref, ref[:1])


def test_tolerances_by_dtype_and_the_widened_bf16_one():
    assert tolerance("bfloat16") is BF16 and tolerance("float32") is FP32
    with pytest.raises(ValueError, match="allowed: bfloat16, float32"):
        tolerance("int8")
    noisy = {"agreement": 0.8, "max_abs_dlogp": 0.2, "finite": True}
    w = widened(BF16, noisy)
    assert w.max_abs_dlogp == pytest.approx(0.4) and w.min_agreement == pytest.approx(0.75)
    quiet = {"agreement": 1.0, "max_abs_dlogp": 1e-3, "finite": True}
    assert widened(BF16, quiet) == BF16  # never tighter than the stated tolerance
    assert widened(FP32, noisy) is FP32  # the exact check is never widened


def test_step_agreement_compares_up_to_each_episodes_first_differing_action():
    a = {1: [(True, 0), (False, 2), (True, 1), (True, 3)], 2: [(False, 1), (True, 2)]}
    b = {1: [(True, 0), (False, 2), (True, 2), (False, 0)], 2: [(False, 1), (True, 2)]}
    r = step_agreement(a, b)
    assert r["steps_compared"] == 3 + 2  # episode 1 parts at its third step
    assert r["gate_agreement"] == 1.0
    assert r["asked_steps_compared"] == 3 and r["action_agreement"] == pytest.approx(2 / 3)
    assert r["episodes_parted"] == 1
    c = {1: [(False, 0), (False, 2)], 2: [(False, 1), (True, 2)]}
    assert step_agreement(a, c)["gate_agreement"] < 1.0  # a gate decision differs: a bug
