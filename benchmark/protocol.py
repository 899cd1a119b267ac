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
# the protocol fields whose value is the suite's own (the released code has no such value)
SUITE_OWN_FIELDS = ("brace_tw_max_commands", "brace_tw_eval_seed")
# Agent-BRACE's values the released recipes fix that no protocol field holds: config key of a
# `paper` +experiment=brace_tw_train job -> (the released value, where it comes from); "all":
# every example, no cap. differences() compares them, and every protocol field above (with
# `official`'s value: the released recipes'), with what the presets compose to under `paper`
_SFT = "released recipes/finetune_belief_qwen25_3b.sh"
BRACE_RELEASED = {
    "brace.base": ("Qwen/Qwen3-4B-Instruct-2507", f"{_RECIPE}, base_model (and {_SFT}'s MODEL)"),
    "brace.algorithm": ("ppo", f"{_RECIPE}, adv_estimator=gae (PPO with a critic)"),
    "brace.teacher_episodes": (
        1000,
        "released generate_belief_state_dataset.py: belief SFT data from every training game",
    ),
    "brace.sft_random_trajectories": (3, "the released SFT data: gold + 3 random per game"),
    "brace.sft_examples": ("all", f"{_SFT}: every belief state of that data"),
    "brace.sft_roles": (["belief"], f"{_SFT}: the belief model; the policy starts from the base"),
    "brace.sft_epochs": (5, f"{_SFT}, --num_train_epochs"),
    "brace.sft_batch": (
        32,
        f"{_SFT}, --per_device_train_batch_size 4 x --gradient_accumulation_steps 8",
    ),
    "brace.sft_lr": (2.0e-5, f"{_SFT}, --learning_rate"),
    # the RL episode cap actually played: brace.rl_max_steps, or at 0 the game's env.task.max_steps
    "brace.rl_max_steps": (100, f"{_RECIPE}, max_iter (RL episodes play the game's length)"),
    "brace.rl.policy_iterations": (
        0,
        f"{_RECIPE}: the belief model updated after every batch from the first "
        "(belief_lm_n_update_steps=1), no policy-only stage",
    ),
    "brace.rl.seeds_per_step": (16, f"{_RECIPE}, train_batch_size (games per batch)"),
    "brace.rl.group": (1, f"{_RECIPE}, rollout.n (episodes per game per batch)"),
    "brace.rl.ppo_epochs": (1, f"{_RECIPE}: none set, verl's actor ppo_epochs 1"),
    "brace.rl.minibatch": (16, f"{_RECIPE}, ppo_mini_batch_size"),
    "brace.rl.clip": (0.2, f"{_RECIPE}, clip_ratio"),
    "brace.rl.gamma": (1.0, f"{_RECIPE}, gamma"),
    "brace.rl.lam": (1.0, f"{_RECIPE}: none set, verl's algorithm.lam 1.0"),
    "brace.rl.max_grad_norm": (1.0, f"{_RECIPE}: none set, verl's actor grad_clip 1.0"),
    "brace.rl.lora_rank": (0, f"{_RECIPE}: no LoRA, full fine-tuning"),
    # the same as released: the paper's method, which the recipe trains
    "brace.train_belief": (True, f"{_RECIPE}: the belief model trained by RL (joint belief)"),
    "brace.policy_input": ("belief", f"{_RECIPE}: use_belief_state=True"),
    "brace.labels": ("seven", "the paper's seven-level certainty scale"),
    "brace.belief_prompt": ("task", "the paper's belief prompt, with its task coverage line"),
    "brace.mode": ("slm", f"{_RECIPE}: the policy acts at every step"),
    "brace.skip_rl": (False, f"{_RECIPE}: RL after SFT"),
}
# Agent-BRACE's trainer keys no released value is compared with: key of the `brace` node ->
# why. Together with BRACE_RELEASED and the protocol fields (BRACE_TW_FIELDS) they name every
# key of a `paper` +experiment=brace_tw_train job's `brace` node; brace_differences() reports a
# key none of the three names as a difference, so a new trainer key fails the departure test
# until it is compared with the released recipe or listed here with its reason
_EXECUTION = "how a run is computed or what it measures, not what it trains"
BRACE_UNCOMPARED = {
    "brace.name": "the row's name (the model folder): the row is the preset's sweep",
    "brace.env": "the env the models are filed under: its games are the env.task.* rows",
    "brace.seed": "the training seed of one run (the paper's 3 runs: 0, 1, 2)",
    "brace.tiny_size": "read only without brace.base (the base model's row)",
    "brace.tau": "read only in brace.mode=ask (the released Agent-BRACE acts at every step)",
    "brace.held_out_episodes": f"{_EXECUTION}: the validation seeds SFT and RL are scored on",
    "brace.reward_episodes": f"{_EXECUTION}: the seeds of the greedy training reward",
    "brace.threads": f"{_EXECUTION} (declared on benchmark.brace.checks.BraceKeys)",
    "brace.measure_base": f"{_EXECUTION} (declared on benchmark.brace.checks.BraceKeys)",
    "brace.out": f"{_EXECUTION}: the models' folder",
    **{
        f"brace.reward.{term}": "no released key holds a weight: the released reward combines "
        "its terms in code (belief_alpha=0.5, belief_transition_weight=0.5, "
        "belief_discount_gamma=0.9): the belief model's training row (code)"
        for term in ("correctness", "tracking", "diversity", "success", "format")
    },
    "brace.rl.iterations": f"{_RECIPE}: total_epochs=0, set on its command line, not fixed",
    "brace.rl.belief_samples": "read by the GRPO trainer only (the released recipe: PPO)",
    "brace.rl.value_coef": "the value head's loss weight; the released critic is a model of its "
    "own with its own optimiser (critic_lr): the belief model's training row (code)",
    "brace.rl.dtype": f"{_EXECUTION}: weights' precision, for memory on a GPU",
    "brace.rl.lora_alpha": "read only with brace.rl.lora_rank > 0 (released: no LoRA)",
    "brace.rl.gradient_checkpointing": f"{_EXECUTION}: memory only (released: enabled)",
    "brace.rl.bf16_autocast": f"{_EXECUTION}: the forward passes' precision, for memory on a GPU",
}
# the same for the evaluation presets' jobs (BRACE_TW_EVAL, method=brace_agent)
BRACE_RELEASED_EVAL = {
    "eval.n_episodes": (200, "released generate_textworld_*_tasks.sh, test count"),
}
# the envs the released code trains and evaluates (its recipes and per-env values)
RELEASED_ENVS = ("fourrooms", "doorkey8", "higherlower")
# conf/protocol/paper.yaml's list of the places where `paper` differs from the released code
# (`official`): one row each of the generated departures table; not a config key
DEPARTURES = "departures"
# text: the paper's text decides; departure: the text is silent, `paper` keeps another value on
# purpose; code: the code computes differently where no config key holds a value (covers
# none); decision: a measured PPO row outside the paper's (covers none)
DEPARTURE_KINDS = ("text", "departure", "code", "decision")
UNCOVERING_KINDS = ("code", "decision")  # the kinds whose rows cover no config value
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
    brace_overrides: tuple[str, ...] = (),
) -> dict[str, tuple[Any, Any]]:
    """Every value on which `paper` and `official` (the released code) differ: "<config key>" or
    "<config key> (<env>)" -> (paper's value, official's value). The protocol fields by their
    config keys (per-env fields and each recipe value per env in RELEASED_ENVS), and what a
    `paper` Agent-BRACE job runs with (`brace_differences`); the protocol files and
    conf/ppo_recipes unless given (a test passes a changed copy, or `brace_overrides` for the
    Agent-BRACE jobs)."""
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
    out.update(brace_differences(paper, official, brace_overrides))
    return out


def brace_differences(
    paper: DictConfig, official: DictConfig, overrides: tuple[str, ...] = ()
) -> dict[str, tuple[Any, Any]]:
    """What a `paper` Agent-BRACE job runs with against the released recipes: "<config key>
    (<preset>)" (env.task.*: "(<preset>, <env>)", each env the preset sweeps) -> (the job's
    value, the released). Each preset of BRACE_TW_PRESETS is composed as a job runs it (the
    evaluation presets with method=brace_agent; `overrides` on top) with `paper` as its protocol;
    its protocol fields (but the suite's own) compare with `official`'s values, its other keys
    with BRACE_RELEASED (the trainer) or BRACE_RELEASED_EVAL, and the trainer's belief length
    with the prompt file's value outside a job (the trainer builds its prompt without the job's
    protocol: benchmark.brace.pipeline.prompt_of). A trainer key none of them names, nor
    BRACE_UNCOMPARED, is a difference against UNCLASSIFIED: no row covers it."""
    from benchmark.config import CONF, option_file, session

    out: dict[str, tuple[Any, Any]] = {}

    def add(item: str, have: Any, want: Any) -> None:
        if _plain(have) != _plain(want):
            out[item] = (_plain(have), _plain(want))

    with session() as compose:
        for preset in BRACE_TW_PRESETS:
            sweep = OmegaConf.load(CONF / "experiment" / f"{preset}.yaml")
            envs = str(OmegaConf.select(sweep, "hydra.sweeper.params.env", default="tw_quest"))
            method = () if preset in BRACE_TW_TRAIN else ("method=brace_agent",)
            for env in envs.split(","):
                cfg = compose([f"+experiment={preset}", f"env={env}", *method, *overrides])
                cfg.protocol = paper  # the keys read ${protocol.*}: a changed copy reaches them
                fields = {f: (k, p) for f, (k, p, _) in BRACE_TW_FIELDS.items()}
                fields.update({f: (k, BRACE_TW_PRESETS) for f, (k, _, _) in PROMPT_FIELDS.items()})
                for field, (key, presets) in fields.items():
                    if preset not in presets or field in SUITE_OWN_FIELDS:
                        continue
                    want = official.get(field)
                    if isinstance(want, DictConfig):  # one value per env
                        want = want.get(env)
                    where = f"{preset}, {env}" if key.startswith("env.") else preset
                    add(f"{key} ({where})", OmegaConf.select(cfg, key), want)
                released = BRACE_RELEASED if preset in BRACE_TW_TRAIN else BRACE_RELEASED_EVAL
                for key, (want, _) in released.items():
                    have = OmegaConf.select(cfg, key)
                    if key == "brace.rl_max_steps":  # 0: the game's own length
                        have = have or OmegaConf.select(cfg, "env.task.max_steps")
                    add(f"{key} ({preset})", have, want)
                if preset not in BRACE_TW_TRAIN:
                    continue
                for key in brace_keys(cfg):  # a trainer key no list names: never silent
                    if key not in brace_classified():
                        add(f"{key} ({preset})", OmegaConf.select(cfg, key), UNCLASSIFIED)
                trainer_prompt = OmegaConf.load(option_file("prompt", "brace"))
                add(
                    f"prompt.belief_max_new_tokens ({preset})",
                    trainer_prompt.belief_max_new_tokens,
                    official.get("brace_belief_max_new_tokens"),
                )
    return out


UNCLASSIFIED = "not compared (benchmark.protocol: BRACE_RELEASED or BRACE_UNCOMPARED)"


def brace_keys(cfg: DictConfig) -> list[str]:
    """Every leaf key of the job's `brace` node ("brace.rl.clip", "brace.reward.success", ...;
    a list is one value)."""

    def walk(node: Any, prefix: str) -> list[str]:
        if isinstance(node, DictConfig):
            return [k for sub in node for k in walk(node[sub], f"{prefix}.{sub}")]
        return [prefix]

    return walk(cfg.brace, "brace")


def brace_classified() -> set[str]:
    """The `brace` keys the departure check accounts for: compared with the released recipe
    (BRACE_RELEASED, a protocol field) or listed, with why, as not compared (BRACE_UNCOMPARED)."""
    protocol = {k for k, presets, _ in BRACE_TW_FIELDS.values() if k.startswith("brace.")}
    return {*BRACE_RELEASED, *protocol, *BRACE_UNCOMPARED}


def undocumented(
    diffs: dict[str, tuple[Any, Any]], departures: list | ListConfig
) -> tuple[list[str], list[str]]:
    """(the differences no departure row covers, the rows that cover no difference and are not
    a `code` or `decision` row): both empty when the table and the protocol files agree. A row's
    `covers` are fnmatch patterns over the keys of `differences()`."""
    rows = [_plain(r) for r in departures]
    bare = [d for d in diffs if not any(_covers(r, d) for r in rows)]
    idle = [
        str(r.get("covers") or r.get("what"))
        for r in rows
        if r.get("kind") not in UNCOVERING_KINDS and not any(_covers(r, d) for d in diffs)
    ]
    return bare, idle


def _covers(row: dict, item: str) -> bool:
    return any(fnmatch.fnmatchcase(item, pattern) for pattern in row.get("covers") or ())


def departures_table() -> str:
    """The markdown table of conf/protocol/paper.yaml's departures: every place where `paper`
    differs from the released code, with the values (computed: differences()), the kind (the
    text says so; a departure kept on purpose; code that computes differently where no config
    key holds a value; a decision on a measured PPO row), why and its measured effect. docs/protocol.md holds it between markers; tests/test_protocol.py fails
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
        if row.get("kind") in UNCOVERING_KINDS and row.get("covers"):
            raise ValueError(
                f"departure {row.get('what')!r}: kind={row['kind']} covers {row['covers']}; "
                "a code or decision row covers no value (covers: [])"
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
