"""The trainer's settings (conf/brace/, the `brace` node of a job config), checked before any
work: every count, rate and switch, the RL stage's numbers (benchmark.brace.rl.RLSettings) and
the episode cap the env accepts. A bad value fails here with a message naming its key and what
is allowed (docs/bad-input.md); nothing is made, trained or written before."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from benchmark.brace import shipped
from benchmark.envs.base import env_identity
from benchmark.settings import (
    BRACE_RL,
    BRACE_SFT,
    added,
    execution,
    identity,
    identity_of,
    old_values,
    outside_keys,
)

MODES = ("slm", "ask")
# belief: the policy reads the belief model's belief; summary: the belief model writes a free-text
# summary instead (prompt=mem1, the Summary-Belief ablation); history / react: the raw-history
# prompts (prompt=history / prompt=react), the policy alone (Direct-Action RL / ReAct-RL)
POLICY_INPUTS = ("belief", "summary", "history", "react")
RAW_HISTORY = ("history", "react")
BELIEF_PROMPTS = ("task", "generic")  # the belief prompt with or without its coverage line
ROLES = ("belief", "policy")
POSITIVE = ("teacher_episodes", "sft_examples", "sft_batch", "held_out_episodes",
            "reward_episodes", "threads")  # fmt: skip
RATES = ("sft_epochs", "sft_lr")
# what only the RL models see: not the SFT models' (their data and training are made without it)
RL_ONLY = (BRACE_SFT,)
# R_belief as the paper weighs it: every term at 1, the format score multiplying their sum
PAPER_REWARD = {"correctness": 1.0, "tracking": 1.0, "diversity": 1.0, "success": 1.0,
                "format": True}  # fmt: skip


@dataclass(frozen=True)
class BraceKeys:
    """The keys of the `brace` node (conf/brace/agent_brace.yaml) and what each shapes: every
    trained model (identity), only the RL models (outside the SFT models' scheme), or nothing
    (execution). Keys added after models were trained without them (the appendix ablations:
    R_belief's terms, the certainty scale, the belief prompt's structure) are out of a model's
    identity at the value those models used, so their folders stay reusable."""

    name: str = identity(outside=RL_ONLY)
    algorithm: str = identity(outside=RL_ONLY)
    env: str = identity(outside=RL_ONLY)
    train_belief: bool = identity(outside=RL_ONLY)
    policy_input: str = identity()
    seed: int = identity()
    base: str | None = identity()
    tiny_size: str = identity()
    mode: str = identity(outside=RL_ONLY)
    tau: float = identity(outside=RL_ONLY)
    teacher_episodes: int = identity()
    sft_random_trajectories: int = identity()
    sft_examples: int = identity()
    sft_epochs: int = identity()
    sft_batch: int = identity()
    sft_lr: float = identity()
    sft_roles: list = identity()
    held_out_episodes: int = identity(outside=RL_ONLY)
    rl_max_steps: int = identity(outside=RL_ONLY)
    rl: dict = identity(outside=RL_ONLY)  # its identity is RLSettings.identity
    reward_episodes: int = identity(outside=RL_ONLY)
    skip_rl: bool = execution()
    measure_base: bool = execution()
    threads: int = execution()
    out: str = execution()
    # R_belief's weights and format switch: the RL models' reward only
    reward: dict = added(PAPER_REWARD, old=PAPER_REWARD, outside=RL_ONLY)
    # the certainty scale and the belief prompt also change the SFT data (the teacher's targets,
    # the update's messages)
    labels: str = added("seven", old="seven")
    belief_prompt: str = added("task", old="task")


# what shapes a trained model beyond the `brace` keys: the code's rules, named by version, so
# that a model folder made under other rules is refused, never reused (its completion record
# keeps them): the SFT targets (the teachers' beliefs) and, for RL, the reward and the sampler
RULES = {
    "teacher": "textworld-objects-capped-20",  # TextWorld's teacher: objects seen, <= 20 bullets
    # rewards.format_score (was a binary gate); its count term counts only claims judged correct
    "format_score": "authors-continuous-count-checked",
    # claims naming what the game does not contain are incorrect, unseen ones judged by the facts;
    # R_belief's diversity takes the claims judged correct only
    "claims": "invented-incorrect-pay-checked",
    "sampler": "neutral-generation-config",  # samples softmax(logits / T), what PPO scores
}
# the raw-history prompt (conf/prompt/history.yaml) a Direct-Action RL policy trains on, named by
# version: models trained on its earlier stateful view (map, recent commands) are refused
HISTORY_RULE = {"history_prompt": "basic-view"}


def training_prompt(policy_input: str) -> dict[str, Any]:
    """The prompt option the models train on, resolved as the trainer reads it (its file alone,
    no sampling): part of every model's identity, so a change to the prompt (its claim cap, its
    belief length, its view) never reuses models trained on the old one."""
    from benchmark.brace.pipeline import PROMPT
    from benchmark.config import option_file

    cfg = OmegaConf.to_container(OmegaConf.load(option_file("prompt", PROMPT[policy_input])),
                                 resolve=True)  # fmt: skip
    cfg.pop("sampling", None)
    return cfg


class SettingsError(ValueError):
    """A trainer setting that is refused, named by its key."""


@dataclass(frozen=True)
class Settings:
    """The checked `brace` node: `values` (plain, resolved), the RL stage's settings, the env
    config the models train on, and the training identity of each stage."""

    values: dict[str, Any]
    rl: Any  # benchmark.brace.rl.RLSettings
    env: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def out(self) -> Path:
        return Path(self.values["out"])

    @property
    def raw_history(self) -> bool:
        return self.values["policy_input"] in RAW_HISTORY

    def reward_weights(self) -> Any:
        """R_belief's settings (benchmark.brace.rewards.BeliefWeights) of `brace.reward` and
        `brace.labels`."""
        from benchmark.brace.rewards import BeliefWeights

        r = self.values["reward"]
        return BeliefWeights(correctness=r["correctness"], tracking=r["tracking"],
                             diversity=r["diversity"], success=r["success"],
                             format_gate=r["format"], labels=self.values["labels"])  # fmt: skip

    @property
    def roles(self) -> tuple[str, ...]:
        return ("policy",) if self.raw_history else ROLES

    def sft_identity(self) -> dict[str, Any]:
        """What made the SFT models: the env (resolved), the SFT keys (random trajectories per
        game included), the prompt they train on, the certainty scale and belief prompt where
        not the paper's, and the teacher's rule version."""
        keys = identity_of(BraceKeys, self.values, BRACE_SFT)
        if keys["base"] == shipped.NAME:  # the shipped weights, by their pinned digest
            keys["base"] = shipped.identity()
        return {"env": env_identity(self.env), **keys,
                "prompt": training_prompt(self.values["policy_input"]),
                "rules": {"teacher": RULES["teacher"]}}  # fmt: skip

    def rl_identity(self, job: dict[str, Any] | None = None) -> dict[str, Any]:
        """What made the RL models: every identity key (BraceKeys), the RL stage's numbers
        (GAE lambda, ..., `RLSettings.identity`), (ask mode) the job whose PPO and gate it uses,
        and the code's `RULES` (the reward's format score, the teacher, the sampler; on raw
        history, `HISTORY_RULE`: the history prompt's view)."""
        keys = identity_of(BraceKeys, self.values, BRACE_RL)
        # `brace.env` (the name the models are filed under) must not shadow the env config they
        # are trained on: an RL model trained on other games is never reused (tested)
        keys["env_name"] = keys.pop("env")
        rules = {**RULES, **(HISTORY_RULE if self.raw_history else {})}
        return {**keys, "env": env_identity(self.env), "rl": self.rl.identity(), "ask_job": job,
                "prompt": training_prompt(self.values["policy_input"]), "rules": rules}  # fmt: skip


def _fail(key: str, value: Any, why: str) -> None:
    raise SettingsError(f"brace.{key}={value!r}: {why}")


def check(cfg: DictConfig) -> Settings:
    """The `brace` node of `cfg`, checked (SettingsError names the first bad key)."""
    from benchmark.brace.rl import ALGORITHMS, RLSettings
    from benchmark.config import option_file

    node = cfg.get("brace")
    if node is None:
        raise SettingsError("no `brace` node: compose through benchmark.config (conf/brace/)")
    values = OmegaConf.to_container(node, resolve=True)
    known = set(OmegaConf.load(option_file("brace", "agent_brace")))
    if sorted(set(values) - known):
        raise SettingsError(
            f"brace.{sorted(set(values) - known)[0]}: unknown key; allowed {', '.join(sorted(known))}"
        )
    if values["algorithm"] not in ALGORITHMS:
        _fail("algorithm", values["algorithm"], f"allowed {', '.join(ALGORITHMS)}")
    for key, allowed in (("mode", MODES), ("policy_input", POLICY_INPUTS)):
        if values[key] not in allowed:
            _fail(key, values[key], f"allowed {', '.join(allowed)}")
    for key in ("train_belief", "skip_rl", "measure_base"):
        if not isinstance(values[key], bool):
            _fail(key, values[key], "allowed true, false")
    for key in (*POSITIVE, "seed", "rl_max_steps", "sft_random_trajectories"):
        if isinstance(values[key], bool) or not isinstance(values[key], int):
            _fail(key, values[key], "must be an integer")
    for key in POSITIVE:
        if values[key] < 1:
            _fail(key, values[key], "must be >= 1")
    for key in RATES:
        if not isinstance(values[key], (int, float)) or not values[key] > 0:
            _fail(key, values[key], "must be > 0")
    if values["sft_random_trajectories"] < 0:
        _fail("sft_random_trajectories", values["sft_random_trajectories"], "must be >= 0")
    if values["rl_max_steps"] < 0:
        _fail("rl_max_steps", values["rl_max_steps"], "must be >= 0 (0: the env's own length)")
    roles = values["sft_roles"]
    if not isinstance(roles, list) or not set(roles) <= set(ROLES):
        _fail("sft_roles", roles, "allowed a list of belief, policy (e.g. [belief], [])")
    if values["policy_input"] in RAW_HISTORY and "belief" in roles:
        _fail("sft_roles", roles,
              f"policy_input={values['policy_input']} has no belief model: [] or [policy]")  # fmt: skip
    _check_ablations(values)
    if not isinstance(values["tau"], (int, float)) or values["tau"] < 0:
        _fail("tau", values["tau"], "must be a number >= 0 (bits)")
    if values["base"] == shipped.NAME:
        try:
            shipped.folder()
        except shipped.ShippedError as err:
            raise SettingsError(str(err)) from None
    elif values["base"] is not None and not Path(values["base"]).is_dir():
        _fail("base", values["base"], f"not a model directory (allowed a model directory, "
              f"{shipped.NAME}: the shipped base, null: the tiny model `tiny_size`)")  # fmt: skip
    from benchmark.consultants.tiny import SIZES

    if values["tiny_size"] not in SIZES:
        _fail("tiny_size", values["tiny_size"], f"allowed {', '.join(SIZES)}")
    rl = values.get("rl")
    try:
        rl_settings = RLSettings.of(rl if isinstance(rl, dict) else {})
        rl_settings.for_algorithm(values["algorithm"])
    except (TypeError, ValueError) as err:  # "rl <field>=<value>: why" -> brace.rl.<field>=...
        text = str(err)
        raise SettingsError(
            "brace.rl" + text[11:] if text.startswith("rl settings") else "brace.rl." + text[3:]
        ) from err
    env = OmegaConf.to_container(cfg.env, resolve=True)
    _check_cap(cfg, values["rl_max_steps"])
    return Settings(values=values, rl=rl_settings, env=env)


def _check_ablations(values: dict[str, Any]) -> None:
    """The appendix ablations' keys: `reward` (R_belief's weights and format switch), `labels`
    (the certainty scale) and `belief_prompt`; a raw-history row has no belief to apply them to."""
    from benchmark.brace.rewards import TERMS, BeliefWeights
    from benchmark.vocabulary import SCALES

    reward = values["reward"]
    if not isinstance(reward, dict) or set(reward) != set(PAPER_REWARD):
        got = sorted(reward) if isinstance(reward, dict) else reward
        _fail("reward", got, f"must hold exactly {', '.join(PAPER_REWARD)}")
    for key in TERMS:
        w = reward[key]
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < float("inf"):
            _fail(f"reward.{key}", w, "must be a number >= 0 (0: the term off)")
    if not isinstance(reward["format"], bool):
        _fail("reward.format", reward["format"], "allowed true, false")
    if values["labels"] not in SCALES:
        _fail("labels", values["labels"], f"allowed {', '.join(SCALES)}")
    if values["belief_prompt"] not in BELIEF_PROMPTS:
        _fail("belief_prompt", values["belief_prompt"], f"allowed {', '.join(BELIEF_PROMPTS)}")
    try:
        BeliefWeights(**{k: reward[k] for k in TERMS})
    except ValueError as err:
        raise SettingsError(f"brace.{err}") from err
    if values["policy_input"] == "summary":  # no claims: only the task term can score it
        if reward["format"] or any(reward[k] for k in TERMS if k != "success"):
            _fail("reward", reward, "policy_input=summary writes no claims to check or format "
                  "to score: correctness, tracking and diversity 0, format false (R_belief = "
                  "gamma^t x success)")  # fmt: skip
        rl_only = outside_keys(BraceKeys, BRACE_SFT)
        for key, old in old_values(BraceKeys).items():  # those of the SFT data: scale, prompt
            if key not in rl_only and values[key] != old:
                _fail(key, values[key], "policy_input=summary has no certainty labels or "
                      f"claim coverage; leave it at {old!r}")  # fmt: skip
    if values["policy_input"] in RAW_HISTORY:
        changed = [k for k, v in old_values(BraceKeys).items() if values[k] != v]
        if changed:
            _fail(changed[0], values[changed[0]],
                  f"policy_input={values['policy_input']} has no belief model to apply it to; "
                  f"leave it at {old_values(BraceKeys)[changed[0]]!r}")  # fmt: skip


def _check_cap(cfg: DictConfig, max_steps: int) -> None:
    """The env's task with its episodes capped at `max_steps` (0: as is) must build: an env
    that refuses a cap (HigherLower plays its 51 decisions) fails here, before any work."""
    from benchmark.brace.pipeline import task_for

    try:
        task_for(cfg.env, max_steps or None)
    except Exception as err:  # noqa: BLE001 - hydra wraps the task's ValueError
        raise SettingsError(
            f"brace.rl_max_steps={max_steps}: {err.__cause__ or err}; 0 plays the env's own "
            "episode length"
        ) from err
