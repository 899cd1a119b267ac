"""The three protocols (conf/protocol: paper | official | suite), the PPO recipes they name
(policy.recipe) and the planner hint (prompt.planner_hint): what each sets on every preset, that
`suite` keeps today's checkpoints and cells, the SB3 models the recipes build, the seen_target
hint, Table 1's shared tau study under `paper`, and the report captions."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf
from stable_baselines3 import PPO

from benchmark.cell import CellSpec
from benchmark.envs import load_env_cfg, make_task
from benchmark.envs import navfeatures as nf
from benchmark.policy.checkpoints import config_hash
from benchmark.policy.train import as_dict, build_model, validate_policy
from benchmark.protocol import PROTOCOLS, record
from benchmark.report.model import Cell, protocol_caption
from tests.conftest import CONF, REPO, compose_cfg

ROOT = Path("/tmp/protocol-test-root")
PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
# what each protocol sets (conf/protocol/<name>.yaml), as the composed job sees it
EXPECTED = {
    "paper": {
        "policy.recipe": "paper",
        "policy.checkpoint": "final",
        "policy.total_timesteps": 2_000_000,
        "policy.lr_schedule": "linear",
        "prompt.planner_hint": "seen_target",
        "prompt.style": "appendix",
        "slm.decoding.source": "config",
        "slm.decoding.repetition_penalty": 1.1,
        "gate.mc_samples": 30,
        "tuning.clip_tau": False,
        "tuning.n_trials": 15,
        # FourRooms keeps the suite's network under paper (a departure row; the released network
        # on HigherLower: test_the_paper_network_per_env)
        "policy.dropout_placement": "after_activation",
        "policy.image_scale": None,
    },
    "official": {
        "policy.recipe": "official",
        "policy.checkpoint": "final",
        "policy.total_timesteps": 2_000_000,
        "policy.lr_schedule": "constant",
        "prompt.planner_hint": "seen_target",
        "prompt.style": "released",
        "slm.decoding.source": "config",
        "slm.decoding.repetition_penalty": 1.1,
        "gate.mc_samples": 30,
        "tuning.clip_tau": False,
        "tuning.n_trials": 15,
    },
    "suite": {
        "policy.recipe": "suite",
        "policy.checkpoint": "best",
        "policy.total_timesteps": 3_000_000,
        "policy.lr_schedule": "linear",
        "prompt.planner_hint": "frontier",
        "prompt.style": "appendix",
        "slm.decoding.source": "config",
        "slm.decoding.repetition_penalty": 1.0,
        "gate.mc_samples": 50,
        "tuning.clip_tau": True,
        "tuning.n_trials": 15,
    },
}
# keys a preset sets on purpose (its own subject), which the protocol must not undo
PRESET_OWN = {
    "demo": {
        "policy.checkpoint",
        "policy.total_timesteps",
        "gate.mc_samples",
        "gate.tau_range",
        "tuning.n_trials",
    },
    "smoke": {"policy.total_timesteps", "gate.mc_samples", "tuning.n_trials"},
    # their own policy configs (ppo_cnn, ppo_lstm), which have no recipe key
    # ... and Ollama's sampling values, whatever the protocol (slm.decoding.source=config)
    "feedback": {
        "policy.checkpoint",
        "policy.total_timesteps",
        "policy.lr_schedule",
        "slm.decoding.source",
        "slm.decoding.repetition_penalty",
    },
    "recurrent": {"policy.checkpoint", "policy.total_timesteps", "policy.lr_schedule"},
    "brace_tw_long": {"env.task.max_steps"},  # the long-horizon run's 100, whatever the protocol
    "text_ask": {"tuning.n_trials"},  # a toy-size study: 10 trials
}
# the feedback paper's other presets build on +experiment=feedback and own what it owns
PRESET_OWN["feedback_table5"] = PRESET_OWN["feedback_curves"] = PRESET_OWN["feedback"]
# preset -> its tuning (scope, n_trials) under each protocol
PRESET_TUNING = {
    "table1": {"paper": ("shared", 15), "official": ("cell", 15), "suite": ("cell", 15)},
    "table2": {"paper": ("shared", 15), "official": ("cell", 15), "suite": ("shared", 15)},
    "table3": {"paper": ("shared", 15), "official": ("cell", 10), "suite": ("shared", 15)},
}


def compose(*overrides: str):
    return compose_cfg(ROOT, "slm=tiny", *overrides)


# the paper tables in the fast suite, every other preset in the slow one (a composition a second)
PRESET_CASES = [
    pytest.param(p, marks=() if p in PRESET_TUNING else pytest.mark.slow) for p in PRESETS
]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("preset", PRESET_CASES)
def test_every_preset_composes_under_every_protocol(preset, protocol):
    """`+experiment=<preset> protocol=<p>` (the protocol given after the preset, as a user types
    it) carries the protocol's values on every key the preset does not own, whatever the preset
    sets elsewhere; and the report record names no override but the preset's own keys."""
    cfg = compose(f"+experiment={preset}", "env=fourrooms", f"protocol={protocol}")
    assert cfg.protocol.name == protocol
    own = PRESET_OWN.get(preset, set())
    if preset in PRESET_TUNING:  # the preset's tuning is the protocol's for that table
        own = own | {"tuning.n_trials"}
    for key, want in EXPECTED[protocol].items():
        have = OmegaConf.select(cfg, key, default=None)
        if have is None or key in own:  # a prompt or policy without that key (ppo_cnn, belief)
            continue
        assert have == want, f"{preset} under {protocol}: {key}={have!r}, expected {want!r}"
    if preset in PRESET_TUNING:
        scope, n_trials = PRESET_TUNING[preset][protocol]
        assert (cfg.tuning.scope, cfg.tuning.n_trials) == (scope, n_trials)
    overridden = set(record(cfg)["overrides"])
    assert overridden <= own - {"tuning.n_trials"} | PRESET_OWN.get(preset, set()), overridden


@pytest.mark.parametrize("preset", ["demo", "smoke"])
def test_toy_presets_default_to_the_suite_protocol(preset):
    """demo and smoke run the machinery at toy size, not a paper table: the suite's protocol,
    unless the command line says otherwise."""
    assert compose(f"+experiment={preset}").protocol.name == "suite"
    assert compose(f"+experiment={preset}", "protocol=paper").policy.recipe == "paper"


def test_protocol_keys_switch_alone_and_default_is_paper():
    """The presets default to `paper`; one key switched on the command line wins over the
    protocol and is the one override the record names."""
    cfg = compose("+experiment=table1", "method=ask_plus", "prompt.planner_hint=frontier")
    assert cfg.protocol.name == "paper" and cfg.prompt.planner_hint == "frontier"
    assert cfg.policy.recipe == "paper"
    assert record(cfg)["overrides"] == {"prompt.planner_hint": "frontier"}
    with pytest.raises(Exception, match="protocol"):
        compose("protocol=nonsense")


@pytest.mark.slow  # composes every env's recipe (~2 s)
def test_suite_protocol_keeps_todays_checkpoint_hashes():
    """The hashes of the checkpoints trained before protocols existed (README, docs): the suite
    recipe still finds them; the paper and official recipes are other checkpoints."""
    known = {"fourrooms": "40a6974a11", "doorkey8": "c9c342e6a4", "higherlower": "15db27c8e9"}
    for env, digest in known.items():
        assert config_hash(compose(f"env={env}", "protocol=suite")) == digest
        hashes = {config_hash(compose(f"env={env}", f"protocol={p}")) for p in PROTOCOLS}
        # DoorKey: the paper protocol's measured exception trains the suite's recipe
        assert len(hashes) == (2 if env == "doorkey8" else 3), env
    assert config_hash(compose("env=doorkey8", "protocol=paper")) == known["doorkey8"]
    assert config_hash(compose("env=doorkey8", "policy.recipe=suite")) == known["doorkey8"]


def test_paper_recipe_builds_sb3_defaults_with_a_linear_schedule():
    """policy.recipe=paper: PPO exactly as SB3 builds it by default (one env, n_steps 2048,
    batch 64, 10 epochs, gamma 0.99, GAE 0.95, clip 0.2, no entropy bonus, LR 3e-4) but for the
    LR decayed linearly to 0, and DoorKey trained on 8x8 itself (no curriculum): under the paper
    recipe's exception the text's DoorKey recipe is spelled out (docs/protocol.md)."""
    text_doorkey = (
        "policy.recipe=official",
        "policy.total_timesteps=2000000",
        "policy.lr_schedule=linear",
    )
    cfg = compose("env=doorkey8", *text_doorkey)
    assert cfg.env.task.train_gym_ids is None and cfg.policy.checkpoint == "final"
    # every value of the paper recipe's default row but the validation cadence (not the weights)
    policy = as_dict(cfg.policy)
    paper_row = OmegaConf.to_container(cfg.ppo_recipes.paper.default, resolve=True)
    for key, value in paper_row.items():
        # train_gym_ids: the task's, null above; train_seed_pool, eval_seeds: the released
        # training and validation maps (the text is silent on them; the paper protocol's
        # DoorKey is the suite's recipe anyway)
        if key not in ("eval_freq", "train_gym_ids", "train_seed_pool", "eval_seeds"):
            assert policy[key] == value, key
    validate_policy(policy)
    task = make_task(cfg.env)
    model = build_model(task, policy)
    default = PPO("MlpPolicy", model.get_env(), device="cpu")
    for attr in ("n_steps", "batch_size", "n_epochs", "gamma", "gae_lambda", "ent_coef", "vf_coef"):
        assert getattr(model, attr) == getattr(default, attr), attr
    assert model.n_envs == 1 and model.clip_range(1.0) == default.clip_range(1.0) == 0.2
    assert model.max_grad_norm == default.max_grad_norm
    assert model.lr_schedule(1.0) == pytest.approx(3e-4) == default.lr_schedule(1.0)
    assert model.lr_schedule(0.5) == pytest.approx(1.5e-4)
    assert model.lr_schedule(0.0) == pytest.approx(0.0)
    assert default.lr_schedule(0.0) == pytest.approx(3e-4)  # SB3's own default: constant
    official = build_model(task, as_dict(compose("env=doorkey8", "protocol=official").policy))
    assert official.lr_schedule(0.0) == pytest.approx(3e-4) and official.n_steps == 2048
    suite = compose("env=doorkey8", "protocol=suite")
    assert len(suite.env.task.train_gym_ids) == 4 and suite.policy.n_envs == 8
    paper = compose("env=doorkey8", "policy.recipe=paper")  # the exception: the suite's recipe
    suite_policy = as_dict(compose("env=doorkey8", "policy.recipe=suite").policy)
    assert as_dict(paper.policy) == {**suite_policy, "recipe": "paper"}
    assert compose("env=fourrooms", "policy.recipe=paper").policy.lr_schedule == "linear"


def test_a_recipe_row_that_uses_an_unknown_recipe_names_the_allowed_ones():
    """`use:` in a recipe row must name another recipe; the error lists them."""
    bad = ("+ppo_recipes.paper.fourrooms={use: nonsense}", "policy.recipe=paper")
    with pytest.raises(Exception, match=r"use='nonsense'.*official"):
        OmegaConf.to_container(compose("env=fourrooms", *bad).policy, resolve=True)


def test_an_env_config_alone_reads_the_suite_recipe():
    """benchmark.envs.load_env_cfg (no job config around it) still builds the DoorKey task with
    the suite's training curriculum."""
    task = make_task(load_env_cfg("doorkey8"))
    assert len(task.train_gym_ids) == 4


def _walk_until(episode, seen, limit=400):
    """Step the expert until `seen(view, memory)` holds; the hint checks run on every state."""
    states = []
    for _ in range(limit):
        view, memory = episode.view(), episode.memory
        states.append(seen(view, memory))
        if states[-1] or episode.done:
            return states
        episode.step(episode.expert_action())
    return states


def test_seen_target_hint_absent_until_the_goal_is_seen_then_a_known_map_search():
    task = make_task(load_env_cfg("fourrooms"))
    actions = task.action_names
    for seed in (101, 102, 103):
        episode = task.episode(seed)
        hints_before: list = []

        def goal_known(view, memory, hints_before=hints_before):
            known = (memory.goal_pos or view.goal_pos) is not None
            if not known:
                hints_before.append(nf.planner_hint(view, memory, actions, "seen_target"))
                frontier = nf.planner_hint(view, memory, actions, "frontier")
                assert frontier is not None  # the suite's hint guides exploration meanwhile
            return known

        states = _walk_until(episode, goal_known)
        assert hints_before and all(h is None for h in hints_before), seed
        if not states[-1]:
            continue
        view, memory = episode.view(), episode.memory
        goal = memory.goal_pos or view.goal_pos
        hint = nf.planner_hint(view, memory, actions, "seen_target")
        found = nf._bfs(nf.World(view, memory), actions, {goal}, set(), None)
        if goal == view.pos or found is None:
            assert hint is None
        else:
            assert (hint.action, hint.length, hint.target) == (*found, "the cached goal")
            # the same search the frontier hint makes once the goal is known
            same = nf.planner_hint(view, memory, actions, "frontier")
            assert (same.action, same.length) == found
        assert nf.planner_hint(view, memory, actions, "none") is None
    with pytest.raises(ValueError, match="planner_hint"):
        nf.planner_hint(view, memory, actions, "everywhere")


def test_seen_target_hint_in_doorkey_follows_the_subtask():
    """DoorKey: nothing until the key is seen, then a search to face the key and PICKUP."""
    task = make_task(load_env_cfg("doorkey8"))
    actions = task.action_names
    episode = task.episode(104)

    def key_known(view, memory):
        keys = [p for p, c in nf.World(view, memory).cells.items() if c == "k"]
        if not keys:
            assert nf.planner_hint(view, memory, actions, "seen_target") is None
        return bool(keys)

    assert _walk_until(episode, key_known)[-1]
    view, memory = episode.view(), episode.memory
    world = nf.World(view, memory)
    keys = {p for p, c in world.cells.items() if c == "k"}
    hint = nf.planner_hint(view, memory, actions, "seen_target")
    found = nf._bfs(world, actions, set(), keys, "PICKUP")
    assert found is not None and (hint.action, hint.length) == found
    assert hint.target == "the key, then PICKUP"


def test_prompt_shows_the_hint_line_only_when_there_is_one():
    from benchmark.prompts import showcase

    variant, task = showcase.variant_for("fourrooms", "stateful")
    variant.planner_hint = "seen_target"
    episode = task.episode(101)
    user = variant.session(episode, with_expert=False).messages(0)[1]["content"]
    assert "Goal (cached): not seen yet" in user and "Planner hint:" not in user
    variant.planner_hint = "frontier"
    user = variant.session(episode, with_expert=False).messages(0)[1]["content"]
    assert "Planner hint:" in user


def _spec(cfg) -> CellSpec:
    return CellSpec.from_config(cfg).with_inputs(
        checkpoint_sha256="c" * 64, policy_weights="w", model="m"
    )


@pytest.mark.parametrize("env", ["fourrooms", "higherlower"])
def test_table1_under_paper_runs_one_study_per_slm_and_env(env):
    """Table 1 under `paper`: ASK and ASK+ of one (SLM, env) take their tau from one study, the
    one ASK+'s own config (stateful + rationale) runs; a second SLM has its own. Under `suite`
    ASK and ASK+ each tune their own (two studies)."""
    from benchmark.build import shared_tuning_config

    def study(protocol: str, method: str, slm: str = "tiny") -> str:
        cfg = compose(
            "+experiment=table1", f"env={env}", f"method={method}", f"slm={slm}",
            f"protocol={protocol}",
        )  # fmt: skip
        source = shared_tuning_config(cfg)
        return _spec(source if source is not None else cfg).tuning_key()

    assert study("paper", "ask") == study("paper", "ask_plus")
    assert study("paper", "ask_plus") != study("paper", "ask_plus", "tiny_small")
    assert study("suite", "ask") != study("suite", "ask_plus")
    assert study("official", "ask") != study("official", "ask_plus")


def test_suite_protocol_keeps_the_cells_of_todays_defaults():
    """Keys added with the protocols stay out of the identity at today's values (the decoding
    source too), and the planner hint stays out of it where no prompt shows one (HigherLower, basic)."""
    ask_plus = compose("+experiment=table1", "env=fourrooms", "method=ask_plus", "protocol=suite")
    assert "planner_hint" not in _spec(ask_plus).with_inputs(tau_study="s").identity["prompt"]
    assert "clip_tau" not in _spec(ask_plus).with_inputs(tau_study="s").identity["tuning"]
    paper = compose("+experiment=table1", "env=fourrooms", "method=ask_plus")
    assert (
        _spec(paper).with_inputs(tau_study="s").identity["prompt"]["planner_hint"] == "seen_target"
    )
    assert _spec(paper).with_inputs(tau_study="s").identity["tuning"]["clip_tau"] is False
    # slm.decoding.source and .repetition_penalty enter only away from their defaults
    # (paper and official: the released code's penalty)
    official = compose(
        "+experiment=table1", "env=fourrooms", "method=ask_plus", "protocol=official"
    )
    model = compose(
        "+experiment=table1", "env=fourrooms", "method=ask_plus", "slm.decoding.source=model"
    )
    for c, source, penalty in (
        (ask_plus, None, None),
        (paper, None, 1.1),
        (official, None, 1.1),
        (model, "model", 1.1),
    ):
        identity = _spec(c).with_inputs(tau_study="s").identity
        for part, key in (("slm", "decoding"), ("prompt", "sampling")):
            assert identity[part][key].get("source") == source
            assert identity[part][key].get("repetition_penalty") == penalty
    hl = [
        compose("env=higherlower", "method=slm_only", f"prompt.planner_hint={h}").prompt
        for h in ("seen_target", "none")
    ]
    cards = [
        _spec(compose("env=higherlower", "method=slm_only", f"prompt.planner_hint={h}")).hash
        for h in ("seen_target", "none")
    ]
    assert hl[0].planner_hint != hl[1].planner_hint and cards[0] == cards[1]


def test_caption_names_the_protocol_and_the_overrides():
    cells = [Cell(job=str(i), status="ok", protocol="paper") for i in range(3)]
    assert protocol_caption(cells) == "protocol paper"
    cells[0].protocol_overrides = {"prompt.planner_hint": "frontier"}
    assert protocol_caption(cells) == (
        "protocol paper; cells override prompt.planner_hint=frontier (1 cell)"
    )
    cells[1].protocol = "suite"
    assert protocol_caption(cells).startswith("protocols paper, suite (mixed sweep)")
    assert protocol_caption([Cell(job="0", status="ok")]) == ""


def test_wandb_run_config_and_summary_carry_the_protocol(monkeypatch):
    """The cell's W&B run config names the protocol and the keys the job overrides."""
    from benchmark import job

    seen = {}

    class Capture:
        def __init__(self, cfg, **kw):
            seen.update(kw)

    monkeypatch.setattr(job, "Tracker", Capture)
    cfg = compose("+experiment=table1", "method=ask_plus", "gate.mc_samples=10")
    spec = CellSpec.from_config(cfg)
    job._tracker(cfg, spec)
    assert seen["config"]["protocol"] == {"name": "paper", "overrides": {"gate.mc_samples": 10}}
    assert seen["config"]["env"] == spec.config["env"]


def test_bad_protocol_values_name_what_is_allowed():
    from benchmark.validate import validate

    with pytest.raises(ValueError, match=r"prompt.planner_hint='everywhere' is invalid: allowed"):
        validate(compose("method=ask_plus", "prompt.planner_hint=everywhere"))
    with pytest.raises(ValueError, match="tuning.clip_tau='maybe' is invalid"):
        validate(compose("tuning.clip_tau=maybe"))
    with pytest.raises(Exception, match=r"policy.recipe='papers' is unknown: allowed \['official'"):
        validate(compose("policy.recipe=papers"))
    with pytest.raises(ValueError, match="unknown key protocol.hint"):
        validate(compose("+protocol.hint=frontier"))
    with pytest.raises(
        ValueError, match=r"policy.eval_seeds='random' is invalid: allowed \['fixed', 'cycle'"
    ):
        validate(compose("policy.eval_seeds=random"))


def test_docs_protocol_table_is_the_protocol_files():
    """docs/protocol.md's values table is generated from conf/protocol: a value changed in a
    protocol file, or in the table by hand, fails here."""
    from benchmark.protocol import values_table

    text = (REPO / "docs" / "protocol.md").read_text()
    start, end = "<!-- protocol-values:start -->\n", "<!-- protocol-values:end -->"
    shown = text[text.index(start) + len(start) : text.index(end)]
    assert shown == values_table(), "re-run: python -m benchmark.protocol (docs/protocol.md)"


@pytest.mark.parametrize("name", ["paper", "official", "suite"])
def test_every_protocol_value_reaches_its_config_key(name):
    """Each field of each protocol file is what its config key composes to, in a job that uses
    that key (no field skipped): the table rows are what jobs run."""
    from omegaconf import OmegaConf

    from benchmark.protocol import (
        BRACE_TW_FIELDS,
        BRACE_TW_PRESETS,
        KEYS,
        PER_ENV,
        PRESET_TUNING,
        PROMPT_FIELDS,
    )

    values = OmegaConf.load(REPO / "conf" / "protocol" / f"{name}.yaml")
    job = compose("+experiment=table1", "env=fourrooms", "method=ask_plus", f"protocol={name}")
    checked = set()
    for field, (key, _) in KEYS.items():
        if field in PER_ENV:  # one value per env; an env without one: conf/gate's [0.1, 2.0]
            for env in ("fourrooms", "doorkey8", "higherlower"):
                one = compose("+experiment=table1", f"env={env}", "method=ask", f"protocol={name}")
                want = values[field][env] if env in values[field] else [0.1, 2.0]
                assert list(OmegaConf.select(one, key)) == list(want), (name, env)
        elif field == "slm_dtype":  # Hugging Face hub models only
            hub = compose("+experiment=table1", "slm=qwen3.5-2b", f"protocol={name}")
            assert OmegaConf.select(hub, key) == values[field], name
        else:
            assert OmegaConf.select(job, key) == values[field], (name, field, key)
        checked.add(field)
    for preset, field in PRESET_TUNING.items():
        cfg = compose(f"+experiment={preset}", "env=fourrooms", f"protocol={name}")
        for sub, want in OmegaConf.to_container(values[field]).items():
            tuning = OmegaConf.to_container(cfg.tuning, resolve=True)
            assert tuning[sub] == want, (name, preset, sub)
        checked.add(field)
    for env in ("tw_quest", "tw_treasure", "tw_cooking"):  # the Agent-BRACE TextWorld presets
        for preset in BRACE_TW_PRESETS:
            cfg = compose(f"+experiment={preset}", f"env={env}", "brace.seed=2",
                          f"protocol={name}")  # fmt: skip
            for field, (key, presets, _) in BRACE_TW_FIELDS.items():
                if preset not in presets:
                    continue
                want = OmegaConf.to_container(values)[field]  # as written: ${brace.seed} stays
                want = want[env] if isinstance(want, dict) else want
                if preset == "brace_tw_long" and key == "env.task.max_steps":
                    want = 100  # the long-horizon run's, whatever the protocol
                if isinstance(want, str):  # a key named: what it resolves to in this job
                    want = {"${brace.seed}": 2, "${seed}": 0}[want]
                node = OmegaConf.select(cfg, key)
                have = (
                    OmegaConf.to_container(node, resolve=True)
                    if OmegaConf.is_config(node)
                    else node
                )
                assert have == want, (name, preset, env, field)
                checked.add(field)
    for field, (key, prompts, _) in PROMPT_FIELDS.items():  # every preset, these prompts
        for prompt in prompts:
            cfg = compose(f"prompt={prompt}", f"protocol={name}")
            assert OmegaConf.select(cfg, key) == values[field], (name, prompt, field)
        assert OmegaConf.select(compose("prompt=belief", f"protocol={name}"), key) == 192
        checked.add(field)
    assert checked == set(values) - {"name", "departures"}, "a protocol field no test composes"


def test_brace_rl_numbers_are_the_released_under_paper_and_the_trainers_own_under_suite():
    """+experiment=brace_tw_train: paper trains with the released recipe's rollout temperature,
    KL coefficient and learning rates; suite with the trainer's own values (conf/brace), so the
    models it trains keep their identity. Neither job records an override."""
    from benchmark.brace.checks import check

    suite = compose("+experiment=brace_tw_train", "env=tw_quest", "protocol=suite")
    own = compose("env=tw_quest", "protocol=suite")
    assert OmegaConf.to_container(suite.brace.rl, resolve=True) == OmegaConf.to_container(
        own.brace.rl, resolve=True
    )
    paper = compose("+experiment=brace_tw_train", "env=tw_quest")
    rl = check(paper).rl
    assert (rl.temperature, rl.kl_coef, rl.learning_rate, rl.value_learning_rate) == (
        0.7, 0.01, 1e-6, 1e-5,
    )  # fmt: skip
    assert rl.role_learning_rate("belief") == 1e-5
    assert record(paper)["overrides"] == {} and record(suite)["overrides"] == {}


@pytest.mark.parametrize("method", ["brace_base", "brace_agent"])
def test_brace_tw_cells_sample_at_the_released_temperature_under_paper(method):
    """The Agent-BRACE TextWorld cells under paper decode at the released evaluation temperature
    0.4 with the belief's 1,024 new tokens, each run (brace.seed) with its own draws: an
    untrained row's 3 runs are 3 cells. Under suite: greedy, 320 tokens, the job's seed, so
    its runs stay one cell."""

    def cells(protocol):
        return [
            compose(
                "+experiment=brace_tw",
                f"method={method}",
                f"brace.seed={run}",
                f"protocol={protocol}",
            )  # fmt: skip
            for run in (0, 1, 2)
        ]

    paper, suite = cells("paper"), cells("suite")
    assert [c.slm.decoding.temperature for c in paper] == [0.4] * 3
    assert [c.slm.decoding.seed for c in paper] == [0, 1, 2]
    assert [(c.slm.decoding.temperature, c.slm.decoding.seed) for c in suite] == [(0.0, 0)] * 3
    if method == "brace_base":  # the untrained row: its runs differ only by their draws
        assert len({_spec(c).hash for c in paper}) == 3 and len({_spec(c).hash for c in suite}) == 1
    else:
        assert [c.prompt.belief_max_new_tokens for c in paper + suite] == [1024] * 3 + [320] * 3
    assert all(record(c)["overrides"] == {} for c in paper + suite)


def _departures_doc() -> str:
    text = (REPO / "docs" / "protocol.md").read_text()
    start, end = "<!-- protocol-departures:start -->\n", "<!-- protocol-departures:end -->"
    return text[text.index(start) + len(start) : text.index(end)]


def test_every_paper_difference_from_the_released_code_has_a_departure_row():
    """`paper` takes the released code's value where the text is silent: every value on which it
    differs from `official` (protocol fields, and each paper-recipe value per env) is covered by
    a row of conf/protocol/paper.yaml's departures, shown in docs/protocol.md. Changing one
    `paper` value (a protocol field or a recipe value) without a row fails; so does a row that
    covers nothing but is not a measured decision."""
    from benchmark.protocol import departures_table, differences, undocumented
    from benchmark.recipes import RECIPES_FILE

    paper = OmegaConf.load(REPO / "conf" / "protocol" / "paper.yaml")
    diffs = differences(paper)
    assert undocumented(diffs, paper.departures) == ([], [])
    assert _departures_doc() == departures_table(), (
        "re-run: python -m benchmark.protocol departures (docs/protocol.md)"
    )
    # the six places the text is silent on take the released value: no difference at all
    for key in ("slm.decoding.repetition_penalty", "slm.backend.dtype"):
        assert key not in diffs
    for key in ("dropout_placement", "image_scale"):
        assert f"policy.{key} (higherlower)" not in diffs
        assert f"policy.{key} (fourrooms)" in diffs  # FourRooms' network: a departure row
    # one protocol value changed away from the released code's, no row: fails, naming it
    changed = paper.copy()
    changed.mc_samples = 50
    bare, idle = undocumented(differences(changed), paper.departures)
    assert bare == ["gate.mc_samples"] and idle == []
    changed = paper.copy()
    changed.repetition_penalty = 1.0
    assert undocumented(differences(changed), paper.departures)[0] == [
        "slm.decoding.repetition_penalty"
    ]
    # one paper-recipe value changed (the suite's network again), no row: fails per env
    recipes = OmegaConf.load(RECIPES_FILE)
    recipes.paper.default.dropout_placement = "after_activation"
    bare, _ = undocumented(differences(paper, recipes=recipes), paper.departures)
    assert bare == ["policy.dropout_placement (higherlower)"]  # FourRooms': a row covers it
    # a departure row that covers no difference (its value made equal again) is flagged
    rows = [
        *OmegaConf.to_container(paper.departures),
        {"what": "x", "covers": ["gate.nothing"], "kind": "departure", "why": "-"},
    ]
    assert undocumented(diffs, rows) == ([], ["['gate.nothing']"])
    # the docs no longer claim one exception is the complete list
    assert "one allowed exception" not in (REPO / "docs" / "protocol.md").read_text()


def test_every_paper_agent_brace_value_the_released_recipe_fixes_has_a_departure_row():
    """A `paper` Agent-BRACE job, each brace_tw preset composed as it runs, against the released
    recipes: the RL episode cap (12, the released 100) and the belief SFT data (100 of the 1,000
    games, 128 examples) are rows. A value the released recipe fixes changed away from it, in
    the protocol file (step cap, KL coefficient, training games, belief length) or in the job's
    config, without a row fails, naming it and where."""
    from benchmark.protocol import differences, undocumented

    paper = OmegaConf.load(REPO / "conf" / "protocol" / "paper.yaml")
    diffs = differences(paper)
    assert diffs["brace.rl_max_steps (brace_tw_train)"] == (12, 100)
    assert diffs["brace.teacher_episodes (brace_tw_train)"] == (100, 1000)
    assert diffs["brace.sft_examples (brace_tw_train)"] == (128, "all")
    for same in ("env.task.max_steps (brace_tw, tw_cooking)", "brace.rl.kl_coef (brace_tw_train)"):
        assert same not in diffs  # the released values
    changed = paper.copy()
    changed.brace_tw_max_steps = 50
    changed.brace_kl_coef = 0.02
    changed.brace_tw_train_games = 100
    changed.brace_belief_max_new_tokens = 512
    bare, idle = undocumented(differences(changed), paper.departures)
    envs = ("tw_quest", "tw_treasure", "tw_cooking")
    want = {
        *(f"env.task.{k} (brace_tw, {e})" for k in ("max_steps", "train_games") for e in envs),
        "env.task.max_steps (brace_tw_train, tw_quest)",  # brace_tw_long: its own 100
        *(f"env.task.train_games ({p}, tw_quest)" for p in ("brace_tw_long", "brace_tw_train")),
        "brace.rl.kl_coef (brace_tw_train)",
        "prompt.belief_max_new_tokens (brace_tw)",
        "prompt.belief_max_new_tokens (brace_tw_long)",
    }
    assert set(bare) == want and idle == []
    # a trainer value the released recipe fixes (clip_ratio=0.2), changed in the job
    bare, _ = undocumented(
        differences(paper, brace_overrides=("brace.rl.clip=0.3",)), paper.departures
    )
    assert bare == ["brace.rl.clip (brace_tw_train)"]
    # brace.rl_max_steps=0 plays the game's own 100 steps: the cap's row then covers nothing
    zero = differences(paper, brace_overrides=("brace.rl_max_steps=0",))
    assert "brace.rl_max_steps (brace_tw_train)" not in zero
    assert undocumented(zero, paper.departures) == ([], ["['brace.rl_max_steps (brace_tw_train)']"])


def test_the_departure_check_accounts_for_every_agent_brace_trainer_key(monkeypatch):
    """Every key of a `paper` brace_tw_train job's `brace` node, and every RL settings field, is
    compared with the released recipe (BRACE_RELEASED, a protocol field) or listed with its
    reason as not compared (BRACE_UNCOMPARED), each in one list only. A key none names (a new
    trainer key, or one taken off its list) is a difference no row covers, named with its
    preset; so is paper's RL step cap changed without its row."""
    from dataclasses import fields

    import benchmark.protocol as protocol
    from benchmark.brace.settings import RLSettings
    from benchmark.config import compose

    cfg = compose(["+experiment=brace_tw_train"])
    keys = set(protocol.brace_keys(cfg))
    assert {f"brace.rl.{f.name}" for f in fields(RLSettings)} <= keys
    assert {"brace.rl_max_steps", "brace.reward.success", "brace.sft_roles"} <= keys
    assert keys == protocol.brace_classified(), "a trainer key in no list, or a listed key gone"
    protocol_keys = {k for k, _, _ in protocol.BRACE_TW_FIELDS.values() if k.startswith("brace.")}
    lists = (set(protocol.BRACE_RELEASED), protocol_keys, set(protocol.BRACE_UNCOMPARED))
    assert sum(map(len, lists)) == len(set().union(*lists)), "a key in two lists"
    paper = OmegaConf.load(REPO / "conf" / "protocol" / "paper.yaml")
    # the values the released recipe fixes that the trainer keeps as released: no difference
    diffs = protocol.differences(paper)
    for same in ("brace.rl.clip", "brace.rl.lam", "brace.train_belief", "brace.mode"):
        assert f"{same} (brace_tw_train)" not in diffs
    # paper's RL step cap changed (to 50), the departures without the cap's row: fails, naming it
    rows = [r for r in paper.departures if "brace.rl_max_steps (brace_tw_train)" not in r.covers]
    assert len(rows) == len(paper.departures) - 1
    capped = protocol.differences(paper, brace_overrides=("brace.rl_max_steps=50",))
    assert capped["brace.rl_max_steps (brace_tw_train)"] == (50, 100)
    assert protocol.undocumented(capped, rows)[0] == ["brace.rl_max_steps (brace_tw_train)"]
    assert protocol.undocumented(capped, paper.departures) == ([], [])  # with its row: covered
    # a new trainer key, and a listed key taken off its list: each a difference no row covers
    new = protocol.differences(paper, brace_overrides=("+brace.rl.entropy_coef=0.01",))
    assert new["brace.rl.entropy_coef (brace_tw_train)"] == (0.01, protocol.UNCLASSIFIED)
    monkeypatch.delitem(protocol.BRACE_UNCOMPARED, "brace.rl.iterations")
    bare, _ = protocol.undocumented(protocol.differences(paper), paper.departures)
    assert bare == ["brace.rl.iterations (brace_tw_train)"]


def test_departure_rows_carry_no_hand_typed_figures():
    """A row's effect quotes no figure (a measured effect names its runs and the command that
    writes the figures to a docs/measured page; one not yet measured says so, with the command
    that measures it or why none can), and its reason quotes only settings and the papers'
    figures. The values column is computed (differences()), so it is not scanned."""
    import re

    from tests.test_measured_figures import FIGURE

    # the released code's settings and the paper's figures the reasons quote
    quoted = {"[0.1, 2.0]", "[0.01, 2.0]", "[0.01, 1.5]", "0.999", "0.99", "0.03"}
    quoted |= {"0.89", "0.53", "0.55"}  # the paper's PPO rows (DoorKey-8x8, FourRooms)
    paper = OmegaConf.load(REPO / "conf" / "protocol" / "paper.yaml")

    def found(text: str | None) -> list[str]:
        return [m.group(0) for m in FIGURE.finditer(re.sub(r"`[^`]*`", "", text or ""))]

    assert found("test success 0.060 [0.02, 0.11] `x=0.5`") == ["0.060", "[0.02, 0.11]"]
    for row in paper.departures:
        assert found(row.get("effect")) == [], row.what
        assert set(found(row.why)) <= quoted, row.what
    effects = [str(r.get("effect") or "") for r in paper.departures]
    assert not [e for e in effects if "not measured" in e], "say 'not yet measured' and how"
    unmeasured = [e for e in effects if "not yet measured" in e]
    assert all("python -m benchmark" in e or "no command" in e or "no key" in e for e in unmeasured)


def test_code_rows_cover_no_value_and_are_listed():
    """A `code` row (the code computes differently, no config key holds a value) covers nothing
    and is never flagged idle; the pooled invalid rate against the released zero-filled mean is
    one, shown in the generated table."""
    from benchmark.protocol import DEPARTURE_KINDS, departures_table, undocumented

    paper = OmegaConf.load(REPO / "conf" / "protocol" / "paper.yaml")
    code = [r for r in paper.departures if r.kind == "code"]
    assert "code" in DEPARTURE_KINDS and all(list(r.covers) == [] for r in code)
    assert any("invalid_rate_pooled" in r.why and "zero-filled" in r.why for r in code)
    assert undocumented({}, code) == ([], [])
    assert "| The invalid-answer rate of the main tables (code) | — | code |" in departures_table()


def test_official_doorkey_trains_on_the_released_800_map_pool_in_order():
    """protocol=official, DoorKey-8x8: the training episodes' maps are seeds 200, 201, ... in
    order (door_key/env.py TRAIN_SEEDS = range(200, 1000), cycled by SeededDoorKeyEnv), every
    one a training seed; the paper and suite recipes keep the random training stream (and
    their checkpoint hashes: the key is out of the hash at null)."""
    from benchmark.policy.train import training_vec_env
    from benchmark.seeds import TRAIN_SEED_MIN

    released_pool = list(range(200, 1000))  # door_key/env.py TRAIN_SEEDS
    cfg = compose("env=doorkey8", "protocol=official")
    assert list(cfg.policy.train_seed_pool) == [200, 1000]
    task = make_task(cfg.env)
    venv = training_vec_env(task, 0, 1, pool=cfg.policy.train_seed_pool)
    try:
        env = venv.envs[0]
        seeds = []
        venv.reset()
        seeds.append(env.get_wrapper_attr("last_seed"))
        for _ in range(9):  # each episode ends; the vec env resets to the next map
            env.reset()
            seeds.append(env.get_wrapper_attr("last_seed"))
    finally:
        venv.close()
    assert seeds == released_pool[:10]
    wrapper = task.training_env(0, pool=[998, 1000])
    assert [wrapper.reset()[1]["reset_seed"] for _ in range(3)] == [998, 999, 998]  # cycled
    for protocol in ("paper", "suite"):
        other = compose("env=doorkey8", f"protocol={protocol}")
        assert other.policy.train_seed_pool is None
        stream = task.training_env(0, pool=other.policy.train_seed_pool)
        assert all(stream.reset()[1]["reset_seed"] >= TRAIN_SEED_MIN for _ in range(3))
    with pytest.raises(ValueError, match=r"train_seed_pool=\[0, 100\] is invalid"):
        task.training_env(0, pool=[0, 100])


def _validations(cfg, evaluations: int) -> list[list[int]]:
    """The seeds of a job's first PPO validations, as its training plays them."""
    from benchmark.seeds import Splits, validation_schedule

    policy, splits = cfg.policy, Splits.from_config(cfg.get("splits"))
    return [
        validation_schedule(policy.eval_seeds, k, policy.eval_episodes, policy.seed, splits)
        for k in range(evaluations)
    ]


def test_official_validation_plays_the_released_eval_seeds_per_env():
    """protocol=official scores the threshold checkpoints (and `best`) where the released
    trainers' eval envs do: DoorKey cycles validation maps 0-99 (SeededDoorKeyEnv(seeds=
    VAL_SEEDS): evaluation k plays 51k .. 51k+49 mod 100); FourRooms and HigherLower play new
    random maps (decks) at every evaluation, training seeds here, from the training seed. paper
    and suite keep validation seeds 0..n-1 every time, and their checkpoint hashes (the key is
    out of the hash at `fixed`)."""
    from benchmark.policy.checkpoints import recipe_payload
    from benchmark.seeds import TRAIN_SEED_MIN

    doorkey = compose("env=doorkey8", "protocol=official")
    assert doorkey.policy.eval_seeds == "cycle" and doorkey.policy.eval_episodes == 50
    assert _validations(doorkey, 3) == [
        list(range(0, 50)),
        [*range(51, 100), 0],
        [(102 + j) % 100 for j in range(50)],
    ]
    for env in ("fourrooms", "higherlower"):
        cfg = compose(f"env={env}", "protocol=official")
        assert cfg.policy.eval_seeds == "fresh", env
        first, second = _validations(cfg, 2)
        assert first != second and min(first + second) >= TRAIN_SEED_MIN, env
        assert len(first) == cfg.policy.eval_episodes == 50
        assert _validations(compose(f"env={env}", "protocol=official"), 2) == [first, second]
        reseeded = compose(f"env={env}", "protocol=official", "policy.seed=1")
        assert _validations(reseeded, 1)[0] != first, env
        assert "eval_seeds" in recipe_payload(cfg)["policy"]
    for env in ("fourrooms", "doorkey8", "higherlower"):
        for protocol in ("paper", "suite"):
            cfg = compose(f"env={env}", f"protocol={protocol}")
            n = cfg.policy.eval_episodes
            assert _validations(cfg, 3) == [list(range(n))] * 3, (env, protocol)
            assert "eval_seeds" not in recipe_payload(cfg)["policy"]
            fresh = compose(f"env={env}", f"protocol={protocol}", "policy.eval_seeds=fresh")
            assert config_hash(fresh) != config_hash(cfg)


def test_the_paper_network_per_env():
    """`paper` trains HigherLower with the released network (dropout before each Tanh) and
    FourRooms with the suite's (the released one lands far below the paper's row there: a
    departure row with its measured effect); DoorKey follows the suite's recipe."""
    want = {
        "fourrooms": ("after_activation", None),
        "higherlower": ("before_activation", None),
        "doorkey8": ("after_activation", None),
    }
    for env, (placement, scale) in want.items():
        cfg = compose(f"env={env}", "protocol=paper")
        assert (cfg.policy.dropout_placement, cfg.policy.image_scale) == (placement, scale), env
    official = compose("env=fourrooms", "protocol=official")
    assert (official.policy.dropout_placement, official.policy.image_scale) == (
        "before_activation",
        10,
    )
