"""benchmark.brace.checks: the identities of Agent-BRACE's trained models (SFT and RL), computed
from the roles the `brace` keys declare (BraceKeys), pinned per trainer row of conf/brace/ and
per later-added setting: a model folder trained before is never refused, nor taken for
another's."""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields

import pytest
from omegaconf import OmegaConf

from benchmark.brace import checks
from benchmark.config import CONF, option_file
from tests.conftest import compose_cfg

ROWS = tuple(sorted(p.stem for p in (CONF / "brace").glob("*.yaml")))
# the digests of (sft_identity(), rl_identity()) on env=empty5x5_random, as the models of the
# code before the keys declared their roles were trained with
GOLDEN = {
    "agent_brace": ("03b6c65953483476", "d6bde0ce8e65f99f"),
    "binary_labels": ("68dfad7f24ffb41b", "bd8ae99b96b91b7b"),
    "direct_rl": ("2c073c39ba9aecc6", "2964a16ab8880990"),
    "frozen_belief": ("03b6c65953483476", "6336857afed13ce9"),
    "no_correctness_tracking": ("03b6c65953483476", "348d1591b2b1f9cd"),
    "no_state_rewards": ("03b6c65953483476", "428fcdf1f8012759"),
    "no_task_supervision": ("537a3496c1439e3f", "d32665c1e238b1e8"),
    "react_rl": ("2d7c1396b4a2b243", "fcd6ee90b6f4b3a7"),
    "summary_belief": ("bbec7171d041f913", "a567bef8ec6dc321"),
    "kl_coef": ("03b6c65953483476", "db5c123990a8f57b"),
    "belief_learning_rate": ("03b6c65953483476", "38db5404c934d6ec"),
    "grpo": ("03b6c65953483476", "f1639698108a1aa7"),
    "ask": ("03b6c65953483476", "cf4ae517c05055ac"),
    "execution_keys": ("03b6c65953483476", "d6bde0ce8e65f99f"),
}
# later-added and execution settings: what each case sets on agent_brace
OVERRIDES = {
    "kl_coef": ("brace.rl.kl_coef=0.1",),
    "belief_learning_rate": ("brace.rl.belief_learning_rate=1e-5",),
    "grpo": ("brace.algorithm=grpo",),
    "ask": ("brace.mode=ask",),
    "execution_keys": ("brace.threads=3", "brace.measure_base=true", "brace.skip_rl=true"),
}
ASK_JOB = "fbc90c631de0d6b2"  # rl_identity({"gate": "entropy"}) of agent_brace


def digest(identity: object) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[
        :16
    ]


def identities(tmp_path, *overrides: str) -> tuple[str, str]:
    s = checks.check(compose_cfg(tmp_path, "env=empty5x5_random", *overrides))
    return digest(s.sft_identity()), digest(s.rl_identity())


def test_every_trainer_row_is_pinned():
    assert set(ROWS) <= set(GOLDEN)


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_a_rows_model_identities_are_the_ones_its_models_were_trained_with(tmp_path, case):
    overrides = (f"brace={case}",) if case in ROWS else OVERRIDES[case]
    assert identities(tmp_path, *overrides) == GOLDEN[case]


def test_an_ask_mode_models_identity_names_its_job(tmp_path):
    s = checks.check(compose_cfg(tmp_path, "env=empty5x5_random"))
    assert digest(s.rl_identity({"gate": "entropy"})) == ASK_JOB
    assert s.rl_identity({"gate": "entropy"}) != s.rl_identity()


def test_every_brace_key_declares_its_role():
    """A new key of the `brace` node must say what it shapes (BraceKeys) before it can count."""
    keys = set(OmegaConf.load(option_file("brace", "agent_brace")))
    assert {f.name for f in fields(checks.BraceKeys)} == keys
