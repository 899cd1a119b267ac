"""Which protocol a job ran (conf/protocol: paper | official | suite) and which of the protocol's
keys the job overrides, for summary.json, the W&B run config, the plan and the report captions.

A protocol is a set of values that config keys read through `${protocol.*}`; the values enter a
cell's identity through those keys, the protocol's name does not (two protocols that agree on
everything a cell uses share the cell)."""

from __future__ import annotations

import fnmatch
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

PROTOCOLS = ("paper", "official", "suite")
# protocol field -> (the config key that reads it, the cell config part that must be in use)
KEYS = {
    "policy_recipe": ("policy.recipe", "policy"),
    "prompt_style": ("prompt.style", "prompt"),
    "planner_hint": ("prompt.planner_hint", "prompt"),
    "mc_samples": ("gate.mc_samples", "gate"),
    "decoding_source": ("slm.decoding.source", "slm"),
    "repetition_penalty": ("slm.decoding.repetition_penalty", "slm"),
    "slm_dtype": ("slm.backend.dtype", "slm"),
    "clip_tau": ("tuning.clip_tau", "tuning"),
    "n_trials": ("tuning.n_trials", "tuning"),
    "tau_range": ("gate.tau_range", "gate"),
}
# protocol fields holding one value per env name (an env without one keeps the config's own)
PER_ENV = {"tau_range"}
# protocol fields of a backend's own keys: they apply where the job's backend declares that it
# reads them (`Consultant.protocol_fields`: the hf backend's dtype, not the tiny model's)
BACKEND_FIELDS = {field for field, (key, _) in KEYS.items() if key.startswith("slm.backend.")}
# experiment_name -> the protocol field holding that preset's tuning keys (conf/experiment)
PRESET_TUNING = {"table1": "table1_tuning", "table2": "table2_tuning", "table3": "table3_tuning"}
# Agent-BRACE's TextWorld presets read their games, the RL stage's numbers and the evaluation
# decoding from the protocol: field -> (the config key it sets, the presets that read it, where
# paper's and official's value comes from); a field holding a mapping of env names holds one
# value per env
BRACE_TW_PRESETS = ("brace_tw", "brace_tw_long", "brace_tw_train")
BRACE_TW_EVAL = ("brace_tw", "brace_tw_long")  # the presets that evaluate cells
BRACE_TW_TRAIN = ("brace_tw_train",)  # the preset that trains the models
_RECIPE = "released recipes/textworld_basic_ppo_decouple_joint_belief_vllm.sh"
BRACE_TW_FIELDS = {
    "brace_tw_generation": (
        "env.task.generation",
        BRACE_TW_PRESETS,
        "released generate_textworld_*_tasks.sh, train mixture",
    ),
    "brace_tw_evaluation_generation": (
        "env.task.evaluation_generation",
        BRACE_TW_PRESETS,
        "released generate_textworld_*_tasks.sh, validation and test mixture",
    ),
    "brace_tw_train_games": (
        "env.task.train_games",
        BRACE_TW_PRESETS,
        "released generate_textworld_*_tasks.sh, train count",
    ),
    "brace_tw_max_steps": (
        "env.task.max_steps",
        BRACE_TW_PRESETS,
        "released recipes/*textworld*.sh, max_iter",
    ),
    "brace_tw_max_commands": (
        "env.task.max_commands",
        BRACE_TW_PRESETS,
        "the suite's: above the most commands a walkthrough state of these games offers",
    ),
    "brace_rl_temperature": ("brace.rl.temperature", BRACE_TW_TRAIN, f"{_RECIPE}, rollout_temp"),
    "brace_kl_coef": (
        "brace.rl.kl_coef",
        BRACE_TW_TRAIN,
        f"{_RECIPE}, kl_coef with use_kl_in_reward=True, use_kl_loss=False",
    ),
    "brace_actor_lr": ("brace.rl.learning_rate", BRACE_TW_TRAIN, f"{_RECIPE}, actor_lr"),
    "brace_critic_lr": (
        "brace.rl.value_learning_rate",
        BRACE_TW_TRAIN,
        f"{_RECIPE}, critic_lr (a critic model there, the value head here)",
    ),
    "brace_belief_lr": (
        "brace.rl.belief_learning_rate",
        BRACE_TW_TRAIN,
        f"{_RECIPE}, belief_lm_lr",
    ),
    "brace_tw_eval_temperature": (
        "slm.decoding.temperature",
        BRACE_TW_EVAL,
        "released recipes/eval_textworld_basic_ppo_decouple_joint_belief_vllm.sh, val_rollout_temp",
    ),
    "brace_tw_eval_seed": (
        "slm.decoding.seed",
        BRACE_TW_EVAL,
        "the suite's: with sampling, each run (brace.seed) its own draws",
    ),
}
# protocol fields that prompt options read (conf/prompt/<name>.yaml), in every preset:
# field -> (config key, the prompts that read it, where paper's and official's value comes from)
PROMPT_FIELDS = {
    "brace_belief_max_new_tokens": (
        "prompt.belief_max_new_tokens",
        ("brace", "mem1"),
        f"{_RECIPE}, belief_lm_max_gen_tokens",
    ),
}
# the envs the released code trains and evaluates (its recipes and per-env values)
RELEASED_ENVS = ("fourrooms", "doorkey8", "higherlower")
# conf/protocol/paper.yaml's list of the places where `paper` differs from the released code
# (`official`): one row each of the generated departures table; not a config key
DEPARTURES = "departures"
DEPARTURE_KINDS = ("text", "departure", "decision")
# the keys a protocol file may hold
FIELDS = frozenset(
    {"name", DEPARTURES, *KEYS, *PRESET_TUNING.values(), *BRACE_TW_FIELDS, *PROMPT_FIELDS}
)


def record(cfg: DictConfig, used: set[str] | None = None) -> dict[str, Any] | None:
    """{"name": protocol, "overrides": {config key: value}}: the protocol's keys whose value in
    this job differs from the protocol's (a key set on the command line or by a preset), among
    the config parts the cell uses (`used`: CellSpec.config's keys; None: all). None without a
    protocol node."""
    node = cfg.get("protocol")
    if not isinstance(node, DictConfig):
        return None
    expected: dict[str, Any] = {}
    env = OmegaConf.select(cfg, "env.name", default=None)
    for field, (key, part) in KEYS.items():
        if field in BACKEND_FIELDS and field not in _backend_fields(cfg):
            continue  # e.g. the tiny model's dtype: no hub model, the field does not apply
        if field in node and (used is None or part in used):
            if field not in PER_ENV:
                expected[key] = node[field]
            elif env in node[field]:
                expected[key] = node[field][env]
    table = PRESET_TUNING.get(str(cfg.get("experiment_name")))
    if table in node and (used is None or "tuning" in used):
        for sub, value in node[table].items():
            expected[f"tuning.{sub}"] = value
    preset = str(cfg.get("experiment_name"))
    for field, (key, presets, _) in BRACE_TW_FIELDS.items():
        if preset not in presets or (used is not None and key.split(".")[0] not in used):
            continue
        value = node.get(field)
        if isinstance(value, DictConfig):  # one value per env
            value = value.get(env)
        if value is not None:
            expected[key] = value
    prompt = OmegaConf.select(cfg, "prompt.name", default=None)
    for field, (key, prompts, _) in PROMPT_FIELDS.items():
        if prompt in prompts and field in node and (used is None or "prompt" in used):
            expected[key] = node[field]
    overrides = {}
    for key, want in expected.items():
        have = OmegaConf.select(cfg, key, default=None)
        if have is None:  # the job has no such key (a policy or prompt without it)
            continue
        if _plain(have) != _plain(want):
            overrides[key] = _plain(have)
    return {"name": str(node.get("name")), "overrides": overrides}


def _backend_fields(cfg: DictConfig) -> tuple[str, ...]:
    """The protocol fields the job's backend class declares it reads (none without one)."""
    from hydra.utils import get_class

    target = OmegaConf.select(cfg, "slm.backend._target_", default=None)
    try:
        return tuple(getattr(get_class(str(target)), "protocol_fields", ()))
    except Exception:  # noqa: BLE001 - no backend, or one validate.py names as bad
        return ()


def values_table() -> str:
    """The markdown table of every protocol's values, read from conf/protocol (docs/protocol.md
    holds it between markers; tests/test_protocol.py fails when the two disagree)."""
    from benchmark.config import CONF

    files = {  # as written: a value may name another key (${brace.seed}), resolved in a job
        name: OmegaConf.to_container(OmegaConf.load(CONF / "protocol" / f"{name}.yaml"))
        for name in PROTOCOLS
    }
    keys = {field: f"`{key}`" for field, (key, _) in KEYS.items()}
    keys.update({t: f"`tuning.*` in `+experiment={e}`" for e, t in PRESET_TUNING.items()})
    keys.update(
        {
            f: f"`{k}` in {_presets_text(presets)} ({src})"
            for f, (k, presets, src) in BRACE_TW_FIELDS.items()
        }
    )
    keys.update(
        {
            f: f"`{k}` of {', '.join(f'`prompt={p}`' for p in prompts)} ({src})"
            for f, (k, prompts, src) in PROMPT_FIELDS.items()
        }
    )
    lines = [
        "| protocol field | config key | " + " | ".join(PROTOCOLS) + " |",
        "|---|---|" + "---|" * len(PROTOCOLS),
    ]
    for field, key in keys.items():
        cells = [_inline(files[name].get(field)) for name in PROTOCOLS]
        lines.append(f"| `{field}` | {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _presets_text(presets: tuple[str, ...]) -> str:
    """`+experiment=brace_tw*` for all three TextWorld presets, else each one named."""
    if set(presets) == set(BRACE_TW_PRESETS):
        return "`+experiment=brace_tw*`"
    return ", ".join(f"`+experiment={p}`" for p in presets)


def differences(
    paper: DictConfig | None = None,
    official: DictConfig | None = None,
    recipes: DictConfig | None = None,
) -> dict[str, tuple[Any, Any]]:
    """Every value on which `paper` and `official` (the released code) differ: "<config key>" or
    "<config key> (<env>)" -> (paper's value, official's value). The protocol fields by their
    config keys (per-env fields and each recipe value per env in RELEASED_ENVS); the protocol
    files and conf/ppo_recipes unless given (a test passes a changed copy)."""
    from benchmark.config import CONF
    from benchmark.recipes import RECIPES_FILE, recipe_value

    paper = paper if paper is not None else OmegaConf.load(CONF / "protocol" / "paper.yaml")
    official = (
        official if official is not None else OmegaConf.load(CONF / "protocol" / "official.yaml")
    )
    recipes = recipes if recipes is not None else OmegaConf.load(RECIPES_FILE)
    default_range = [0.1, 2.0]  # conf/gate/entropy.yaml's, where the protocol names no range
    out: dict[str, tuple[Any, Any]] = {}

    def add(item: str, a: Any, b: Any) -> None:
        if _plain(a) != _plain(b):
            out[item] = (_plain(a), _plain(b))

    keys = {field: key for field, (key, _) in KEYS.items() if field != "policy_recipe"}
    keys.update({t: f"tuning.* in +experiment={e}" for e, t in PRESET_TUNING.items()})
    for field, key in keys.items():
        if field in PER_ENV:
            for env in RELEASED_ENVS:
                a = paper[field].get(env, default_range) if field in paper else default_range
                b = official[field].get(env, default_range) if field in official else default_range
                add(f"{key} ({env})", a, b)
        else:
            add(key, paper.get(field), official.get(field))
    for env in RELEASED_ENVS:  # policy.recipe: every value the recipe fills, per env
        env_cfg = OmegaConf.load(CONF / "env" / f"{env}.yaml")
        values = {}
        for name in (paper.policy_recipe, official.policy_recipe):
            root = OmegaConf.create({"policy": {"recipe": name}, "env": env_cfg})
            root.ppo_recipes = recipes
            fields = sorted({str(k) for t in recipes.values() for k in t.get("default", {})})
            values[name] = {k: _plain(recipe_value(k, _root_=root)) for k in fields}
        for k in values[paper.policy_recipe]:
            add(
                f"policy.{k} ({env})",
                values[paper.policy_recipe][k],
                values[official.policy_recipe][k],
            )
    return out


def undocumented(
    diffs: dict[str, tuple[Any, Any]], departures: list | ListConfig
) -> tuple[list[str], list[str]]:
    """(the differences no departure row covers, the rows that cover no difference and are not
    a `decision`): both empty when the table and the protocol files agree. A row's `covers` are
    fnmatch patterns over the keys of `differences()`."""
    rows = [_plain(r) for r in departures]
    bare = [d for d in diffs if not any(_covers(r, d) for r in rows)]
    idle = [
        str(r.get("covers") or r.get("what"))
        for r in rows
        if r.get("kind") != "decision" and not any(_covers(r, d) for d in diffs)
    ]
    return bare, idle


def _covers(row: dict, item: str) -> bool:
    return any(fnmatch.fnmatchcase(item, pattern) for pattern in row.get("covers") or ())


def departures_table() -> str:
    """The markdown table of conf/protocol/paper.yaml's departures: every place where `paper`
    differs from the released code, with the values (computed: differences()), the kind (the
    text says so; a departure kept on purpose; a decision on a measured PPO row), why and its
    measured effect. docs/protocol.md holds it between markers; tests/test_protocol.py fails
    when a difference has no row."""
    from benchmark.config import CONF

    paper = OmegaConf.load(CONF / "protocol" / "paper.yaml")
    diffs = differences(paper)
    rows = list(paper.get(DEPARTURES) or [])
    lines = [
        "| where | paper / released code | kind | why | measured effect |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        row = _plain(row)
        if row.get("kind") not in DEPARTURE_KINDS:
            raise ValueError(
                f"departure {row.get('what')!r}: kind={row.get('kind')!r}, allowed {DEPARTURE_KINDS}"
            )
        shown = [d for d in diffs if _covers(row, d)]
        values = "; ".join(f"`{d}`: {_inline(diffs[d][0])} / {_inline(diffs[d][1])}" for d in shown)
        lines.append(
            f"| {row['what']} | {values or '—'} | {row['kind']} | {row['why']} | "
            f"{row.get('effect') or '—'} |"
        )
    return "\n".join(lines) + "\n"


def _inline(value: Any) -> str:
    plain = _plain(value)
    if isinstance(plain, dict):
        text = ", ".join(f"{k}: {_inline(v)}" for k, v in plain.items())
        return "{" + text + "}"
    if isinstance(plain, list):
        return "[" + ", ".join(_inline(v) for v in plain) + "]"
    return "—" if plain is None else str(plain).lower() if isinstance(plain, bool) else str(plain)


def _plain(value: Any) -> Any:
    return (
        OmegaConf.to_container(value, resolve=True)
        if isinstance(value, (DictConfig, ListConfig))
        else value
    )


def caption(protocols: dict[str, int], overrides: dict[str, int]) -> str:
    """The caption text naming the protocol(s) of the shown cells and the keys cells override:
    `protocols` and `overrides` ("key=value") count cells."""
    if not protocols:
        return ""
    names = sorted(protocols)
    text = (
        f"protocol {names[0]}" if len(names) == 1 else f"protocols {', '.join(names)} (mixed sweep)"
    )
    if overrides:
        text += "; cells override " + ", ".join(
            f"{k} ({n} cell{'s' if n > 1 else ''})" for k, n in sorted(overrides.items())
        )
    return text


def main(argv: list[str] | None = None) -> None:
    """python -m benchmark.protocol [values | departures]: the table docs/protocol.md holds."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m benchmark.protocol",
        description="Print a table docs/protocol.md holds, generated from conf/protocol.",
    )
    parser.add_argument(
        "table",
        nargs="?",
        default="values",
        choices=("values", "departures"),
        help="values: every protocol's values; departures: where paper differs from the "
        "released code (default: values)",
    )
    args = parser.parse_args(argv)
    print(departures_table() if args.table == "departures" else values_table(), end="")


if __name__ == "__main__":
    main()
