"""Fail fast on bad values, before any training or model loading. Hydra already rejects unknown
group options (listing the allowed ones); this checks the values inside the groups. Every
message names the bad value and what is allowed."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from benchmark.cell import EvalSettings, PromptSettings
from benchmark.config import root_keys
from benchmark.consultants import ConsultantError, backend_class, check_slm, slm_keys
from benchmark.gates import NeverGate
from benchmark.gates.checks import check_gate, gate_class, gate_keys
from benchmark.policy import names
from benchmark.policy.checkpoints import PolicySettings
from benchmark.policy.train import as_dict, check_head, validate_policy
from benchmark.prompts import check_choice_scoring, prompt_keys
from benchmark.protocol import FIELDS
from benchmark.seeds import Splits
from benchmark.tuning import TuningSettings

# nodes whose keys are fixed: a key their owner does not declare is a typo (`+gate.tauu=0.9`),
# never silently ignored. env.ppo and slm.backend.extra_body stay open. Each owner declares its
# keys: the gate classes (Gate.config_keys), the backend (Consultant.config_keys, slm_keys), the
# prompt variant's constructor, the protocol (protocol.FIELDS), the root config (eval, tuning,
# splits: config.root_keys); nothing here reads conf/.
ROOT_NODES = ("eval", "tuning", "splits")


def known_keys(cfg: DictConfig, node: str) -> frozenset[str] | None:
    """The keys the config node `node` may hold, as their owners declare them; None when its
    `_target_` names no class of the kind (building it fails then, with its own message)."""
    try:
        return _declared_keys(cfg, node)
    except (ConsultantError, ImportError, AttributeError, TypeError, ValueError):
        return None


def _declared_keys(cfg: DictConfig, node: str) -> frozenset[str]:
    if node in ROOT_NODES:
        return root_keys(node)
    if node == "protocol":
        return FIELDS
    if node == "gate":
        return gate_keys(cfg.gate)
    if node == "slm":
        return slm_keys(cfg.slm)
    if node == "slm.backend":
        return backend_class(cfg.slm.backend).config_keys()
    if node == "prompt":
        return prompt_keys(cfg.prompt)
    raise ValueError(f"no declared keys for config node {node!r}")


def check_known_keys(cfg: DictConfig) -> None:
    for node in ("gate", "slm", "prompt", "protocol", *ROOT_NODES, "slm.backend"):
        value = OmegaConf.select(cfg, node)
        if not isinstance(value, DictConfig):
            continue
        known = known_keys(cfg, node)
        unknown = sorted(set(value) - known) if known is not None else []
        if unknown:
            raise ValueError(
                f"unknown key {node}.{unknown[0]}: allowed keys of {node} are {sorted(known)}"
            )


def validate(cfg: DictConfig, task=None) -> Splits:
    """Check every value the job reads; returns the job's seed splits."""
    from benchmark.envs import make_task  # only where a check needs the task

    check_known_keys(cfg)
    splits = Splits.from_config(cfg.get("splits"))
    for key in ("seed", "policy.seed", "tuning.sampler_seed"):
        value = OmegaConf.select(cfg, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{key}={value!r} is invalid: allowed an integer >= 0")
    validate_policy(as_dict(cfg.policy))
    if cfg.policy.get("head", "slots") != "slots":
        check_head(task if task is not None else make_task(cfg.env), as_dict(cfg.policy))
    PolicySettings.check_config(cfg.policy)
    TuningSettings.check_scope(cfg)
    PromptSettings.check_config(cfg.get("prompt"))
    TuningSettings.check_config(cfg.tuning)
    check_gate(cfg, task)
    EvalSettings.check_config(cfg.eval, cfg.tuning, splits)
    check_slm(cfg.get("slm"))
    # a cell that asks no consultant (gate=never) reads neither
    if (
        OmegaConf.select(cfg, "slm.decoding.mode") == "choices"
        and gate_class(cfg.gate) is not NeverGate
    ):
        check_choice_scoring(cfg.prompt, task if task is not None else make_task(cfg.env))
    EvalSettings.check_execution(cfg.eval)
    names.of_config(cfg)  # rNNN / tK against the recipe's thresholds, before any training
    return splits
