"""The tests' own helpers (tests/conftest.py): a composition from compose_cfg's cache is the one
Hydra composes with the root; the TextWorld games of a run live in the run's folder; the committed
small policy is the current recipe's; the shared tiny models are the package's builds, once."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from benchmark.envs.textworld import games
from tests import small_policy
from tests.conftest import REPO, TINY_KINDS, compose_cfg, compose_fresh, file_digests

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


def test_the_committed_small_policy_is_the_current_recipes_and_intact(tmp_path):
    """tests/data/small-policy holds the checkpoint the tests' small recipe trains today: same
    recipe hash in its name, every zip matching its manifest. A recipe, split or training-code
    version change renames what `ensure` wants: rebuild it then."""
    from benchmark.policy.checkpoints import intact

    target, source = small_policy.wanted(tmp_path), small_policy.committed()
    remedy = "rebuild it with `make test-policy` and commit tests/data/small-policy"
    assert source is not None, f"no committed small policy in {small_policy.COMMITTED}: {remedy}"
    assert source.name == target.name, f"{source.name} is not {target.name}: {remedy}"
    assert intact(source), f"{source} does not match its COMPLETE manifest: {remedy}"
    assert small_policy.seed(tmp_path) and intact(target)
    assert sorted(p.name for p in target.iterdir()) == sorted(p.name for p in source.iterdir())


def test_the_shared_tiny_models_are_the_packages_builds_made_once(tiny_model, tmp_path):
    """Each kind is the package's model (the SIZES shape, or the Qwen3.5 hybrid), loaded as a cell
    loads it (from_pretrained); asked again it is the same folder, not built again; another seed
    is other weights; an unknown kind names the kinds there are."""
    import shutil

    from transformers import AutoConfig

    from benchmark.consultants.tiny import SIZES

    configs = {kind: AutoConfig.from_pretrained(tiny_model(kind)) for kind in TINY_KINDS}
    assert {k: type(c).__name__ for k, c in configs.items()} == {
        "tiny": "Qwen3Config",
        "small": "Qwen3Config",
        "text": "Qwen3Config",
        "hybrid": "Qwen3_5TextConfig",
    }
    for kind in ("tiny", "small", "text"):
        assert configs[kind].hidden_size == SIZES[kind]["hidden_size"]
    assert configs["tiny"].vocab_size < configs["small"].vocab_size < configs["text"].vocab_size
    assert "linear_attention" in configs["hybrid"].layer_types
    path = tiny_model()
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert (
        tiny_model("tiny", 0) == path and (path / "model.safetensors").stat().st_mtime_ns == stamp
    )
    assert REPO not in path.parents
    weights = (path / "model.safetensors").read_bytes()
    assert (tiny_model(seed=1) / "model.safetensors").read_bytes() != weights
    with pytest.raises(ValueError, match=r"kind 'huge' is not one of \['tiny', 'small'"):
        tiny_model("huge")
    # the end-of-session check sees a changed file (a test must change a copy)
    copy = shutil.copytree(path, tmp_path / "copy")
    before = file_digests(copy)
    assert before == file_digests(path)
    (copy / "generation_config.json").write_text("{}")
    assert file_digests(copy) != before
