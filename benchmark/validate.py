"""Fail fast on bad values, before any training or model loading. Hydra already rejects unknown
group options (listing the allowed ones); this checks the values inside the groups. Every
message names the bad value and what is allowed."""

from __future__ import annotations

import inspect
import math

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from benchmark import workers
from benchmark.analysis.steps import RERUN
from benchmark.config import option_file, options, root_keys
from benchmark.consultants import ConsultantError, backend_class
from benchmark.consultants.base import CHOICE_SCORES, SOURCES
from benchmark.envs.navfeatures import PLANNER_HINTS
from benchmark.gates import TAU_AUTO, Gate, NeverGate, available_gates
from benchmark.policy import names
from benchmark.policy.train import as_dict, check_head, validate_policy
from benchmark.protocol import FIELDS
from benchmark.seeds import Splits
from benchmark.tuning import Objective

# nodes whose keys are fixed: a key their owner does not declare is a typo (`+gate.tauu=0.9`),
# never silently ignored. env.ppo and slm.backend.extra_body stay open. Each owner declares its
# keys: the gate classes (Gate.config_keys), the backend (Consultant.config_keys, slm_keys), the
# prompt variant's constructor, the protocol (protocol.FIELDS), the root config (eval, tuning,
# splits: config.root_keys); nothing here reads conf/.
ROOT_NODES = ("eval", "tuning", "splits")
HYDRA_KEYS = frozenset({"_target_", "_recursive_", "_convert_", "_partial_"})
# the slm keys of every backend; belief_name and policy_name label the two models of Agent-BRACE's
# methods (conf/method/brace_*.yaml), which set them whatever the backend (a preset's rows with
# slm=tiny keep them); a backend adds its own (Consultant.slm_keys)
SLM_KEYS = frozenset(
    {"name", "cache", "cache_max_entries", "decoding", "backend", "belief_name", "policy_name"}
)


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
        gates = [*available_gates().values(), _gate_class(cfg.gate)]
        return frozenset().union(
            *(g.config_keys() for g in gates if isinstance(g, type) and issubclass(g, Gate))
        )
    if node == "slm":
        return SLM_KEYS | frozenset(backend_class(cfg.slm.backend).slm_keys)
    if node == "slm.backend":
        return backend_class(cfg.slm.backend).config_keys()
    if node == "prompt":
        return _init_keys(get_class(str(cfg.prompt.get("_target_")))) | HYDRA_KEYS
    raise ValueError(f"no declared keys for config node {node!r}")


def _init_keys(cls: type) -> frozenset[str]:
    params = inspect.signature(cls.__init__).parameters
    return frozenset(k for k, p in params.items() if k != "self" and p.kind != p.VAR_KEYWORD)


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
    check_known_keys(cfg)
    splits = Splits.from_config(cfg.get("splits"))
    for key in ("seed", "policy.seed", "tuning.sampler_seed"):
        value = OmegaConf.select(cfg, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{key}={value!r} is invalid: allowed an integer >= 0")
    validate_policy(as_dict(cfg.policy))
    if cfg.policy.get("head", "slots") != "slots":
        from benchmark.envs import make_task

        check_head(task if task is not None else make_task(cfg.env), as_dict(cfg.policy))
    _check_released_network(cfg.policy)
    _check_tuning_scope(cfg)
    hint = OmegaConf.select(cfg, "prompt.planner_hint")
    if hint is not None and hint not in PLANNER_HINTS:
        raise ValueError(f"prompt.planner_hint={hint!r} is invalid: allowed {list(PLANNER_HINTS)}")
    clip = cfg.tuning.get("clip_tau", True)
    if not isinstance(clip, bool):
        raise ValueError(f"tuning.clip_tau={clip!r} is invalid: allowed true or false")
    Objective.from_config(cfg.tuning)  # tuning.objective and the parameters it reads
    n_trials = cfg.tuning.n_trials
    if not isinstance(n_trials, int) or isinstance(n_trials, bool) or n_trials < 1:
        raise ValueError(f"tuning.n_trials={n_trials!r} is invalid: allowed an integer >= 1")
    gate = cfg.gate
    n = gate.get("mc_samples")
    if n is not None and (not isinstance(n, int) or n < 1):
        raise ValueError(f"gate.mc_samples={n!r} is invalid: allowed an integer >= 1")
    gate_cls = _gate_class(gate)
    if isinstance(gate_cls, type) and issubclass(gate_cls, Gate):
        gate_cls.check_config(gate)  # its own keys (Gate.check_config)
    _check_taus(cfg, task)
    if cfg.eval.split not in splits.names():
        raise ValueError(f"eval.split={cfg.eval.split!r} is invalid: allowed {splits.names()}")
    for key in ("eval", "tuning"):
        n_ep = cfg[key].n_episodes
        split = cfg.eval.split if key == "eval" else "validation"
        size = splits.size(split)
        if not isinstance(n_ep, int) or not 1 <= n_ep <= max(size, 1):
            raise ValueError(
                f"{key}.n_episodes={n_ep!r} is invalid: allowed an integer in 1..{size} "
                f"(the size of the {split} split)"
            )
    threads = cfg.eval.get("torch_threads")
    if threads is not None and (
        not isinstance(threads, int) or isinstance(threads, bool) or threads < 1
    ):
        raise ValueError(
            f"eval.torch_threads={threads!r} is invalid: allowed an integer >= 1 or null"
        )
    records = cfg.eval.get("step_records", False)
    if not (isinstance(records, bool) or records == RERUN):
        raise ValueError(
            f"eval.step_records={records!r} is invalid: allowed true, false, {RERUN} (true, and "
            "a complete cell computed without them runs its evaluation again to record them)"
        )
    _check_decoding_mode(cfg)
    _check_choices_prompt(cfg, task)
    if cfg.eval.mode not in ("lockstep", "sequential"):
        raise ValueError(f"eval.mode={cfg.eval.mode!r} is invalid: allowed lockstep, sequential")
    workers.resolve(cfg.eval.get("workers"))  # a positive integer or auto
    names.of_config(cfg)  # rNNN / tK against the recipe's thresholds, before any training
    return splits


def _check_decoding_mode(cfg: DictConfig) -> None:
    """slm.decoding.source: config or model, model only where the backend reads the model's
    generation config (`Consultant.reads_generation_config`); slm.decoding.mode: generate or
    choices; choices only greedy and where the backend can score (`choice_scoring`); then the
    backend's own checks (`Consultant.check_config`: the openai backend's server settings)."""
    source = OmegaConf.select(cfg, "slm.decoding.source")
    if source is not None and source not in SOURCES:
        raise ValueError(
            f"slm.decoding.source={source!r} is invalid: allowed {list(SOURCES)} (docs/protocol.md)"
        )
    backend = _backend(cfg)
    if backend is None:
        return
    name = backend.label or backend.__name__
    if source == "model" and backend.uses_lm and not backend.reads_generation_config:
        raise ValueError(
            f"slm.decoding.source=model: the {name} backend cannot read the served model's "
            "generation config; set slm.decoding.source=config and slm.decoding.temperature/"
            "top_p/top_k to the model's values"
        )
    penalty = OmegaConf.select(cfg, "slm.decoding.repetition_penalty")
    if penalty is not None and (
        isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not penalty > 0
    ):
        raise ValueError(
            f"slm.decoding.repetition_penalty={penalty!r} is invalid: allowed a number > 0 "
            "(1.0 = off; docs/protocol.md)"
        )
    _check_mode(cfg, backend, source)
    backend.check_config(cfg.slm)


def _check_mode(cfg: DictConfig, backend: type, source: str | None) -> None:
    mode = OmegaConf.select(cfg, "slm.decoding.mode")
    score = OmegaConf.select(cfg, "slm.decoding.choice_score")
    if score is not None and score not in CHOICE_SCORES:
        raise ValueError(
            f"slm.decoding.choice_score={score!r} is invalid: allowed {list(CHOICE_SCORES)} "
            "(docs/choices.md)"
        )
    if score not in (None, "sum") and mode != "choices":
        raise ValueError(
            f"slm.decoding.choice_score={score!r} ranks the valid actions of "
            f"slm.decoding.mode=choices; with mode={mode or 'generate'!r} it changes nothing: "
            "set slm.decoding.mode=choices or leave choice_score at sum"
        )
    if mode is None or mode == "generate":
        return
    if mode == "choices" and source == "model":
        raise ValueError(
            "slm.decoding.mode=choices answers with the most likely action: it needs "
            "slm.decoding.source=config (source=model samples where the model's generation "
            "config does)"
        )
    if mode != "choices":
        raise ValueError(
            f"slm.decoding.mode={mode!r} is invalid: allowed generate, choices (docs/protocol.md)"
        )
    temperature = OmegaConf.select(cfg, "slm.decoding.temperature") or 0
    if temperature > 0:
        raise ValueError(
            f"slm.decoding.mode=choices answers with the most likely action: it needs "
            f"slm.decoding.temperature=0, got {temperature!r}"
        )
    if not backend.choice_scoring:
        raise ValueError(
            f"slm.decoding.mode=choices: the {backend.label or backend.__name__} backend cannot "
            "score the valid actions; allowed slm.decoding.mode=generate"
        )


def _backend(cfg: DictConfig) -> type | None:
    """The backend class of `slm.backend` (None without an slm node)."""
    node = OmegaConf.select(cfg, "slm.backend")
    if not isinstance(node, DictConfig):
        return None
    return backend_class(node)


def _check_choices_prompt(cfg: DictConfig, task) -> None:
    """slm.decoding.mode=choices needs a prompt with an answer choice scoring can score
    (`scores_choices`, asked of the queries of one real consultation); else every answer would
    silently be generated. Cells that ask no consultant (gate=never) ignore both."""
    if OmegaConf.select(cfg, "slm.decoding.mode") != "choices":
        return
    if _gate_class(cfg.gate) is NeverGate:
        return
    from hydra.utils import instantiate

    from benchmark.consultants.base import Answer, scores_choices
    from benchmark.envs import make_task

    task = task if task is not None else make_task(cfg.env)
    variant = instantiate(cfg.prompt)
    variant.check(task)
    consultation = variant.session(task.episode(0), False).consult(0)
    queries, rounds = [], next(consultation)
    try:
        while True:  # every round of one consultation, answered in the prompt's own format
            queries += rounds
            rounds = consultation.send([Answer(q.render_answer(q.actions[0], "x")) for q in rounds])
    except StopIteration:
        pass
    if any(scores_choices(q) for q in queries):
        return
    rationale = cfg.prompt.get("rationale")
    raise ValueError(
        f"slm.decoding.mode=choices cannot score any answer of prompt={cfg.prompt.get('name')}"
        + (f" with prompt.rationale={str(rationale).lower()}" if rationale else "")
        + ": choice scoring answers a query whose answer is one bare action, and this prompt's "
        "answers carry a reason, a belief update or a plan; allowed slm.decoding.mode=generate, "
        "or a prompt whose answer is one action (an ASK prompt with prompt.rationale=false)"
    )


def _check_taus(cfg: DictConfig, task) -> None:
    """gate.tau and gate.match_tau in [0, log2|A|] bits (the largest entropy a policy over |A|
    actions can have: a tau above it never asks), or 'auto'; gate.tau_range finite with its low
    end below log2|A| (the range is clipped to it). A gate whose score is a probability (the
    learned gate), or an entropy gate with gate.normalise=true, has [0, 1] in place of
    [0, log2|A|]. `allow_tau_above_max=true` accepts a
    finite tau above the maximum on purpose."""
    gate = cfg.gate
    normalise = _check_normalise(gate)
    if getattr(_gate_class(gate), "score_is_probability", False):
        _check_probability_taus(cfg)
        return
    if normalise:  # the entropy over log2 of the admissible actions: [0, 1] in every state
        max_h, ceiling, unit, bits = 1.0, "1 (gate.normalise=true)", "(normalised)", ""
        top = "the largest normalised entropy"
    else:
        max_h = math.log2(len(task.action_names)) if task is not None else math.inf
        ceiling, unit, bits = f"log2(|A|) = {max_h:.3f}", "(bits)", " bits"
        top = f"the maximum entropy of {len(task.action_names) if task else '|A|'} actions"
    for key in ("tau", "match_tau"):
        tau = gate.get(key)
        if tau is None or str(tau) == TAU_AUTO:
            continue
        if not _finite_number(tau) or tau < 0:
            raise ValueError(
                f"gate.{key}={tau!r} is invalid: allowed 'auto' or a number >= 0 {unit}, at most "
                f"{ceiling} for {cfg.env.name}"
            )
        if tau > max_h and not cfg.get("allow_tau_above_max", False):
            raise ValueError(
                f"gate.{key}={tau!r} is invalid for {cfg.env.name}: allowed 'auto' or a number "
                f"in [0, {ceiling}]{bits}; a tau above {top} never asks (set "
                "allow_tau_above_max=true to run such a gate on purpose)"
            )
    if "tau_range" in gate:
        low, high = _pair("gate.tau_range", gate.tau_range)
        if (
            not (_finite_number(low) and _finite_number(high))
            or low < 0
            or high <= low
            or (low >= max_h)
        ):
            clip = "always" if normalise else "with tuning.clip_tau"
            raise ValueError(
                f"gate.tau_range=[{low}, {high}] is invalid for {cfg.env.name}: allowed finite "
                f"0 <= low < high with low < {ceiling} (the range is clipped to it {clip})"
            )


def _check_normalise(gate: DictConfig) -> bool:
    """gate.normalise: a boolean, and true only for a gate that thresholds an entropy (a
    learned gate's classifier is trained on the entropies in bits)."""
    value = gate.get("normalise", False)
    if not isinstance(value, bool):
        raise ValueError(f"gate.normalise={value!r} is invalid: allowed true or false")
    cls = _gate_class(gate)
    thresholds_entropy = cls is not None and (
        getattr(cls, "threshold_field", None) in ("total", "epistemic")
        and not getattr(cls, "score_is_probability", False)
    )
    if value and not thresholds_entropy:
        raise ValueError(
            f"gate.normalise=true is invalid for gate {gate.get('name')!r}: allowed only for a "
            "gate whose tau compares an MC-dropout entropy (entropy, epistemic)"
        )
    return value


def _gate_class(gate: DictConfig) -> type | None:
    try:
        return get_class(str(gate.get("_target_")))
    except Exception:  # a bad _target_ fails where the gate is built, with Hydra's message
        return None


def _check_probability_taus(cfg: DictConfig) -> None:
    """gate.tau in [0, 1] or 'auto', gate.tau_range within [0, 1]: the gate's score is a
    probability, whatever the env."""
    gate, name = cfg.gate, cfg.gate.get("name")
    tau = gate.get("tau")
    if tau is not None and str(tau) != TAU_AUTO:
        above = _finite_number(tau) and tau > 1 and cfg.get("allow_tau_above_max", False)
        if not (_finite_number(tau) and 0 <= tau <= 1) and not above:
            raise ValueError(
                f"gate.tau={tau!r} is invalid for gate {name!r}: allowed 'auto' or a number in "
                "[0, 1] (its score is a probability; a tau above 1 never asks: set "
                "allow_tau_above_max=true to run such a gate on purpose)"
            )
    if "tau_range" in gate:
        low, high = _pair("gate.tau_range", gate.tau_range)
        if not 0 <= low < high <= 1:
            raise ValueError(
                f"gate.tau_range=[{low}, {high}] is invalid for gate {name!r}: allowed "
                "0 <= low < high <= 1 (its score is a probability)"
            )


def _finite_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_tuning_scope(cfg: DictConfig) -> None:
    scope, shared = cfg.tuning.scope, cfg.tuning.shared
    if scope not in ("cell", "shared"):
        raise ValueError(f"tuning.scope={scope!r} is invalid: allowed cell, shared")
    if scope == "shared" and not shared:
        raise ValueError(
            "tuning.scope=shared needs tuning.shared: the overrides that name the cell whose "
            "study supplies the tau, e.g. {policy.checkpoint: final}"
        )
    for key, value in (shared or {}).items():
        if key == "prompt":
            if not option_file("prompt", str(value)).is_file():
                raise ValueError(
                    f"tuning.shared.prompt={value!r} is invalid: allowed {options('prompt')}"
                )
        elif OmegaConf.select(cfg, str(key), default="<missing>") == "<missing>":
            raise ValueError(
                f"tuning.shared names {key!r}, which is not a config key: allowed dotted keys of "
                "this config (e.g. policy.checkpoint, prompt.rationale) or prompt"
            )


def _pair(name: str, value) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is invalid: allowed [low, high]") from None
    return low, high


def _check_released_network(policy: DictConfig) -> None:
    """policy.image_scale (the released code's raw image / 10) and policy.dropout_placement
    before any work, as every other policy value (the network would refuse them only when a
    training starts)."""
    from benchmark.policy.network import DROPOUT_PLACEMENTS

    scale = policy.get("image_scale")
    number = isinstance(scale, int | float) and not isinstance(scale, bool)
    if scale is not None and not (number and _finite_number(scale) and scale > 0):
        raise ValueError(f"policy.image_scale={scale!r} is invalid: allowed a number > 0, or null")
    placement = policy.get("dropout_placement", DROPOUT_PLACEMENTS[0])
    if placement not in DROPOUT_PLACEMENTS:
        raise ValueError(
            f"policy.dropout_placement={placement!r} is invalid: allowed {list(DROPOUT_PLACEMENTS)}"
        )
