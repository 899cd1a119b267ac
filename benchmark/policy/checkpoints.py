"""Find-or-train PPO checkpoints, cached by a hash of everything that shapes the weights.

`<paths.checkpoints>/<env.name>-<hash>/` holds final/best/rNNN zips, their JSON metas, curve.csv
and a COMPLETE manifest (sha256 of every zip) written last and atomically: a directory without
it is an interrupted training and is set aside and retrained; a zip whose hash disagrees with the
manifest is refused. `benchmark.store.build_once` makes concurrent jobs train once."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from sb3_contrib import RecurrentPPO
from stable_baselines3 import PPO
from stable_baselines3.common.utils import ConstantSchedule

from benchmark.envs.base import Task, env_identity
from benchmark.policy import names, portable, resume, sb3zip
from benchmark.policy.errors import CheckpointError
from benchmark.policy.network import DROPOUT_PLACEMENTS
from benchmark.policy.provenance import system_info
from benchmark.policy.train import TRAINING_VERSION, as_dict, train
from benchmark.seeds import DEFAULT_SPLITS, Splits
from benchmark.settings import CHECKPOINT, added, execution, identity, identity_of, old_values
from benchmark.store import Store, build_once, cached_digest, file_sha256, write_json_atomic

log = logging.getLogger(__name__)

MARKER = "COMPLETE"


@dataclass(frozen=True)
class PolicySettings:
    """The roles of the `policy` keys other than the recipe's numbers (learning rate, steps, PPO
    kwargs: undeclared, so all in the checkpoint's hash). Which saved checkpoint is loaded, and
    a policy from elsewhere, name no checkpoint directory; keys added after checkpoints were
    cached stay out at the value those were trained with (the official recipe sets others)."""

    checkpoint: str = identity("final", outside=(CHECKPOINT,))  # which saved file, not weights
    match_success: Any = identity(None, outside=(CHECKPOINT,))  # what checkpoint=match picks
    match_tolerance: float = identity(0.1, outside=(CHECKPOINT,))  # whether it refuses its pick
    source: Any = identity(None, outside=(CHECKPOINT,))  # a policy from elsewhere (hub)
    revision: Any = identity(None, outside=(CHECKPOINT,))
    recipe: str = identity("suite", outside=(CHECKPOINT,))  # a name: its values are hashed
    torch_threads: int = identity(1)  # in every checkpoint's hash since the first
    path: Any = execution(None)  # where a policy from elsewhere lies
    device: str = execution("cpu")
    progress_bar: bool = execution(True)
    resume_every_steps: int = execution(50_000)
    env_workers: Any = execution("auto")  # where the envs step, not what they return
    trust_pickle: bool = execution(False)  # whether a zip's pickles may run, not what trains
    dropout_placement: str = added("after_activation", old="after_activation")
    image_scale: Any = added(None, old=None)
    train_seed_pool: Any = added(None, old=None)
    eval_seeds: str = added("fixed", old="fixed")
    head: str = added("slots", old="slots")

    @staticmethod
    def check_config(policy: Any) -> None:
        """policy.image_scale (the released code's raw image / 10) and policy.dropout_placement
        before any work, as every other policy value (the network would refuse them only when a
        training starts)."""
        scale = policy.get("image_scale")
        number = isinstance(scale, int | float) and not isinstance(scale, bool)
        if scale is not None and not (number and math.isfinite(scale) and scale > 0):
            raise ValueError(
                f"policy.image_scale={scale!r} is invalid: allowed a number > 0, or null"
            )
        placement = policy.get("dropout_placement", DROPOUT_PLACEMENTS[0])
        if placement not in DROPOUT_PLACEMENTS:
            raise ValueError(
                f"policy.dropout_placement={placement!r} is invalid: "
                f"allowed {list(DROPOUT_PLACEMENTS)}"
            )


# read from the declarations (older results roots are migrated with these)
ADDED_POLICY_KEY_DEFAULTS = old_values(PolicySettings)


def recipe_payload(cfg: DictConfig) -> dict[str, Any]:
    """What of the env and policy configs shapes the trained weights (a key added later stays out
    at the value that trains what every checkpoint before it trained)."""
    policy = identity_of(PolicySettings, as_dict(cfg.policy), CHECKPOINT)
    task = env_identity({"task": OmegaConf.to_container(cfg.env.task, resolve=True)})["task"]
    return {
        "env": {
            "task": task,
            "net_arch": OmegaConf.to_container(cfg.env.net_arch, resolve=True),
            "thresholds": OmegaConf.to_container(cfg.env.thresholds, resolve=True),
        },
        "policy": policy,
    }


def short_hash(payload: dict[str, Any]) -> str:
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def config_hash(cfg: DictConfig, splits: Splits = DEFAULT_SPLITS) -> str:
    """Short sha256 of the env task, net_arch, thresholds, the policy config (minus keys that do
    not shape the weights), the validation split that picks `best` and the thresholds, and the
    training code's version."""
    payload = recipe_payload(cfg)
    payload["validation"] = splits.bounds("validation")
    payload["training_version"] = TRAINING_VERSION
    return short_hash(payload)


def checkpoint_dir(cfg: DictConfig, splits: Splits = DEFAULT_SPLITS) -> Path:
    """`<paths.checkpoints>/<env.name>-<hash>` (benchmark.store)."""
    return Store.of(cfg.paths).checkpoint_dir(str(cfg.env.name), config_hash(cfg, splits))


def file_name(name: str) -> str:
    """`name` when it names a checkpoint file (final, best, rNNN); tK must be resolved first
    (benchmark.build.normalize_checkpoint)."""
    parsed = names.parse(name)
    if not parsed.is_file_name:
        raise ValueError(
            f"policy.checkpoint={name!r} names the env's K-th threshold, not a file: resolve it "
            "to its rNNN name first (benchmark.build.normalize_checkpoint)"
        )
    return parsed.name


def manifest(ckpt_dir: Path) -> dict[str, Any] | None:
    """The COMPLETE manifest ({"checkpoints": {name: sha256}}), None when absent or corrupt."""
    try:
        return json.loads((ckpt_dir / MARKER).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def weights_suffix(recorded: dict[str, Any]) -> str:
    """The file suffix of a complete directory's checkpoints: `.zip` (the cache's, and bundles
    before safetensors), or what its manifest names (`weights`: a bundle's `.safetensors`)."""
    return portable.SUFFIX if recorded.get("weights") == "safetensors" else ".zip"


def intact(ckpt_dir: Path) -> bool:
    """Complete (marker written after the final model) and every checkpoint file still matches
    its sha256."""
    recorded = manifest(ckpt_dir)
    if recorded is None:
        return False
    suffix = weights_suffix(recorded)
    return all(
        (ckpt_dir / f"{n}{suffix}").is_file() and file_sha256(ckpt_dir / f"{n}{suffix}") == h
        for n, h in recorded["checkpoints"].items()
    )


def ensure_dir(
    cfg: DictConfig,
    task: Task | None = None,
    log_fn: Callable[[dict[str, Any]], None] | None = None,
    splits: Splits = DEFAULT_SPLITS,
) -> tuple[Path, bool]:
    """The complete checkpoint directory for `cfg`, training it first if needed (once across
    processes). Returns (directory, whether this call trained)."""
    ckpt_dir = checkpoint_dir(cfg, splits)

    def make(work: Path) -> None:
        nonlocal task
        if task is None:
            from benchmark.envs import make_task

            task = make_task(cfg.env)
        policy_cfg = {k: v for k, v in as_dict(cfg.policy).items() if k != "checkpoint"}
        write_json_atomic(
            work / "config.json",
            {
                "env": OmegaConf.to_container(cfg.env, resolve=True),
                "policy": policy_cfg,
                "validation": splits.bounds("validation"),
                "training_version": TRAINING_VERSION,
            },
            sort_keys=False,
        )
        # the machine and versions, for policy bundles (benchmark.policy.bundle)
        write_json_atomic(work / "system.json", system_info(), sort_keys=False)
        log.info("training PPO for %s into %s", cfg.env.name, ckpt_dir)
        state = resume.state_path(ckpt_dir)
        try:
            train(task, cfg.policy, work, log_fn=log_fn, splits=splits, resume_path=state)
        except BaseException as e:  # stopped or failed: what it wrote is in the saved state
            shutil.rmtree(work, ignore_errors=True)  # now: deliver() may end the process
            if isinstance(e, resume.Interrupted):  # end the process as the signal would have
                log.warning("%s", e)
                e.deliver()
            raise
        files = {p.stem: file_sha256(p) for p in sorted(work.glob("*.zip"))}
        write_json_atomic(
            work / MARKER, {"pid": os.getpid(), "checkpoints": files}, sort_keys=False
        )

    # trained in a private directory and published whole with one rename (benchmark.store)
    trained = build_once(ckpt_dir, make, intact)
    resume.remove(resume.state_path(ckpt_dir))  # complete: its resumable state is done
    return ckpt_dir, trained


def ensure(
    cfg: DictConfig,
    task: Task | None = None,
    log_fn: Callable[[dict[str, Any]], None] | None = None,
    splits: Splits = DEFAULT_SPLITS,
) -> Path:
    """Path of the checkpoint `cfg.policy.checkpoint` (final | best | rNNN), training once if the
    directory for this env + policy config is not complete yet. `task` defaults to
    `benchmark.envs.make_task(cfg.env)`."""
    name = str(cfg.policy.checkpoint)
    if names.parse(name).kind != "match":
        file_name(name)
    ckpt_dir, _ = ensure_dir(cfg, task, log_fn, splits)
    return resolve(ckpt_dir, name, **match_options(cfg))


def match_options(cfg: DictConfig) -> dict[str, Any]:
    """What `resolve` needs of a job config for `policy.checkpoint=match`: the target, the
    tolerance (names.MATCH_TOLERANCE when the key is absent) and the env the refusal names."""
    return {
        "match_success": cfg.policy.get("match_success"),
        "match_tolerance": cfg.policy.get("match_tolerance", names.MATCH_TOLERANCE),
        "env": str(cfg.env.name),
    }


def resolve(
    ckpt_dir: Path,
    name: str,
    remedy: str | None = None,
    match_success: float | None = None,
    match_tolerance: float | None = None,
    env: str | None = None,
) -> Path:
    """The verified checkpoint file for `name` in a complete directory (`match`: the checkpoint
    `matched` picks for `match_success`, refused when further than `match_tolerance`). `remedy`:
    what to do about a corrupt zip when it is not the suite's to retrain (a bundle's)."""
    match = names.parse(name).kind == "match"
    if not match:
        file_name(name)
    recorded = manifest(ckpt_dir)
    if recorded is None:
        raise CheckpointError(f"{ckpt_dir} is not a complete checkpoint directory (no {MARKER})")
    if match:
        tolerance = None if match_tolerance is None else names.match_tolerance(match_tolerance)
        name = matched(ckpt_dir, names.match_target(match_success), tolerance, env)
    files: dict[str, str] = recorded["checkpoints"]
    if name not in files:
        available = ", ".join(sorted(files, key=names.order)) or "none"
        raise CheckpointError(
            f"policy.checkpoint={name} does not exist for {ckpt_dir.name}: available {available}"
            " (a reward threshold is saved only if validation reached it)"
        )
    path = ckpt_dir / f"{name}{weights_suffix(recorded)}"
    if not path.is_file() or file_sha256(path) != files[name]:
        raise CheckpointError(
            f"{path} is missing or does not match the sha256 recorded in {MARKER} (corrupt or "
            f"truncated): {remedy or f'delete {ckpt_dir} to retrain'}"
        )
    return path


def validation_scores(ckpt_dir: Path) -> dict[str, dict[str, Any]]:
    """Per checkpoint of a complete directory, the validation record saved with it (`<name>.json`:
    timesteps, eval_reward, eval_success, taken when it was saved); checkpoints without one (a
    policy from elsewhere) are left out."""
    out = {}
    for name in (manifest(ckpt_dir) or {}).get("checkpoints", {}):
        try:
            row = json.loads((ckpt_dir / f"{name}.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            continue
        success = row.get("eval_success")
        if isinstance(success, (int, float)) and not isinstance(success, bool):
            out[name] = row
    return out


def matched(
    ckpt_dir: Path, target: float, tolerance: float | None = None, env: str | None = None
) -> str:
    """`policy.checkpoint=match`: the saved checkpoint (final, best, rNNN) whose validation
    success is nearest `target`; a tie goes to the one saved earlier in training. Why: a paper's
    PPO row may be weaker than this suite's training, and ASK's headroom is measured against a
    PPO of the paper's strength; the saved checkpoints are the only weights there are. With
    `tolerance`, a nearest one further than that from `target` is refused (CheckpointError): a
    row labelled at the paper's strength that is not would mislead more than no row."""
    scores = validation_scores(ckpt_dir)
    if not scores:
        raise CheckpointError(
            f"policy.checkpoint=match: no checkpoint in {ckpt_dir} has a validation record "
            "(<name>.json with eval_success, written by training): name a checkpoint "
            "(final, best, rNNN) instead"
        )

    def distance(name: str) -> tuple:
        row = scores[name]
        return (abs(float(row["eval_success"]) - target), int(row.get("timesteps", 0)), name)

    name = min(scores, key=distance)
    success = float(scores[name]["eval_success"])
    # with room for rounding: 0.55 - 0.45 is 0.10000000000000003
    if tolerance is not None and abs(success - target) > tolerance + 1e-9:
        advice = (  # stronger than the target: earlier checkpoints; weaker: more training
            "save earlier checkpoints (lower policy.thresholds)"
            if success > target
            else "train longer (policy.total_timesteps)"
        )
        raise CheckpointError(
            f"policy.checkpoint=match refused for {env or ckpt_dir.name}: no saved checkpoint's "
            f"validation success is within policy.match_tolerance={tolerance:g} of "
            f"policy.match_success={target:g}; the nearest is {name} at {success:.3f} (of "
            f"{len(scores)} in {ckpt_dir}): {advice}, or raise policy.match_tolerance"
        )
    return name


def match_line(path: Path, target: float, tolerance: float | None = None) -> str:
    """One line saying what `policy.checkpoint=match` picked: the file and its validation
    success beside the target (the paper's figure), so a log shows how near it is."""
    try:
        success = f"{float(json.loads(path.with_suffix('.json').read_text())['eval_success']):.3f}"
    except (OSError, ValueError, KeyError, TypeError):
        success = "unknown"
    within = "" if tolerance is None else f", tolerance {tolerance:g}"
    return (
        f"policy.checkpoint=match: {path.stem} in {path.parent.name}, validation success "
        f"{success} beside the target policy.match_success={target:g}{within}"
    )


def _algorithm_of(path: Path) -> type[PPO] | type[RecurrentPPO]:
    """RecurrentPPO for a zip whose saved policy kwargs have an LSTM, else PPO: the policy class
    in the zip is a pickle, its kwargs are plain JSON."""
    with zipfile.ZipFile(path) as zf:
        data = json.loads(zf.read("data")) if "data" in zf.namelist() else {}
    kwargs = data.get("policy_kwargs")
    return RecurrentPPO if isinstance(kwargs, dict) and "lstm_hidden_size" in kwargs else PPO


# replaced when loading: the schedules are only needed to keep training (never unpickled)
REPLACED_ON_LOAD = {"lr_schedule": ConstantSchedule(0.0), "learning_rate": 0.0}


def check_pickles(path: Path, trust_pickle: bool = False) -> None:
    """Refuse a zip whose data holds pickles that would run more than the building of data (a
    `__reduce__` payload, a class pickled by value) when SB3 unpickles them, unless
    `policy.trust_pickle=true` (benchmark.policy.sb3zip reads them without running them)."""
    try:
        unsafe = sb3zip.unsafe_entries(sb3zip.read_data(path), skip=tuple(REPLACED_ON_LOAD))
    except (zipfile.BadZipFile, KeyError, ValueError) as e:
        raise CheckpointError(f"cannot read the data of {path}: {type(e).__name__}: {e}") from e
    if not unsafe:
        return
    found = "; ".join(f"{key}: {', '.join(what[:3])}" for key, what in sorted(unsafe.items()))
    if trust_pickle:
        log.warning(
            "policy.trust_pickle=true: loading %s, whose pickles run code (%s)", path, found
        )
        return
    raise CheckpointError(
        f"refused to load {path}: its SB3 data holds pickles that would run code when loaded "
        f"({found}); an SB3 zip from the suite, SB3 or sb3-contrib holds only classes, spaces "
        "and arrays. If you trust where this file came from, set policy.trust_pickle=true"
    )


def load(
    path: str | Path, device: str = "cpu", task: Task | None = None, trust_pickle: bool = False
) -> PPO:
    """Load a PPO (or RecurrentPPO) checkpoint for inference; with `task`, check its
    observation/action spaces. A bundle's `.safetensors` is rebuilt from the suite's classes with
    the policy.json beside it (`portable`, no pickle); a zip whose pickles would run code is
    refused (`check_pickles`) unless `trust_pickle`."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint file at {path}")
    if path.suffix == portable.SUFFIX:  # a bundle's: rebuilt from the suite's classes
        model = portable.load(path, device=device)
    elif not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path} is not a valid zip (truncated or corrupt checkpoint)")
    else:
        check_pickles(path, trust_pickle)
        try:
            model = _algorithm_of(path).load(path, device=device, custom_objects=REPLACED_ON_LOAD)
        except Exception as e:  # zip/pickle/torch errors all mean an unusable file
            raise CheckpointError(f"cannot load checkpoint {path}: {type(e).__name__}: {e}") from e
    if task is not None:
        env = task.validation_env()
        try:
            obs_space, act_space = env.observation_space, env.action_space
        finally:
            env.close()
        if model.observation_space != obs_space or model.action_space != act_space:
            raise CheckpointError(
                f"checkpoint {path} does not fit task {task.name!r}: checkpoint spaces "
                f"obs={model.observation_space}, act={model.action_space}; task spaces "
                f"obs={obs_space}, act={act_space}"
            )
    return model


# ----------------------------------------------------------------------------- identity
POLICY_DIGEST = "policy-weights-v1"  # what `policy_digest` computes (the digest cache's kind)


def policy_digest(path: str | Path, digests: str | Path | None = None) -> str:
    """A PPO policy's identity: its weights (the tensors of the zip's policy.pth and
    pytorch_variables.pth) and the settings that load them (the policy class, its kwargs, the
    observation and action spaces). Not the zip's bytes: they also hold pickled schedules with
    object addresses, the training's start time and counters, so two trainings with identical
    weights had different SHA-256s and named different cells. Cached in the results store's
    digest cache (benchmark.store.cached_digest) by the file's path, size, mtime and inode. A
    bundle's `.safetensors` and its policy.json give the digest of the zip they were made from
    (`portable.digest`)."""
    if Path(path).suffix == portable.SUFFIX:  # not cached: policy.json beside it is part of it
        return portable.digest(Path(path))
    return cached_digest(path, digests, _policy_digest, kind=POLICY_DIGEST)


def _policy_digest(path: Path) -> str:
    """The digest: the tensors, loaded with torch's weights_only (no pickle runs), then the
    settings as `sb3zip` reads them from the zip's data JSON (never unpickled: a class is named by
    the module and name its pickle records, a space by its dtype, shape and bounds' bytes). The
    same digest the identity computed when it unpickled those settings, so cells keep their
    hashes (tests/policy/test_sb3zip.py runs both side by side)."""
    import io

    import torch

    if not zipfile.is_zipfile(path):  # not a policy: named by its bytes (loading it fails)
        return "file-sha256:" + file_sha256(path)
    h = hashlib.sha256()
    try:
        data = sb3zip.read_data(path)
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            for member in ("policy.pth", "pytorch_variables.pth"):
                if member not in names:
                    continue
                state = torch.load(
                    io.BytesIO(zf.read(member)), map_location="cpu", weights_only=True
                )
                portable.hash_tensors(h, member, state)
    except Exception as e:  # zip/JSON/torch errors all mean an unusable file
        raise CheckpointError(f"cannot read the policy in {path}: {type(e).__name__}: {e}") from e
    settings = sb3zip.settings(data, SETTINGS_KEYS)
    h.update(json.dumps(settings, sort_keys=True).encode())
    return h.hexdigest()


SETTINGS_KEYS = ("policy_class", "policy_kwargs", "observation_space", "action_space")
