"""benchmark.settings: the declared roles and the one identity function every scheme uses."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from benchmark.settings import (
    added,
    declared,
    execution,
    execution_keys,
    identity,
    identity_of,
    old_values,
    outside_keys,
)


@dataclass(frozen=True)
class Toy:
    size: int = identity(3)
    threads: int = execution(1)
    hint: str = added("frontier", old="frontier")
    trials: int = identity(15, outside=("study",))
    shared: dict = identity({})


def test_the_roles_read_back_from_the_declarations():
    assert execution_keys(Toy) == ("threads",)
    assert old_values(Toy) == {"hint": "frontier"}
    assert outside_keys(Toy, "study") == ("trials",)
    assert Toy().shared == {} and Toy().shared is not Toy().shared  # no shared mutable default


def test_identity_drops_execution_old_values_and_what_a_scheme_does_not_see():
    assert identity_of(Toy()) == {"size": 3, "trials": 15, "shared": {}}
    assert identity_of(Toy(hint="none", threads=8)) == identity_of(Toy(hint="none"))
    assert identity_of(Toy(hint="none"))["hint"] == "none"  # another value: other results
    assert "trials" not in identity_of(Toy(), scheme="study")


def test_a_config_section_keeps_the_keys_its_owner_does_not_declare():
    section = {"size": 4, "threads": 2, "hint": "frontier", "split": "test"}
    assert identity_of(Toy, section) == {"size": 4, "split": "test"}
    assert identity_of(Toy, "not a mapping") == "not a mapping"


def test_the_bases_settings_declare_their_roles_through_the_shared_helpers():
    from benchmark.brace.base import BaseSettings

    assert execution_keys(BaseSettings) == ("checkpoint_every", "threads")
    fast = BaseSettings(threads=1, checkpoint_every=7)
    assert fast.digest() == BaseSettings().digest()
    assert BaseSettings(layers=3).digest() != BaseSettings().digest()
    with pytest.raises(TypeError):
        BaseSettings(nonsense=1)  # type: ignore[call-arg]


# ------------------------------------------------------------------ the cell's owners
def test_the_cells_key_lists_are_read_from_the_owners_declarations():
    """cell.py keeps no list of keys: what it drops is what the section owners declare, and
    that is what the hand-kept lists held (so no cell changes its hash)."""
    from benchmark import cell
    from benchmark.gates import GateSettings
    from benchmark.tuning import TuningSettings

    assert cell.OWNERS["gate"] is GateSettings and cell.OWNERS["tuning"] is TuningSettings
    assert cell.ADDED_KEY_DEFAULTS == {
        "gate": {"normalise": False},
        "prompt": {"planner_hint": "frontier", "style": "appendix"},
        "tuning": {"clip_tau": True},
    }
    assert cell.EXECUTION_KEYS == {"eval": ("mode", "torch_threads", "step_records", "workers")}
    assert {k: set(v) for k, v in cell.TUNING_KEY_DROPS.items()} == {
        "gate": {"tau"},
        "tuning": {"n_trials", "scope", "shared", "study"},
    }


def _hash(tmp_path, *overrides: str) -> str:
    from benchmark.build import normalize_checkpoint
    from benchmark.cell import CellSpec
    from tests.conftest import compose_cfg

    cfg = compose_cfg(tmp_path, "env=higherlower", *overrides)
    normalize_checkpoint(cfg)
    spec = CellSpec.from_config(cfg)
    return spec.with_inputs(policy_weights="w", model=None, tau_study="s").hash


def test_an_execution_field_leaves_the_cell_and_an_identity_field_moves_it(tmp_path):
    plain = _hash(tmp_path, "gate=entropy", "gate.tau=0.5")
    assert _hash(tmp_path, "gate=entropy", "gate.tau=0.5", "eval.torch_threads=2") == plain
    assert _hash(tmp_path, "gate=entropy", "gate.tau=0.5", "eval.mode=sequential") == plain
    assert _hash(tmp_path, "gate=entropy", "gate.tau=0.5", "eval.n_episodes=7") != plain
    assert _hash(tmp_path, "gate=entropy", "gate.tau=0.5", "gate.normalise=true") != plain


def test_the_checkpoint_scheme_reads_the_policy_owners_declarations():
    """What names no PPO checkpoint directory is declared on PolicySettings, and is what the
    hand-kept lists held (checkpoint hashes are pinned in tests/test_protocol.py)."""
    from benchmark.policy.checkpoints import ADDED_POLICY_KEY_DEFAULTS, PolicySettings
    from benchmark.settings import CHECKPOINT

    section = {f: 1 for f in declared(PolicySettings)} | {"learning_rate": 3e-4}
    assert identity_of(PolicySettings, section, CHECKPOINT) == {
        "torch_threads": 1,
        "dropout_placement": 1,
        "image_scale": 1,
        "train_seed_pool": 1,
        "eval_seeds": 1,
        "head": 1,
        "learning_rate": 3e-4,
    }
    assert identity_of(PolicySettings, {"checkpoint": "best", "head": "slots"}) == {
        "checkpoint": "best"  # in the cell's scheme, which saved file is loaded matters
    }
    assert ADDED_POLICY_KEY_DEFAULTS == {
        "dropout_placement": "after_activation",
        "image_scale": None,
        "train_seed_pool": None,
        "eval_seeds": "fixed",
        "head": "slots",
    }
