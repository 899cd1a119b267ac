"""benchmark.settings: the declared roles and the one identity function every scheme uses."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from benchmark.settings import (
    added,
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
