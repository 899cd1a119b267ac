"""Checkpoint names (final, best, rNNN, tK) are parsed by one function, and every checkpoint
name, tau and tau range is checked against the env before any work."""

from __future__ import annotations

import math

import pytest

from benchmark.build import prepare
from benchmark.policy import names
from tests.conftest import compose_cfg

BASE = ["env=empty5x5_random", "eval.n_episodes=2"]  # thresholds [0.3, 0.5, 0.7, 0.9], |A| = 4


def test_one_parser_for_every_form():
    assert names.parse("final") == names.CheckpointName("final")
    assert names.parse("best").kind == "best"
    assert names.parse("r030").threshold == pytest.approx(0.3)
    assert names.parse("r030").is_file_name
    assert names.parse("t2").index == 2 and not names.parse("t2").is_file_name
    assert names.threshold_name(0.3) == "r030" and names.threshold_name(0.07) == "r007"
    for bad in ("r30", "rr030", "t0", "best ", "", "FINAL", None, 3):
        with pytest.raises(ValueError, match="allowed final, best, tK"):
            names.parse(bad)
    assert names.threshold_of("r070") == pytest.approx(0.7)
    assert names.threshold_of("best") is None and names.threshold_of("policy") is None
    # weakest first: thresholds (tK by index), best, final; anything else (a file) last
    got = sorted(["final", "policy", "best", "r070", "r030"], key=names.order)
    assert got == ["r030", "r070", "best", "final", "policy"]


def test_resolve_maps_tk_and_checks_rnnn_against_the_env():
    thresholds = [0.3, 0.5, 0.7, 0.9]
    assert names.resolve("t2", thresholds, "e") == "r050"
    assert names.resolve("r090", thresholds, "e") == "r090"
    assert names.resolve("best", thresholds, "e") == "best"
    with pytest.raises(ValueError, match=r"policy.checkpoint=t7 is invalid for e: allowed t1..t4"):
        names.resolve("t7", thresholds, "e")
    with pytest.raises(ValueError) as err:
        names.resolve("r999", thresholds, "e")
    msg = str(err.value)
    assert "policy.checkpoint=r999 is invalid for e" in msg
    assert "[0.3, 0.5, 0.7, 0.9]" in msg and "r030, r050, r070, r090" in msg


def test_r999_fails_at_validation_on_a_fresh_root(tmp_path):
    """Before the fix r999 passed validation, PPO trained, and only then the job failed."""
    cfg = compose_cfg(tmp_path, *BASE, "gate=never", "policy.checkpoint=r999")
    with pytest.raises(ValueError, match=r"policy.checkpoint=r999 is invalid for empty5x5_random"):
        prepare(cfg)
    assert not (tmp_path / "checkpoints").exists()


def test_a_policy_from_elsewhere_keeps_its_own_checkpoint_names(tmp_path):
    """A bundle may hold thresholds this env's recipe does not: its files decide, at load."""
    cfg = compose_cfg(
        tmp_path, *BASE, "gate=never", "policy.checkpoint=r999", f"policy.path={tmp_path}"
    )
    prepare(cfg)


@pytest.mark.parametrize("tau", ["5", "2.01", "inf", "nan", "-0.5"])
def test_tau_outside_zero_to_max_entropy_is_refused(tmp_path, tau):
    cfg = compose_cfg(tmp_path, *BASE, "gate=entropy", f"gate.tau={tau}")
    with pytest.raises(ValueError, match=r"gate.tau=") as err:
        prepare(cfg)
    if tau in ("5", "2.01"):
        assert f"log2(|A|) = {math.log2(4):.3f}" in str(err.value)
        assert "never asks" in str(err.value) and "allow_tau_above_max=true" in str(err.value)


def test_tau_above_max_on_purpose(tmp_path):
    cfg = compose_cfg(tmp_path, *BASE, "gate=entropy", "gate.tau=5", "allow_tau_above_max=true")
    prepare(cfg)
    cfg = compose_cfg(tmp_path, *BASE, "gate=entropy", "gate.tau=inf", "allow_tau_above_max=true")
    with pytest.raises(ValueError, match="gate.tau=inf"):  # never finite: still refused
        prepare(cfg)


def test_tau_at_the_max_and_auto_pass(tmp_path):
    prepare(compose_cfg(tmp_path, *BASE, "gate=entropy", "gate.tau=2.0"))
    prepare(compose_cfg(tmp_path, *BASE, "gate=epistemic", "gate.tau=auto"))


@pytest.mark.parametrize("match_tau", ["5", "nan"])
def test_random_gate_match_tau_is_checked_like_tau(tmp_path, match_tau):
    cfg = compose_cfg(tmp_path, *BASE, "gate=random", "gate.p=match", f"gate.match_tau={match_tau}")
    with pytest.raises(ValueError, match="gate.match_tau="):
        prepare(cfg)


@pytest.mark.parametrize("rng", ["[0.1,nan]", "[nan,1.0]", "[0.1,inf]"])
def test_tau_range_must_be_finite(tmp_path, rng):
    cfg = compose_cfg(tmp_path, *BASE, "gate=entropy", "gate.tau=auto", f"gate.tau_range={rng}")
    with pytest.raises(ValueError, match="gate.tau_range="):
        prepare(cfg)


def test_match_needs_its_target_and_a_training_to_pick_from(tmp_path):
    """`policy.checkpoint=match` is a name like tK (no file until resolved), needs
    policy.match_success in [0, 1], and refuses a single zip (nothing to pick among)."""
    assert names.parse("match").kind == "match" and not names.parse("match").is_file_name
    assert names.order("best") < names.order("final") and names.order("match")[0] == 1
    ok = compose_cfg(tmp_path, *BASE, "policy.checkpoint=match", "policy.match_success=0.5")
    assert names.of_config(ok) == "match"
    for bad in ("null", "1.5", "-0.1", "true", "high"):
        cfg = compose_cfg(tmp_path, *BASE, "policy.checkpoint=match", f"policy.match_success={bad}")
        with pytest.raises(ValueError, match=r"needs policy.match_success.*\[0, 1\]"):
            prepare(cfg)
    one_zip = compose_cfg(
        tmp_path, *BASE, "policy.checkpoint=match", "policy.match_success=0.5",
        "policy.path=/some/policy.zip",
    )  # fmt: skip
    with pytest.raises(ValueError, match="policy.path='/some/policy.zip' is one file"):
        names.of_config(one_zip)
