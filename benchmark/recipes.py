"""PPO training recipes by name (`policy.recipe: paper | official | suite`).

The values live in conf/ppo_recipes/default.yaml (root node `ppo_recipes`), one table per recipe
with a `default` row and optional per-env rows (`<env.name>`); a row `{use: <recipe>}` makes that
env train with another recipe's values (the paper protocol's one measured exception). The policy config reads them with
`${recipe:KEY}`, so switching `policy.recipe` switches every key of the recipe at once and one
key can still be overridden alone (`policy.learning_rate=...`). The recipe's name never enters a
checkpoint's hash, only the values it resolves to: the suite recipe resolves to the same values
as before it had a name, so its cached checkpoints keep their hash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

RECIPES_FILE = Path(__file__).resolve().parents[1] / "conf" / "ppo_recipes" / "default.yaml"
DEFAULT_RECIPE = "suite"  # a policy config without `recipe` (ppo_cnn, ppo_lstm) trains as before


def recipe_name(root: DictConfig) -> str:
    """The recipe `root` asks for: policy.recipe, or the suite's where the policy has none."""
    policy = root.get("policy")
    name = policy.get("recipe") if isinstance(policy, DictConfig) else None
    return DEFAULT_RECIPE if name is None else str(name)


def recipe_value(key: str, *, _root_: DictConfig) -> Any:
    """`${recipe:KEY}`: KEY of the chosen recipe, from its row for this env, else its default row.
    An env config loaded on its own (benchmark.envs.load_env_cfg: no policy, no recipe tables)
    reads the suite recipe from conf/ppo_recipes/default.yaml."""
    name = recipe_name(_root_)
    tables = _root_.get("ppo_recipes")
    if not isinstance(tables, DictConfig):
        tables = OmegaConf.load(RECIPES_FILE)
    if name not in tables:
        raise ValueError(f"policy.recipe={name!r} is unknown: allowed {sorted(tables)}")
    table = tables[name]
    env_node = _root_.get("env")
    env = str((env_node if isinstance(env_node, DictConfig) else _root_).get("name"))
    row_node = table.get(env)
    if isinstance(row_node, DictConfig) and "use" in row_node:
        # a measured exception (docs/protocol.md): this env trains with another recipe's values
        other = str(row_node.use)
        if other not in tables or other == name:
            raise ValueError(
                f"ppo_recipes.{name}.{env}.use={other!r}: must name another recipe, one of "
                f"{sorted(set(tables) - {name})}"
            )
        table = tables[other]
    for row in (env, "default"):
        node = table.get(row)
        if isinstance(node, DictConfig) and key in node:
            value = node[key]
            if isinstance(value, (DictConfig, ListConfig)):  # a config node, not a plain dict:
                # OmegaConf.resolve (`--cfg job --resolve`) cannot store a plain one in place
                return OmegaConf.create(OmegaConf.to_container(value, resolve=True))
            return value
    raise KeyError(f"ppo_recipes.{name} sets no {key!r} (neither for env {env!r} nor by default)")
