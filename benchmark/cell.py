"""What a cell is: its identity, hash, human name, the components it uses and its summary labels.

One job computes one cell, stored under `<paths.root>/cells/<hash>/`. The job, the report, the
bench and the migration of older results roots all read cells through `CellSpec`, so the rules
below exist once:

- PPO-only (`gate=never`) uses no consultant and no prompt; SLM-only (a gate with
  `needs_policy = False`) uses no policy: what a cell does not use is not part of it.
- The identity holds what determines the results: the resolved env, gate, eval, tuning (only
  when tau is tuned), seed and seed splits, the code versions, and the inputs by content: the
  PPO policy's weights and loading settings (policy.checkpoints.policy_digest) and the weights
  identity of the consultant's model (every byte of a local model's weights). Paths
  never enter it, so a results root can move, and replaced weights are never mistaken for the
  old ones.
- Execution settings (eval.mode, eval.torch_threads, device, progress bars, and the keys a
  backend declares in `Consultant.execution_keys`) are not part of it: lockstep and sequential
  evaluation give byte-identical episodes. Each section's owner (`OWNERS`) declares its keys'
  roles (benchmark.settings), and the identity reads them there."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from benchmark.consultants import backend_class
from benchmark.consultants.base import Decoding
from benchmark.envs.base import TaskSettings, env_identity
from benchmark.envs.family import FamilyPromptSettings, get_family
from benchmark.gates import GateSettings
from benchmark.redact import redact_data
from benchmark.settings import (
    CELL,
    FINETUNED_PROMPT,
    STUDY,
    UNREAD,
    WITHOUT_PPO,
    added,
    execution,
    execution_keys,
    identity,
    identity_of,
    old_values,
)
from benchmark.settings import outside_keys as outside
from benchmark.tuning import OBJECTIVE_KEYS, Objective, TuningSettings

# 1: before paths left the identity and inputs entered it by content; 2: before the policy
# entered by its weights (not the zip's bytes) and a local model by every byte of its weights
IDENTITY_VERSION = 3


@dataclass(frozen=True)
class EvalSettings:
    """The roles of the `eval` keys: lockstep and sequential evaluation, any thread or worker
    count, with or without step records, give byte-identical episodes."""

    split: str = identity("test")
    n_episodes: int = identity(100)
    mode: str = execution("lockstep")
    torch_threads: int = execution(1)
    step_records: Any = execution(False)
    workers: Any = execution("auto")

    @staticmethod
    def check_config(eval_cfg: Any, tuning: Any, splits: Any) -> None:
        """eval.split, the episode counts of eval and tuning within their splits (`splits`),
        eval.torch_threads and eval.step_records."""
        from benchmark.analysis.steps import RERUN

        if eval_cfg.split not in splits.names():
            raise ValueError(f"eval.split={eval_cfg.split!r} is invalid: allowed {splits.names()}")
        for key, section in (("eval", eval_cfg), ("tuning", tuning)):
            n_ep = section.n_episodes
            split = eval_cfg.split if key == "eval" else "validation"
            size = splits.size(split)
            if not isinstance(n_ep, int) or not 1 <= n_ep <= max(size, 1):
                raise ValueError(
                    f"{key}.n_episodes={n_ep!r} is invalid: allowed an integer in 1..{size} "
                    f"(the size of the {split} split)"
                )
        threads = eval_cfg.get("torch_threads")
        if threads is not None and (
            not isinstance(threads, int) or isinstance(threads, bool) or threads < 1
        ):
            raise ValueError(
                f"eval.torch_threads={threads!r} is invalid: allowed an integer >= 1 or null"
            )
        records = eval_cfg.get("step_records", False)
        if not (isinstance(records, bool) or records == RERUN):
            raise ValueError(
                f"eval.step_records={records!r} is invalid: allowed true, false, {RERUN} (true, "
                "and a complete cell computed without them runs its evaluation again to record "
                "them)"
            )

    @staticmethod
    def check_execution(eval_cfg: Any) -> None:
        """eval.mode and eval.workers (a positive integer or auto)."""
        from benchmark import workers

        if eval_cfg.mode not in ("lockstep", "sequential"):
            raise ValueError(
                f"eval.mode={eval_cfg.mode!r} is invalid: allowed lockstep, sequential"
            )
        workers.resolve(eval_cfg.get("workers"))


@dataclass(frozen=True)
class PromptSettings(FamilyPromptSettings):
    """The roles of the `prompt` keys: those only some families read (FamilyPromptSettings) and
    those added after identity version 2 (the protocols set them): at the value every cell
    before them used they stay out, so those cells keep their hash."""

    style: str = added("appendix", old="appendix")

    @staticmethod
    def check_config(prompt: Any) -> None:
        """prompt.planner_hint (the navigation families' planner hints), where the prompt sets it."""
        from benchmark.envs.navfeatures import PLANNER_HINTS

        hint = prompt.get("planner_hint") if prompt is not None else None
        if hint is not None and hint not in PLANNER_HINTS:
            raise ValueError(
                f"prompt.planner_hint={hint!r} is invalid: allowed {list(PLANNER_HINTS)}"
            )


# the owner of each config section whose keys declare a role (a section without one: all identity)
OWNERS: dict[str, type] = {
    "eval": EvalSettings,
    "gate": GateSettings,
    "prompt": PromptSettings,
    "tuning": TuningSettings,
}
# read from the owners' declarations (older results roots are migrated with these)
ADDED_KEY_DEFAULTS = {k: old_values(o) for k, o in OWNERS.items() if old_values(o)}
EXECUTION_KEYS = {k: execution_keys(o) for k, o in OWNERS.items() if execution_keys(o)}


def digest(data: Any, n: int = 12) -> str:
    """Short SHA-256 of a JSON-able value (sorted keys)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:n]


def tuning_key(identity: dict[str, Any]) -> str:
    """The Optuna study's key: a cell identity without what tuning never sees (the evaluation
    split and size, and the keys declared outside the study: the tuned tau itself, the trial
    count), so cells that differ only there share one study."""
    return digest({k: _section(k, v, STUDY) for k, v in identity.items() if k != "eval"})


def _section(name: str, value: Any, scheme: str = CELL) -> Any:
    """A config section as `scheme` sees it, by the roles its owner declares (OWNERS)."""
    return identity_of(OWNERS[name], value, scheme) if name in OWNERS else value


TUNING_KEY_DROPS = {k: outside(o, STUDY) for k, o in OWNERS.items() if outside(o, STUDY)}


def tuning_identity(tuning: dict[str, Any]) -> dict[str, Any]:
    """The tuning config without the objective's keys, plus the objective and the parameters it
    reads unless it is the default `reward` (so existing cells and studies keep their keys)."""
    rest = {k: v for k, v in tuning.items() if k not in OBJECTIVE_KEYS}
    return {**rest, **Objective.from_config(tuning).identity()}


def code_versions(family: str | None) -> dict[str, int]:
    """The versions of the code that shape a cell's results (see each constant's comment);
    `family`: the env family of a cell that asks a consultant, whose prompt version it holds
    (Family.prompt_version: a change to one family's prompts re-keys that family's cells only)."""
    from benchmark.evaluate import EVALUATION_VERSION

    versions = {"evaluation": EVALUATION_VERSION}
    if family is not None:
        from benchmark.prompts import PARSER_VERSION

        versions.update(prompts=get_family(family).prompt_version, parser=PARSER_VERSION)
    return versions


@dataclass(frozen=True)
class CellSpec:
    """A cell as the config describes it; `with_inputs` adds what its inputs contain."""

    config: dict[str, Any]  # the resolved config parts the cell uses (paths included)
    gate: GateSettings
    inputs: dict[str, Any] = field(default_factory=dict)  # content digests, once known

    # ------------------------------------------------------------------------- construction
    @classmethod
    def from_config(cls, cfg: DictConfig) -> CellSpec:
        """No I/O: the cell `cfg` asks for. `policy.checkpoint=tK` must be normalized first."""
        # no secret in an identity or a written config (benchmark.redact: unchanged without one)
        data = redact_data(OmegaConf.to_container(cfg, resolve=True))
        gate = GateSettings.from_config(data["gate"])
        keys = ["env", "gate", "eval", "seed", "splits"]
        if gate.needs_policy:
            keys.append("policy")
        if gate.asks:
            keys += ["slm", "prompt"]
        if gate.tunes_tau:
            keys.append("tuning")
        config = {k: data[k] for k in keys if k in data}
        if "tau" in config["gate"] and "tau" not in gate.args:  # a sweep's tau grid
            # (+experiment=gates) means nothing to never, always or random: one cell each
            config["gate"] = {k: v for k, v in config["gate"].items() if k != "tau"}
        objective = Objective.from_config(data.get("tuning") or {}).identity()
        if gate.matches_ir and objective:  # p=match spends the IR of that objective's entropy cell
            config["gate"] = {**config["gate"], "match_objective": objective}
        return cls(config=config, gate=gate)

    def with_inputs(self, **inputs: Any) -> CellSpec:
        """The spec with the content identity of its inputs (checkpoint sha256, model identity)."""
        return replace(self, inputs={**self.inputs, **inputs})

    # ------------------------------------------------------------------------- what it uses
    @property
    def uses_policy(self) -> bool:
        return self.gate.needs_policy

    @property
    def uses_consultant(self) -> bool:
        """A consultant and a prompt (every gate but never)."""
        return self.gate.asks

    @property
    def uses_lm(self) -> bool:
        """A language model answers (not the dice or the oracle: Consultant.uses_lm)."""
        return self.uses_consultant and backend_class(self.config["slm"]["backend"]).uses_lm

    @property
    def prompt_family(self) -> str | None:
        """The env family whose prompts the consultant is asked with (None: no consultant)."""
        if not self.uses_consultant:
            return None
        family = self.config["env"].get("family")
        if not family:
            raise ValueError(f"env {self.config['env'].get('name')!r} names no `family`")
        return str(family)

    @property
    def tunes_tau(self) -> bool:
        return self.gate.tunes_tau

    def needed_inputs(self) -> set[str]:
        """The content digests the identity needs: the checkpoint's SHA-256 when a policy is
        used, the model's weights identity (None for dice, oracle, servers) when a consultant is,
        and the key of the study that supplies a tuned tau (its own, or a shared one's)."""
        needed = set()
        if self.uses_policy:
            needed.add("policy_weights")
        if self.uses_consultant:
            needed.add("model")
        if self.tunes_tau:
            needed.add("tau_study")
        return needed

    # ------------------------------------------------------------------------- identity
    @property
    def identity(self) -> dict[str, Any]:
        """Everything that determines the results, and nothing that does not."""
        missing = self.needed_inputs() - set(self.inputs)
        if missing:
            raise RuntimeError(f"cell identity needs {sorted(missing)} first (with_inputs)")
        out = {k: _section(k, v) for k, v in self.config.items()}
        out["gate"] = {k: v for k, v in out["gate"].items() if k != "name"}
        if "env" in out:  # what only PPO reads is no part of a cell that runs none
            out["env"] = env_identity(out["env"], CELL if self.uses_policy else WITHOUT_PPO)
        if "prompt" in out:  # the family-dependent keys its texts do not read (UNREAD)
            read = family_prompt_keys(self.config)
            seen = identity_of(PromptSettings, out["prompt"], UNREAD)
            out["prompt"] = {k: v for k, v in out["prompt"].items() if k in read or k in seen}
        if "policy" in out:  # the tensors and what loads them (policy_digest), not the recipe
            out["policy"] = {"weights": self.inputs["policy_weights"]}
        if "slm" in out:
            backend = out["slm"].get("backend", {})
            # the keys its backend declares execution settings (Consultant.execution_keys)
            backend = _drop(backend, backend_class(backend).execution_keys)
            if "env" in backend:  # a backend trained on the env's states (slm=finetuned)
                backend = {**backend, "env": env_identity(backend["env"])}
            if isinstance(backend.get("prompt"), dict):  # slm=finetuned's copy of the prompt
                backend = {**backend, "prompt": _finetuned_prompt(backend["prompt"])}
            if self.inputs["model"] is not None:  # the weights by content, not where they lie
                backend = {**_drop(backend, ("path",)), "weights": self.inputs["model"]}
            out["slm"] = {**out["slm"], "backend": backend}
            # slm.decoding and its copy in the prompt's sampling as their owner (Decoding)
            # declares them: cells made before a key existed keep their hash
            for part, key in (("slm", "decoding"), ("prompt", "sampling")):
                if isinstance(out.get(part), dict) and key in out[part]:
                    out[part] = {**out[part], key: without_default_decoding(out[part][key])}
        if "tuning" in out:
            out["tuning"] = {**tuning_identity(out["tuning"]), "study": self.inputs["tau_study"]}
        return {
            "identity_version": IDENTITY_VERSION,
            "code": code_versions(self.prompt_family),
            **out,
        }

    @property
    def hash(self) -> str:
        return digest(self.identity)

    def dir(self, root: str | Path) -> Path:
        from benchmark.store import Store

        return Store(root).cell_dir(self.hash)

    def tuning_key(self) -> str:
        """The key of the study this cell's own config would run (the study a shared-scope cell
        reuses is in `inputs["tau_study"]`)."""
        return tuning_key(self.with_inputs(tau_study=None).identity)

    def record(self) -> dict[str, Any]:
        """cell.json: the name, the identity (what the hash is of), the config as asked and the
        inputs found (the checkpoint file's SHA-256 beside its weights' digest)."""
        return {
            "name": self.name,
            "identity": self.identity,
            "config": self.config,
            "inputs": self.inputs,
        }

    # ------------------------------------------------------------------------- labels
    @property
    def name(self) -> str:
        """env/gate[/slm/prompt(+r)][/checkpoint-sSEED or file@sha]: readable, not unique."""
        c = self.config
        ppo_input, _ = self._ppo_variant
        env = c["env"]["name"] + (f"+{ppo_input}" if ppo_input else "")
        parts = [env, self.gate.name + ("-normalised" if self.gate.normalise else "")]
        if self.uses_consultant:
            rationale = "+r" if c["prompt"].get("rationale") else ""
            read = family_prompt_keys(c)  # the family's keys away from their usual value
            usual = PromptSettings()
            keys = [
                f",{k}={c['prompt'][k]}"
                for k in sorted(read)
                if k in c["prompt"] and c["prompt"][k] != getattr(usual, k)
            ]
            parts += [self.slm_label, c["prompt"]["name"] + rationale + "".join(keys)]
        if self.uses_policy:
            parts.append(self.policy_label)
        return "/".join(str(p) for p in parts)

    @property
    def slm_label(self) -> str:
        """The consultant's name, `+choices` added when it answers by choice scoring
        (slm.decoding.mode=choices; `+choices-mean` with the per-token score), so report rows and
        cell names tell them apart."""
        decoding = self.config["slm"].get("decoding") or {}
        if decoding.get("mode", "generate") != "choices":
            return str(self.config["slm"]["name"])
        mean = decoding.get("choice_score", "sum") == "mean"
        return f"{self.config['slm']['name']}+choices" + ("-mean" if mean else "")

    @property
    def policy_label(self) -> str:
        policy = self.config["policy"]
        if policy.get("path"):
            path = Path(policy["path"])
            one_file = path.suffix in (".zip", ".safetensors")
            name = path.stem if one_file else f"{path.name}/{policy['checkpoint']}"
            sha = self.inputs.get("checkpoint_sha256", "")[:8]
            return f"{name}@{sha}" if sha else name
        _, head = self._ppo_variant
        return f"{policy['checkpoint']}-s{policy['seed']}" + (f"+{head}" if head else "")

    def labels(self) -> dict[str, Any]:
        """The fields that say what the cell is (summary.json, report rows, W&B config)."""
        c = self.config
        asks, policy = self.uses_consultant, self.uses_policy
        return {
            "cell": self.name,
            "env": c["env"]["name"],
            "metric": c["env"].get("metric"),
            "gate": self.gate.name,
            "slm": self.slm_label if asks else None,
            "prompt": c["prompt"]["name"] if asks else None,
            "rationale": bool(c["prompt"].get("rationale")) if asks else None,
            "autopilot": c["prompt"].get("autopilot") if asks else None,
            "checkpoint": c["policy"]["checkpoint"] if policy else None,
            "policy_seed": int(c["policy"]["seed"]) if policy else None,
            "mc_samples": self.gate.mc_samples,
            "split": c["eval"]["split"],
            "variant": self.variant,
        }

    @property
    def variant(self) -> str | None:
        """What PPO reads and how it scores, where not the default (a text game's player input,
        the command-scoring head): part of the method's name, so report rows, W&B runs and the
        dashboard tell the variants apart; None at the defaults."""
        ppo_input, head = self._ppo_variant
        parts = [f"{ppo_input} input"] * bool(ppo_input) + [f"{head} head"] * bool(head)
        return ", ".join(parts) or None

    @property
    def _ppo_variant(self) -> tuple[str | None, str | None]:
        """(PPO's input, its head) where the cell runs PPO and they are not the defaults that
        every cell before them ran (the answer input, the slot head)."""
        if not self.uses_policy:
            return None, None
        task, policy = self.config["env"].get("task") or {}, self.config["policy"]
        ppo_input = identity_of(TaskSettings, task).get("ppo_input")
        head = policy.get("head", "slots")
        return ppo_input, None if head == "slots" else head


def family_prompt_keys(config: dict[str, Any]) -> frozenset[str]:
    """The family-dependent prompt keys (envs.family.FamilyPromptSettings) that the cell's env
    family reads at its prompt level: its family answers (Family.prompt_keys)."""
    prompt, env = config.get("prompt") or {}, config.get("env") or {}
    if not prompt.get("level") or not env.get("family"):
        return frozenset()
    return get_family(str(env["family"])).prompt_keys(str(prompt["level"]))


def without_default_decoding(decoding: Any, scheme: str = CELL) -> Any:
    """A decoding mapping (slm.decoding, prompt.sampling) as its owner, Decoding, declares it in
    `scheme`: the keys added after cells existed left out at the value those cells used
    (consultants.base.Decoding); anything not a mapping (null: no sampling set) as it is."""
    return identity_of(Decoding, decoding, scheme) if isinstance(decoding, dict) else decoding


def _finetuned_prompt(prompt: dict[str, Any]) -> dict[str, Any]:
    """The fine-tuned consultant's copy of the prompt, its sampling as Decoding declares it for
    that copy (whose cells came after every decoding key but `choice_score`)."""
    sampling = prompt.get("sampling")
    if not isinstance(sampling, dict):
        return prompt
    return {**prompt, "sampling": without_default_decoding(sampling, FINETUNED_PROMPT)}


def _drop(value: Any, keys: tuple[str, ...]) -> Any:
    if not keys or not isinstance(value, dict):
        return value
    return {k: v for k, v in value.items() if k not in keys}
