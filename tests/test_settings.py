"""benchmark.settings: the declared roles and the one identity function every scheme uses."""

from __future__ import annotations

import ast
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


def test_the_env_family_and_decoding_owners_drop_what_their_lists_dropped():
    """envs.base.TaskSettings, envs.family.FamilyPromptSettings and consultants.base.Decoding
    declare what the hand-kept lists held (ADDED_TASK_KEY_DEFAULTS, IDENTITY_FAMILY_KEYS,
    DECODING_DEFAULTS), so no cell changes its hash (tests/test_cell_hashes.py)."""
    from benchmark.cell import PromptSettings
    from benchmark.consultants.base import Decoding
    from benchmark.envs.base import TaskSettings, env_identity
    from benchmark.settings import FINETUNED_PROMPT, UNREAD, WITHOUT_PPO

    task = {"level": 5, "ppo_input": "answer"}
    assert env_identity({"name": "tw", "task": task}) == {"name": "tw", "task": {"level": 5}}
    assert identity_of(TaskSettings, {**task, "ppo_input": "player"})["ppo_input"] == "player"
    assert identity_of(TaskSettings, {**task, "ppo_input": "player"}, WITHOUT_PPO) == {"level": 5}
    prompt = {"planner_hint": "none", "map_radius": 5, "style": "appendix", "level": "stateful"}
    assert identity_of(PromptSettings, prompt) == {
        "planner_hint": "none",
        "map_radius": 5,
        "level": "stateful",
    }
    assert identity_of(PromptSettings, prompt, UNREAD) == {"map_radius": 5, "level": "stateful"}
    assert PromptSettings().planner_hint == "frontier" and PromptSettings().map_radius == 5
    old = {"mode": "generate", "source": "config", "repetition_penalty": 1.0}
    decoding = {"temperature": 0.0, "choice_score": "sum", **old}
    assert identity_of(Decoding, decoding) == {"temperature": 0.0}
    assert identity_of(Decoding, decoding, FINETUNED_PROMPT) == {"temperature": 0.0, **old}
    assert identity_of(Decoding, {**decoding, "choice_score": "mean"})["choice_score"] == "mean"


def test_a_field_kept_in_a_scheme_stays_there_at_its_old_value():
    @dataclass(frozen=True)
    class Later:
        hint: str = added("frontier", old="frontier", kept_in=("later",))

    assert identity_of(Later, {"hint": "frontier"}) == {}
    assert identity_of(Later, {"hint": "frontier"}, "later") == {"hint": "frontier"}


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


# ------------------------------------------------------------------ no hand-kept key lists
IDENTITY_MODULES = (
    "benchmark/cell.py",
    "benchmark/policy/checkpoints.py",
    "benchmark/envs/base.py",
    "benchmark/envs/family.py",
    "benchmark/brace/checks.py",
    "benchmark/brace/settings.py",
    "benchmark/finetune/store.py",
)
KEY_LIST_SUFFIXES = ("_KEYS", "_DEFAULTS", "_DEFAULT", "_DROPS", "_ADDED", "_OFF", "EXECUTION")


def _config_key_names() -> set[str]:
    """Every key of every mapping in conf/ (what a config key may be called)."""
    import yaml

    from benchmark.config import CONF

    names: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            names.update(str(k) for k in node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in CONF.rglob("*.yaml"):
        walk(yaml.safe_load(path.read_text()))
    return names


def _literal_strings(node: ast.expr) -> set[str]:
    """The strings a literal tuple, list, set or dict (a dict's keys), or frozenset/set/tuple/dict
    of one, spells out; empty for anything computed (read from an owner's declarations)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1:
        if node.func.id in ("frozenset", "set", "tuple", "dict"):
            return _literal_strings(node.args[0])
    items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
    if not isinstance(node, (ast.Dict, ast.Tuple, ast.List, ast.Set)) or items is None:
        return set()
    return {n.value for n in items if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def hand_kept_key_lists(source: str, config_keys: set[str]) -> dict[str, set[str]]:
    """The module-level constants named *_KEYS, *_DEFAULTS or *_DROPS whose literal value spells
    out config key names, by name, with those names."""
    found = {}
    for stmt in ast.parse(source).body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
        value = getattr(stmt, "value", None)
        for target in targets:
            if not isinstance(target, ast.Name) or value is None:
                continue
            if target.id.endswith(KEY_LIST_SUFFIXES):
                keys = _literal_strings(value) & config_keys
                if keys:
                    found[target.id] = keys
    return found


def test_the_scan_finds_a_hand_kept_list_and_passes_a_derived_one():
    keys = {"ppo_input", "planner_hint"}
    source = (
        'ADDED_TASK_KEY_DEFAULTS = {"ppo_input": "answer"}\n'
        'IDENTITY_FAMILY_KEYS: tuple = ("planner_hint",)\n'
        "EXECUTION_KEYS = {k: execution_keys(o) for k, o in OWNERS.items()}\n"
        'SETTINGS_KEYS = ("policy_class",)\n'  # not a config key: the zip's own fields
    )
    assert hand_kept_key_lists(source, keys) == {
        "ADDED_TASK_KEY_DEFAULTS": {"ppo_input"},
        "IDENTITY_FAMILY_KEYS": {"planner_hint"},
    }


def key_filters(source: str, config_keys: set[str]) -> dict[int, set[str]]:
    """The dict comprehensions that pick a mapping's keys by a list the module spells out (a
    literal, or a name it binds to one at any depth): iterating over it, or testing a key's
    membership in it. By line, with the config key names the list holds."""

    def bound(statements: list[ast.stmt], deep: bool) -> dict[str, set[str]]:
        names: dict[str, set[str]] = {}
        nodes = (n for s in statements for n in (ast.walk(s) if deep else (s,)))
        for node in nodes:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in (t for t in targets if isinstance(t, ast.Name)):
                    names.setdefault(target.id, set()).update(_literal_strings(node.value))
        return names

    def filters(scope: ast.AST, names: dict[str, set[str]]) -> dict[int, set[str]]:
        def spelled(node: ast.expr) -> set[str]:
            return (
                names.get(node.id, set()) if isinstance(node, ast.Name) else _literal_strings(node)
            )

        found = {}
        for comp in (c for c in ast.walk(scope) if isinstance(c, ast.DictComp)):
            keys: set[str] = set()
            for gen in comp.generators:
                keys |= spelled(gen.iter)
                for test in (t for cond in gen.ifs for t in ast.walk(cond)):
                    if isinstance(test, ast.Compare):
                        for op, right in zip(test.ops, test.comparators, strict=True):
                            if isinstance(op, (ast.In, ast.NotIn)):
                                keys |= spelled(right)
            if keys & config_keys:
                found[comp.lineno] = keys & config_keys
        return found

    tree = ast.parse(source)
    module = bound(tree.body, deep=False)
    found = filters(tree, module)  # a function's own names shadow the module's
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.update(filters(fn, {**module, **bound(fn.body, deep=True)}))
    return {line: keys for line, keys in found.items() if keys}


def test_the_scan_finds_a_mapping_filtered_by_a_spelled_out_list():
    keys = {"mode", "source", "seed"}
    source = (
        "def sans(prompt):\n"
        '    asking = ("mode", "source")\n'
        "    return {k: v for k, v in prompt.items() if k not in asking}\n"
        "def pick(values):\n"
        '    return {k: values[k] for k in ("seed",)}\n'
        "def derived(values):\n"
        "    return {k: v for k, v in values.items() if k not in execution_keys(Owner)}\n"
    )
    assert key_filters(source, keys) == {3: {"mode", "source"}, 5: {"seed"}}


@pytest.mark.parametrize("module", IDENTITY_MODULES)
def test_no_identity_module_keeps_a_list_of_config_keys(module):
    """Identity is computed from the owners' field declarations (benchmark.settings), never
    from lists of keys kept beside the code that reads them: no module-level list, and no
    mapping filtered by a list spelled out in the function that filters it."""
    from benchmark.config import CONF

    source = (CONF.parent / module).read_text()
    assert hand_kept_key_lists(source, _config_key_names()) == {}
    if module != "benchmark/cell.py":  # it picks the config groups a cell is made of by its gate
        assert key_filters(source, _config_key_names()) == {}
