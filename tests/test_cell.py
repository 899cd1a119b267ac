"""Cell identity: what enters a cell's hash (inputs by content, code versions, splits) and what
never does (paths, execution settings)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from benchmark.build import locate_inputs, prepare
from benchmark.cell import CellSpec, digest
from benchmark.config import compose, load_yaml, option_file
from benchmark.envs.family import get_family
from benchmark.policy.checkpoints import config_hash
from benchmark.seeds import DEFAULT_SPLITS, Splits
from tests.conftest import compose_cfg

GOLDEN = Path(__file__).parent / "golden"
SLM_ONLY = ["env=empty5x5_random", "gate=always", "prompt=basic", "eval.n_episodes=2"]


def _spec(root, *overrides, checkpoint=None):
    cfg = compose_cfg(root, *overrides)
    return locate_inputs(prepare(cfg)[2], cfg, checkpoint, train=True)  # builds the tiny model


def test_identity_does_not_depend_on_the_results_root(tmp_path):
    """The tiny model lives under each root; its weights, not its path, enter the identity."""
    a = _spec(tmp_path / "a", *SLM_ONLY, "slm=tiny")
    b = _spec(tmp_path / "b", *SLM_ONLY, "slm=tiny")
    assert a.hash == b.hash and a.inputs["model"].startswith("hf-local:")
    assert str(tmp_path) not in repr(a.identity)
    # execution settings are not part of the results
    c = _spec(tmp_path / "a", *SLM_ONLY, "slm=tiny", "eval.mode=sequential", "eval.torch_threads=2")
    assert c.hash == a.hash
    assert _spec(tmp_path / "a", *SLM_ONLY, "slm=tiny", "seed=1").hash != a.hash


def test_replaced_weights_change_the_cell_and_its_name(tmp_path):
    ckpt = tmp_path / "mine.zip"
    ckpt.write_bytes(b"weights one")
    over = ["env=empty5x5_random", "gate=never", f"policy.path={ckpt}"]
    first = _spec(tmp_path, *over, checkpoint=ckpt)
    ckpt.write_bytes(b"weights two")
    second = _spec(tmp_path, *over, checkpoint=ckpt)
    assert first.hash != second.hash
    sha = hashlib.sha256(b"weights two").hexdigest()
    assert second.name == f"empty5x5_random/never/mine@{sha[:8]}"
    # the same file elsewhere is the same cell
    moved = tmp_path / "elsewhere" / "mine.zip"
    moved.parent.mkdir()
    shutil.copy(ckpt, moved)
    over_moved = ["env=empty5x5_random", "gate=never", f"policy.path={moved}"]
    assert _spec(tmp_path, *over_moved, checkpoint=moved).hash == second.hash


def test_unused_components_are_not_part_of_a_cell(tmp_path):
    """PPO-only ignores the consultant and prompt; SLM-only ignores the policy."""
    ckpt = tmp_path / "p.zip"
    ckpt.write_bytes(b"x")
    ppo = ["env=empty5x5_random", "gate=never", f"policy.path={ckpt}"]
    base = _spec(tmp_path, *ppo, checkpoint=ckpt)
    assert _spec(tmp_path, *ppo, "slm=oracle", "prompt=stateful", checkpoint=ckpt).hash == base.hash
    assert not base.uses_consultant and "slm" not in base.identity
    slm_only = _spec(tmp_path, *SLM_ONLY, "slm=oracle")
    assert _spec(tmp_path, *SLM_ONLY, "slm=oracle", "policy.seed=3").hash == slm_only.hash
    assert slm_only.labels()["checkpoint"] is None and "policy" not in slm_only.identity


def test_validation_split_and_training_version_enter_the_checkpoint_hash(tmp_path):
    cfg = compose_cfg(tmp_path, "env=empty5x5_random")
    other = Splits.from_config({"validation": [0, 50], "test": [100, 200]})
    assert config_hash(cfg, DEFAULT_SPLITS) == config_hash(cfg)
    assert config_hash(cfg, other) != config_hash(cfg)
    # the test split does not pick checkpoints
    test_only = Splits.from_config({"validation": [0, 100], "test": [100, 150]})
    assert config_hash(cfg, test_only) == config_hash(cfg)


def test_prompt_version_follows_the_golden_files():
    """A change to any prompt text shows in tests/golden/ and must come with a new prompt
    version of the env's family (Family.prompt_version, benchmark/envs/), so cells of the old
    text are not reused and other families' cells keep theirs. Each env's golden files have their
    own record, tests/golden/<env>.version ('<its family's prompt version> <digest>'): a new env
    adds its files and its record, and changes no other."""
    files: dict[str, list[Path]] = {}
    for f in sorted(GOLDEN.glob("*.txt")):
        files.setdefault(f.name.split("__")[0], []).append(f)
    assert {"fourrooms", "doorkey8", "higherlower", "memory_s11"} <= set(files)
    records = {p.stem for p in GOLDEN.glob("*.version")}
    assert records <= set(files), f"records without golden files: {sorted(records - set(files))}"
    for env, env_files in files.items():
        h = hashlib.sha256()
        for f in env_files:
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        family = get_family(str(load_yaml(option_file("env", env))["family"]))
        version, where = family.prompt_version, f"{type(family).__name__}.prompt_version"
        record = GOLDEN / f"{env}.version"
        line = f"{version} {h.hexdigest()}"
        assert record.is_file(), f"a new env's golden prompts: write '{line}' into {record}"
        recorded = record.read_text().split()
        assert recorded == line.split(), (
            f"the golden prompts of {env} changed: bump {where} (family {family.name!r}) and "
            f"record it in the tests/golden/*.version of its envs ({record}: "
            f"'{version + 1} {h.hexdigest()}')"
            if recorded[0] == str(version)
            else f"{where} changed: record it in {record} ('{line}')"
        )


def _asking_cell(env: str) -> CellSpec:
    cfg = compose([f"env={env}", "gate=always", "slm=oracle", "prompt=basic"])
    return CellSpec.from_config(cfg).with_inputs(policy_weights="w", model=None, tau_study="s")


def test_a_familys_prompt_version_rekeys_its_cells_only(monkeypatch):
    """A version belongs to what it versions: a new TextWorld prompt version is a new key for a
    TextWorld cell that asks a consultant, and the grid's and the cards' cells keep theirs."""
    envs = {"tw_quest": "textworld", "fourrooms": "grid", "higherlower": "cards"}
    textworld = get_family("textworld")
    before = {env: _asking_cell(env).identity for env in envs}  # a property: computed now
    assert before["tw_quest"]["code"]["prompts"] == textworld.prompt_version
    monkeypatch.setattr(type(textworld), "prompt_version", textworld.prompt_version + 1)
    after = {env: _asking_cell(env).identity for env in envs}
    assert after["tw_quest"]["code"]["prompts"] == before["tw_quest"]["code"]["prompts"] + 1
    assert digest(after["tw_quest"]) != digest(before["tw_quest"])
    for env in ("fourrooms", "higherlower"):
        assert digest(after[env]) == digest(before[env]), env
        assert after[env]["code"]["prompts"] == get_family(envs[env]).prompt_version, env


def _hint_cell(env: str, hint: str, *extra: str) -> CellSpec:
    cfg = compose(
        ["+experiment=hint_ablation", f"env={env}", "method=ask_plus", "slm=tiny",
         f"prompt.planner_hint={hint}", *extra]
    )  # fmt: skip
    return CellSpec.from_config(cfg).with_inputs(
        checkpoint_sha256="c" * 64, policy_weights="w", model="m", tau_study="s"
    )


def test_identity_holds_the_prompt_keys_the_family_reads():
    """The hint ablation: MiniGrid Memory's stateful prompts print a `Planner hint:` line as the
    grid's do, so its three hints are three cells, each named apart; HigherLower's prompt prints
    none, so its three are one cell. A key the family's texts do not read at the cell's level
    (the hint at `basic`) stays out of the identity."""
    hints = ("seen_target", "frontier", "none")
    for env in ("memory_s11", "fourrooms"):
        cells = [_hint_cell(env, h) for h in hints]
        assert len({c.hash for c in cells}) == 3, env
        assert len({c.name for c in cells}) == 3, [c.name for c in cells]
        # frontier, the hint of the cells computed before the key existed, is left out (ADDED_KEY_DEFAULTS)
        held = [c.identity["prompt"].get("planner_hint") for c in cells]
        assert held == ["seen_target", None, "none"]
    cards = [_hint_cell("higherlower", h) for h in hints]
    assert len({c.hash for c in cards}) == 1 and len({c.name for c in cards}) == 1
    assert "planner_hint" not in cards[0].identity["prompt"]
    basic = [_hint_cell("memory_s11", h, "prompt=basic", "prompt.rationale=false") for h in hints]
    assert len({c.hash for c in basic}) == 1
    assert "planner_hint" not in basic[0].identity["prompt"]
    named = _hint_cell("memory_s11", "none").name
    assert "stateful+r,planner_hint=none" in named, named


def test_families_declare_the_prompt_keys_their_texts_read():
    from benchmark.envs.family import get_family

    grid, memory, cards = (get_family(f) for f in ("grid", "memory", "cards"))
    assert grid.prompt_keys("basic") == frozenset()
    assert grid.prompt_keys("stateful_min") == {"planner_hint"}
    assert grid.prompt_keys("stateful") == {"planner_hint", "map_radius"}
    assert memory.prompt_keys("stateful") == grid.prompt_keys("stateful")
    assert all(cards.prompt_keys(level) == frozenset() for level in ("basic", "stateful"))


def test_gate_normalise_at_false_keeps_every_hash_and_true_is_another_cell():
    """gate.normalise was added after cells existed: at false (the default) it stays out of the
    identity, so a config without the key is the same cell; true is another cell, another
    tuning study and another name."""
    from omegaconf import OmegaConf, open_dict

    def cell(*extra: str, drop: bool = False) -> CellSpec:
        cfg = compose(["env=fourrooms", "gate=entropy", "slm=tiny", "prompt=basic", *extra])
        if drop:
            with open_dict(cfg):
                del cfg.gate["normalise"]
            assert "normalise" not in OmegaConf.to_container(cfg.gate)
        return CellSpec.from_config(cfg).with_inputs(
            checkpoint_sha256="c" * 64, policy_weights="w", model="m", tau_study="s"
        )

    plain, before = cell(), cell(drop=True)
    assert plain.hash == before.hash and "normalise" not in plain.identity["gate"]
    assert plain.tuning_key() == before.tuning_key()
    normalised = cell("gate.normalise=true")
    assert normalised.hash != plain.hash and normalised.identity["gate"]["normalise"] is True
    assert normalised.tuning_key() != plain.tuning_key()  # tau is in other units
    assert normalised.gate.normalise and not plain.gate.normalise
    assert normalised.name == plain.name.replace("/entropy/", "/entropy-normalised/")


def test_a_text_games_ppo_input_and_head_are_in_the_cells_name_and_hash():
    """The player input and the command-scoring head name their cells (tw_treasure+player,
    ...+commands) and re-key them; at their defaults the name and hash are as before."""
    base = ["env=tw_treasure", "gate=never", "protocol=suite"]
    specs = {}
    for extra in ([], ["env.task.ppo_input=player"], ["policy.head=commands"]):
        cfg = compose([*base, *extra])
        spec = CellSpec.from_config(cfg).with_inputs(policy_weights=config_hash(cfg))
        specs[tuple(extra)] = spec
    plain, player, commands = specs.values()
    assert plain.name == "tw_treasure/never/best-s0"
    assert player.name == "tw_treasure+player/never/best-s0"
    assert commands.name == "tw_treasure/never/best-s0+commands"
    assert len({s.hash for s in specs.values()}) == 3
    # the method's name says the variant, so report rows and W&B runs tell them apart
    from benchmark.labels import method_label, of_spec

    assert [method_label(of_spec(s)) for s in specs.values()] == [
        "PPO",
        "PPO [player input]",
        "PPO [commands head]",
    ]
    # a cell without PPO (SLM-only) plays the same episodes whatever PPO would read
    slm_only = ["env=tw_treasure", "gate=always", "slm=oracle", "protocol=suite"]
    a, b = (
        CellSpec.from_config(compose([*slm_only, *extra])).with_inputs(model=None)
        for extra in ([], ["env.task.ppo_input=player"])
    )
    assert a.hash == b.hash and a.name == b.name
