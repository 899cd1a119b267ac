"""Config -> the objects of one evaluation (task, gate, policy, consultant, prompt, Evaluator),
and the tuning entry point. The job, the bench, the prompt showcase and the tests build through
here, so there is one way to assemble an evaluation and one tuning objective."""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.utils import get_class, get_method, instantiate
from omegaconf import DictConfig, OmegaConf

from benchmark.cell import CellSpec
from benchmark.config import CONF
from benchmark.consultants.errors import ModelNotBuilt
from benchmark.envs import Task, make_task
from benchmark.evaluate import Evaluator
from benchmark.gates import TAU_AUTO, EntropyGate
from benchmark.policy import names
from benchmark.seeds import TUNING_SPLIT, Splits
from benchmark.store import Store, cached_digest
from benchmark.uncertainty import mc_dropout
from benchmark.validate import validate

log = logging.getLogger(__name__)


def prepare(cfg: DictConfig) -> tuple[Task, Splits, CellSpec]:
    """The cheap, I/O-free part: `policy.checkpoint=tK` normalized, every value validated, the
    task and the cell described. Every bad input fails here."""
    normalize_checkpoint(cfg)
    task = make_task(cfg.env)
    splits = validate(cfg, task)
    return task, splits, CellSpec.from_config(cfg)


def normalize_checkpoint(cfg: DictConfig) -> None:
    """`policy.checkpoint=tK` (the env's K-th reward threshold, so one sweep covers envs with
    different thresholds) becomes the rNNN name it stands for; validate checks the rest."""
    OmegaConf.update(cfg, "policy.checkpoint", names.of_config(cfg, check=False))


# ----------------------------------------------------------------------------- inputs
def policy_checkpoint(
    cfg: DictConfig,
    task: Task,
    splits: Splits,
    *,
    train: bool = True,
    log_fn: Callable[[dict], None] | None = None,
) -> Path | None:
    """A checkpoint from elsewhere, else the suite's own cache, trained once if missing (None
    when `train` is False and it is not trained yet). From elsewhere:
    - `policy.path=<file.zip>`: that SB3 PPO zip (loaded only when its pickles build nothing but
      data, or under `policy.trust_pickle=true`);
    - `policy.path=<file.safetensors>`: a bundle's checkpoint, with the policy.json beside it;
    - `policy.path=<dir>`: an exported policy bundle (`python -m benchmark.policy export`) or one
      policy directory of it; `policy.checkpoint` (best, final, rNNN, tK) picks the checkpoint,
      and in a bundle the policy of this recipe, else of `env.name` and `policy.seed`;
    - `policy.source=<hub repo id>` (+ `policy.revision`, a commit to pin it): the same bundle
      from the Hugging Face hub, read from the HF cache first (offline), downloaded only when
      it is not there and HF_HUB_OFFLINE is unset.
    A bundle is only opened for a cell that uses a policy (an SLM-only cell of the same sweep
    gets None)."""
    from benchmark.policy.checkpoints import checkpoint_dir, ensure, match_options, resolve

    source, path = cfg.policy.get("source"), cfg.policy.get("path")
    bundle = source or (path and Path(path).expanduser().is_dir())
    if bundle and not CellSpec.from_config(cfg).uses_policy:
        return None
    if source:
        from benchmark.policy.bundle import bundle_checkpoint, fetch

        return bundle_checkpoint(fetch(str(source), cfg.policy.get("revision")), cfg, splits)
    if path:
        path = Path(path).expanduser()
        if path.is_dir():
            from benchmark.policy.bundle import bundle_checkpoint

            return bundle_checkpoint(path, cfg, splits)
        if not path.is_file():
            raise FileNotFoundError(
                f"policy.path={str(path)!r} does not exist: give an SB3 PPO .zip, a bundle's "
                ".safetensors or an exported policy directory (python -m benchmark.policy export)"
            )
        if path.suffix == ".safetensors":  # a bundle's file: checked against what it records
            from benchmark.policy.bundle import check_recorded

            check_recorded(path)
        return path
    if train:
        return ensure(cfg, task, log_fn=log_fn, splits=splits)
    ckpt_dir = checkpoint_dir(cfg, splits)
    try:
        return resolve(ckpt_dir, str(cfg.policy.checkpoint), **match_options(cfg))
    except Exception:  # noqa: BLE001 - not trained (or not intact): the caller trains
        return None


def model_identity(slm_cfg: Any, make: bool = False, digests: Path | None = None) -> str | None:
    """The weights identity of the consultant a config names, without loading it. A model made
    on first use raises `ModelNotBuilt` while it is not there, unless `make` says to make it.
    `digests`: the results store's digest cache."""
    backend = OmegaConf.to_container(slm_cfg.backend, resolve=True)
    target = get_class(backend.pop("_target_"))
    if make:
        target.make_weights(**backend)
    extra: dict[str, Any] = {"digests": str(digests)} if digests else {}
    return target.weights_identity(**backend, **extra)


def identity_warning(slm_cfg: Any, weights: str | None) -> str | None:
    """The consultant backend's warning that a cell's identity does not follow its model's
    weights (`Consultant.identity_warning`: a served model without a weights identity)."""
    backend = OmegaConf.to_container(slm_cfg.backend, resolve=True)
    target = get_class(backend.pop("_target_"))
    return target.identity_warning(weights, **backend)


def locate_inputs(
    spec: CellSpec,
    cfg: DictConfig,
    checkpoint: Path | None,
    train: bool = False,
    unbuilt: str | None = None,
) -> CellSpec | None:
    """The spec with its inputs' content identity; None when an input it needs does not exist
    yet: a checkpoint (its own, or that of the cell whose study supplies its tau) or a model
    made on first use. Nothing is trained or built unless `train` says so (the job, after
    building the cell's objects); `python -m benchmark.plan` never does. `unbuilt` stands in
    for the identity of a model not built yet (the plan's estimates; never a stored hash)."""
    from benchmark.policy.checkpoints import policy_digest

    digests = Store.of(cfg.paths).digests_dir()
    inputs: dict[str, Any] = {}
    if spec.uses_policy:
        if checkpoint is None:
            return None
        inputs["checkpoint_sha256"] = cached_digest(checkpoint, digests)
        inputs["policy_weights"] = policy_digest(checkpoint, digests)
    if spec.uses_consultant:
        try:
            inputs["model"] = model_identity(cfg.slm, train, digests)
        except ModelNotBuilt:
            if train:  # made just now: not there (a server gone again) is the job's failure
                raise
            if unbuilt is None:
                return None
            inputs["model"] = unbuilt
    located = spec.with_inputs(**inputs)
    if spec.tunes_tau:
        source = shared_tuning_config(cfg)
        if source is None:
            return located.with_inputs(tau_study=located.tuning_key())
        task, splits, source_spec = prepare(source)
        source_ckpt = policy_checkpoint(source, task, splits, train=train)
        source_spec = locate_inputs(source_spec, source, source_ckpt, train, unbuilt)
        if source_spec is None:
            return None
        located = located.with_inputs(tau_study=source_spec.tuning_key())
    return located


def shared_tuning_config(cfg: DictConfig) -> DictConfig | None:
    """`tuning.scope=shared`: the config of the cell whose validation study supplies this
    cell's tau (this config with `tuning.shared`'s overrides; `prompt: NAME` swaps the prompt
    variant). None for `tuning.scope=cell`."""
    if cfg.tuning.scope != "shared":
        return None
    source = copy.deepcopy(cfg)
    shared = OmegaConf.to_container(cfg.tuning.shared, resolve=True)
    for key in sorted(shared, key=lambda k: k.count(".")):  # a group before its keys
        if key == "prompt":
            source.prompt = OmegaConf.load(CONF / "prompt" / f"{shared[key]}.yaml")
        else:
            OmegaConf.update(source, key, shared[key], merge=False)
    source.tuning.scope, source.tuning.shared = "cell", {}
    return source


# ----------------------------------------------------------------------------- evaluation
@dataclass
class Evaluation:
    """The built objects of one cell. `evaluator()` is the one place an Evaluator is made."""

    cfg: DictConfig
    task: Task
    splits: Splits
    spec: CellSpec
    policy: Any = None  # an SB3 policy, None when the gate needs none
    consultant: Any = None
    prompt: Any = None
    checkpoint_path: Path | None = None
    gate_inputs: dict = field(default_factory=dict)  # built for the gate by its trainer
    gate_info: dict | None = None  # what its trainer found (e.g. `degenerate`)
    mc_dropout_fn: Callable[..., Any] = mc_dropout  # Evaluator.mc_dropout_fn

    def gate(self, **gate_args: Any) -> Any:
        """The gate, with `gate_args` replacing settings decided at run time (tuned tau, p)."""
        return self.spec.gate.build(**self.gate_inputs, **gate_args)

    def evaluator(self, **gate_args: Any) -> Evaluator:
        """`gate_args` replace gate settings decided at run time (tuned tau, matched p)."""
        gate = self.spec.gate
        return Evaluator(
            task=self.task,
            gate=self.gate(**gate_args),
            policy=self.policy,
            consultant=self.consultant,
            prompt=self.prompt,
            mc_samples=gate.mc_samples or 0,
            seed=int(self.cfg.seed),
            mc_dropout_fn=self.mc_dropout_fn,
            normalise=gate.normalise,
        )

    def run(
        self, seeds: list[int], mode: str | None = None, progress: Any = None, **gate_args: Any
    ) -> list[dict]:
        mode = mode or str(self.cfg.eval.mode)
        return self.evaluator(**gate_args).run(seeds, mode=mode, progress=progress)

    def test_seeds(self) -> list[int]:
        return self.splits.seeds(str(self.cfg.eval.split), int(self.cfg.eval.n_episodes))

    def tau_range(self) -> tuple[float, float]:
        """gate.tau_range, clipped to log2|A| (the largest total entropy a policy can have) with
        tuning.clip_tau (the suite's); searched as written without it (the paper's [0.1, 2.0])."""
        low, high = self.spec.gate.tau_range
        if self.spec.gate.normalise:  # a normalised entropy's ceiling is 1 in every state
            return float(low), min(float(high), 1.0)
        if not self.cfg.tuning.get("clip_tau", True):
            return float(low), float(high)
        return float(low), min(float(high), math.log2(len(self.task.action_names)))

    def tuning_source(self) -> Evaluation:
        """The evaluation whose validation study supplies the tau: this one, or (with
        `tuning.scope=shared`) the shared cell's, with this one's consultant."""
        if self.spec.inputs.get("tau_study") == self.spec.tuning_key():
            return self  # its own study (tuning.scope=cell, or the shared cell itself)
        source = build(shared_tuning_config(self.cfg), consultant=self.consultant)
        source.spec = locate_inputs(source.spec, source.cfg, source.checkpoint_path, train=True)
        return source

    def tune(
        self, study_dir: Path, on_trial: Callable[[int, dict, dict], None] | None = None
    ) -> tuple[float, list[dict]]:
        """Optuna TPE over tau on the first tuning.n_episodes VALIDATION seeds (the study under
        `study_dir` resumes after a kill). Returns (best tau, one row per trial)."""
        from benchmark.tuning import Objective, calibrate_risk, tune

        tuning = self.cfg.tuning
        seeds = self.splits.seeds(TUNING_SPLIT, int(tuning.n_episodes))
        goal = Objective.from_config(tuning)
        if goal.name == "risk":
            return calibrate_risk(
                self.steps_at,
                study_dir,
                goal=goal,
                tau_range=self.tau_range(),
                seeds=seeds,
            )

        def objective(tau: float, seeds: list[int]) -> tuple[float, float]:
            rows = self.run(seeds, tau=tau)
            steps = sum(r["length"] for r in rows)
            return (
                sum(r["reward"] for r in rows) / len(rows),
                sum(r["queries"] for r in rows) / max(steps, 1),
            )

        return tune(
            objective,
            study_dir,
            tau_range=self.tau_range(),
            n_trials=int(tuning.n_trials),
            seeds=seeds,
            sampler_seed=int(tuning.sampler_seed),
            max_reward=self.task.max_reward,
            on_trial=on_trial,
            goal=goal,
        )

    def steps_at(self, seeds: list[int], tau: float) -> tuple[list[dict], list[dict]]:
        """The episodes on `seeds` with the gate at `tau` and their step records: what the
        risk objective counts missed mistakes on."""
        from benchmark.analysis import StepRecorder

        recorder = StepRecorder()
        rows = self.evaluator(tau=tau).run(seeds, mode=str(self.cfg.eval.mode), on_step=recorder)
        return rows, recorder.records

    def close(self) -> None:
        if self.consultant is not None:
            self.consultant.close()


def build(
    cfg: DictConfig,
    *,
    prepared: tuple[Task, Splits, CellSpec] | None = None,
    policy: Any = None,
    consultant: Any = None,
    log_fn: Callable[[dict], None] | None = None,
) -> Evaluation:
    """Every object of the cell `cfg` describes. Cheap failures come first (a prompt that does
    not fit the env, a missing model or server), then the PPO policy (trained once if missing).
    `policy` / `consultant` reuse objects the caller already has (the bench's short policy)."""
    from benchmark.consultants import make_consultant
    from benchmark.policy import load

    task, splits, spec = prepared or prepare(cfg)
    prompt = None
    if spec.uses_consultant:
        prompt = build_prompt(cfg, task)
        if consultant is None:
            consultant = make_consultant(cfg.slm, cfg.paths)
    checkpoint = None
    try:
        if spec.uses_policy and policy is None:
            checkpoint = policy_checkpoint(cfg, task, splits, log_fn=log_fn)
            device = cfg.policy.get("device", "cpu")
            trust = bool(cfg.policy.get("trust_pickle", False))
            policy = load(checkpoint, task=task, device=device, trust_pickle=trust).policy
        gate_inputs, gate_info = {}, None
        if spec.gate.cls.needs_training:  # its declared trainer builds what it needs
            if checkpoint is None:
                raise ValueError(
                    f"gate={spec.gate.name} trains on the policy's checkpoint file: pass none "
                    "as `policy`"
                )
            train = get_method(str(spec.gate.cls.trainer))
            gate_inputs, gate_info = train(cfg, task, policy, checkpoint)
    except BaseException:
        if consultant is not None:
            consultant.close()
        raise
    return Evaluation(
        cfg=cfg,
        task=task,
        splits=splits,
        spec=spec,
        policy=policy if spec.uses_policy else None,
        consultant=consultant,
        prompt=prompt,
        checkpoint_path=checkpoint,
        gate_inputs=gate_inputs,
        gate_info=gate_info,
    )


def build_prompt(cfg: DictConfig, task: Task) -> Any:
    """The prompt variant of `cfg`, checked against the task (a mismatch fails before training)."""
    prompt = instantiate(cfg.prompt)
    prompt.check(task)
    return prompt


def matched_query_rate(cfg: DictConfig, spec: CellSpec) -> float:
    """`gate.p=match`: the pooled IR of the completed entropy-gate cell that differs from this
    one only in its gate (same N; tau = `gate.match_tau`, default the tuned `auto`), so the
    random gate spends the same query budget."""
    from benchmark.tuning import Objective

    same = {k: v for k, v in spec.identity.items() if k not in ("gate", "tuning")}
    want_objective = Objective.from_config(cfg.tuning).identity()
    want_tau = str(spec.gate.match_tau or TAU_AUTO)
    want_n = cfg.gate.get("mc_samples")
    for cell in Store.of(cfg.paths).cells():
        if cell.gate_class is not EntropyGate:  # exactly: not its subclass EpistemicGate
            continue
        gate = cell.identity.get("gate", {})
        if str(gate.get("tau")) != want_tau:
            continue
        if want_n is not None and gate.get("mc_samples") != want_n:
            continue
        identity = cell.identity
        if Objective.from_config(identity.get("tuning") or {}).identity() != want_objective:
            continue
        if {k: v for k, v in identity.items() if k not in ("gate", "tuning")} != same:
            continue
        done = cell.read()
        if done is not None:
            return float(done[0]["ir_pooled"])
    raise ValueError(
        f"gate.p=match needs the completed gate=entropy cell (tau={want_tau}, mc_samples={want_n}) "
        "with the same env, policy, slm, prompt and eval settings under paths.root; run it first "
        "(in a sweep, list entropy before random) or set gate.p to a number"
    )
