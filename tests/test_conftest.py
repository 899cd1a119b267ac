"""The tests' own helpers (tests/conftest.py): a composition from compose_cfg's cache is the one
Hydra composes with the root; the TextWorld games of a run live in the run's folder."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from benchmark.envs.textworld import games
from tests.conftest import REPO, compose_cfg, compose_fresh

CASES = [
    (),
    ("env=doorkey8", "method=ask", "slm=tiny", "gate.tau=0.5"),
    ("+experiment=table1", "protocol=official"),
    ("env=higherlower", "policy=ppo_lstm", "policy.total_timesteps=2048"),
    ("env=tw_treasure", "method=ask_plus", "slm=oracle"),
]


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: ",".join(o) or "defaults")
def test_a_cached_composition_equals_composing_with_the_root(overrides, tmp_path):
    first = compose_cfg(tmp_path / "a", *overrides)
    first.eval.n_episodes = 12345  # a test changes its copy: never the next one
    again = compose_cfg(tmp_path / "b", *overrides)
    fresh = compose_fresh(tmp_path / "b", *overrides)
    assert OmegaConf.to_yaml(again) == OmegaConf.to_yaml(fresh)
    assert again.paths.root == fresh.paths.root == str(tmp_path / "b")
    assert OmegaConf.to_container(again.paths, resolve=True) == OmegaConf.to_container(
        fresh.paths, resolve=True
    )
    assert OmegaConf.is_struct(again) == OmegaConf.is_struct(fresh)
    assert again.eval.n_episodes != 12345


def test_a_root_given_in_the_overrides_wins_as_in_hydra(tmp_path):
    cfg = compose_cfg(tmp_path / "a", f"paths.root={tmp_path / 'b'}")
    assert cfg.paths.root == str(tmp_path / "b")


def test_textworld_games_go_to_the_runs_folder_not_the_checkout(textworld_games):
    assert games.default_root() == textworld_games
    assert REPO not in textworld_games.parents
