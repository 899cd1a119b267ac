"""Portable policies: a PPO policy's weights as safetensors and what rebuilds it as plain JSON.

An SB3 zip holds pickles, and loading one runs them (`checkpoints.check_pickles` guards that path).
A policy bundle carries instead, per checkpoint, `<name>.safetensors` (the policy's state dict:
tensors and their names, nothing else) and, once per policy, `policy.json`:

    format              SETTINGS_FORMAT
    policy_class        one of the suite's policy classes, by name (POLICY_CLASSES)
    policy_kwargs       plain JSON; a class-valued kwarg (a features extractor) by name, from
                        CLASS_KWARGS
    observation_space   the space as plain fields: {"space": "Box", "dtype", "shape", "low",
    action_space        "high"}, {"space": "Discrete", "n", "start", "dtype"}, MultiDiscrete,
                        MultiBinary, Dict
    recipe              what it was trained with (the recipe name and hash; config.json has it all)

Loading builds the algorithm and policy from the suite's own classes, as SB3's own `load` does
after it unpickled them, and loads the tensors into it: no name in either file is imported and
nothing is unpickled. The identity (`digest`) is the one `checkpoints.policy_digest` gives the zip
the files were made from (the same tensors, the same settings' canonical JSON), so a cell
evaluated from a bundle keeps the hash of the cell evaluated from the cache that trained it."""

from __future__ import annotations

import hashlib
import io
import json
import math
import zipfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from sb3_contrib import RecurrentPPO
from stable_baselines3 import PPO

from benchmark import weights
from benchmark.policy import sb3zip
from benchmark.policy.errors import CheckpointError
from benchmark.policy.network import (
    CommandScoringPolicy,
    DropoutActorCriticPolicy,
    MaskedDropoutPolicy,
    MinigridFeaturesExtractor,
    RawImageScale,
    RecurrentDropoutPolicy,
)

SUFFIX = ".safetensors"
SETTINGS = "policy.json"  # beside the .safetensors files of one policy
SETTINGS_FORMAT = "ask-benchmark-policy/1"
SPACE_KEYS = ("observation_space", "action_space")
MEMBER = "policy.pth"  # the zip member the tensors come from: named so in the digest
MAX_VALUES = 10_000_000  # a space's bounds beyond this are refused, not allocated


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# the classes a policy.json may name, and the algorithm that holds each policy class
POLICY_CLASSES: dict[str, tuple[type, type]] = {
    _name(policy): (algo, policy)
    for algo, policy in (
        (PPO, DropoutActorCriticPolicy),
        (PPO, MaskedDropoutPolicy),
        (PPO, CommandScoringPolicy),
        (RecurrentPPO, RecurrentDropoutPolicy),
    )
}
CLASS_KWARGS: dict[str, dict[str, type]] = {
    "features_extractor_class": {_name(c): c for c in (RawImageScale, MinigridFeaturesExtractor)},
}
SPACES: dict[str, type] = {
    c.__name__: c
    for c in (
        gym.spaces.Box,
        gym.spaces.Discrete,
        gym.spaces.MultiDiscrete,
        gym.spaces.MultiBinary,
        gym.spaces.Dict,
    )
}


def settings_path(weights: Path) -> Path:
    return Path(weights).with_name(SETTINGS)


# ----------------------------------------------------------------------------- tensors
def hash_tensors(h: Any, member: str, state: dict[str, torch.Tensor]) -> None:
    """Feed a state dict into the policy digest: per key in order, its name, dtype and shape,
    then its bytes (the zip's and the safetensors' digests must be the same bytes)."""
    for key in sorted(state):
        t = state[key].detach().cpu().contiguous()
        h.update(json.dumps([member, key, str(t.dtype), list(t.shape)]).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a .safetensors file (a header of names, dtypes and offsets, then raw bytes:
    nothing runs); CheckpointError naming it when it is not one."""
    try:
        return load_file(path, device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(
            f"cannot read the weights in {path}: {type(e).__name__}: {e} (not a safetensors "
            "file, or truncated)"
        ) from e


# ----------------------------------------------------------------------------- spaces
def _array_json(a: np.ndarray) -> Any:
    """Bounds as JSON: one number when every value is the same (byte for byte), else a flat list;
    an infinite bound as the string "inf" or "-inf"."""
    a = np.asarray(a)

    def number(v: Any) -> Any:
        v = v.item()
        return v if not isinstance(v, float) or math.isfinite(v) else str(v)

    flat = a.reshape(-1)
    if flat.size and np.full_like(flat, flat[0]).tobytes() == flat.tobytes():
        return number(flat[0])
    return [number(v) for v in flat]


def _array_from_json(value: Any, dtype: np.dtype, shape: tuple[int, ...], where: str) -> np.ndarray:
    values = value if isinstance(value, list) else [value]
    n = int(np.prod(shape, dtype=np.int64))
    if isinstance(value, list) and len(values) != n:
        raise CheckpointError(f"{where} has {len(values)} values; its shape {list(shape)} has {n}")
    ok = (int, float) if dtype.kind == "f" else (int,)
    numbers = []
    for v in values:
        if dtype.kind == "f" and v in ("inf", "-inf"):
            v = float(v)
        if isinstance(v, bool) or not isinstance(v, ok):
            raise CheckpointError(f"{where} holds {v!r}: expected {dtype} numbers")
        numbers.append(v)
    array = np.asarray(numbers, dtype=dtype)
    return (
        np.full(shape, array[0], dtype=dtype)
        if not isinstance(value, list)
        else array.reshape(shape)
    )


def space_json(space: Any, where: str) -> dict[str, Any]:
    """A space read from a zip (`sb3zip.Obj`) as plain fields; CheckpointError naming a space
    kind the bundle format does not carry."""
    kind = space.cls.name if isinstance(space, sb3zip.Obj) else None
    module = space.cls.module if isinstance(space, sb3zip.Obj) else ""
    if kind not in SPACES or not module.startswith("gymnasium.spaces."):
        what = space.cls if isinstance(space, sb3zip.Obj) else getattr(space, "what", space)
        raise CheckpointError(
            f"{where} is {what}: a bundle carries the gymnasium spaces {', '.join(SPACES)}"
        )
    s = space.state
    if kind == "Dict":
        spaces = s["spaces"]
        return {
            "space": kind,
            "spaces": {k: space_json(v, f"{where}.{k}") for k, v in spaces.items()},
        }
    out: dict[str, Any] = {"space": kind, "dtype": str(s["dtype"])}
    if kind == "Box":
        out.update(shape=list(s["_shape"]), low=_array_json(s["low"]), high=_array_json(s["high"]))
    elif kind == "Discrete":
        out.update(n=int(s["n"]), start=int(s["start"]))
    elif kind == "MultiDiscrete":
        out.update(nvec=np.asarray(s["nvec"]).tolist(), start=np.asarray(s["start"]).tolist())
    else:  # MultiBinary: n an int or a shape
        n = s["n"]
        out = {"space": kind, "n": int(n) if np.ndim(n) == 0 else [int(v) for v in n]}
    return out


def space_of(fields: Any, where: str) -> gym.Space:
    """The gymnasium space `fields` (space_json's) describes, built by the suite from one of
    SPACES; CheckpointError naming the field that is not what it should be."""
    if not isinstance(fields, dict) or fields.get("space") not in SPACES:
        got = fields.get("space") if isinstance(fields, dict) else fields
        raise CheckpointError(f"{where} is {got!r}: allowed spaces {', '.join(SPACES)}")
    kind = fields["space"]
    try:
        if kind == "Dict":
            spaces = fields.get("spaces")
            if not isinstance(spaces, dict):
                raise CheckpointError(f"{where}.spaces is {spaces!r}: a JSON object of spaces")
            return gym.spaces.Dict({k: space_of(v, f"{where}.{k}") for k, v in spaces.items()})
        if kind == "MultiBinary":
            n = fields.get("n")
            return gym.spaces.MultiBinary(tuple(n) if isinstance(n, list) else n)
        dtype = _dtype(fields.get("dtype"), f"{where}.dtype")
        if kind == "Discrete":
            return gym.spaces.Discrete(fields["n"], start=fields.get("start", 0), dtype=dtype)
        if kind == "MultiDiscrete":
            nvec = np.asarray(fields["nvec"], dtype=dtype)
            return gym.spaces.MultiDiscrete(nvec, dtype=dtype, start=fields.get("start"))
        shape = fields.get("shape")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise CheckpointError(f"{where}.shape is {shape!r}: a list of sizes")
        if int(np.prod(shape, dtype=np.float64)) > MAX_VALUES:
            raise CheckpointError(f"{where}.shape {shape} has more than {MAX_VALUES} values")
        low = _array_from_json(fields.get("low"), dtype, tuple(shape), f"{where}.low")
        high = _array_from_json(fields.get("high"), dtype, tuple(shape), f"{where}.high")
        return gym.spaces.Box(low, high, shape=tuple(shape), dtype=dtype)
    except CheckpointError:
        raise
    except (TypeError, ValueError, KeyError, OverflowError) as e:
        raise CheckpointError(f"{where} is not a valid {kind}: {type(e).__name__}: {e}") from e


def _dtype(text: Any, where: str) -> np.dtype:
    try:
        dtype = np.dtype(str(text))
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "biuf" or not isinstance(text, str):
        raise CheckpointError(f"{where} is {text!r}: a numeric numpy dtype (float32, int64, ...)")
    return dtype


def canonical_space(space: gym.Space) -> dict[str, Any]:
    """A live space as the policy identity names it: `sb3zip.Canon.space` of the same space read
    from a zip (class, dtype, shape, the SHA-256 of its n/start/low/high/nvec bytes)."""
    out: dict[str, Any] = {"space": _name(type(space)), "dtype": str(space.dtype)}
    out["shape"] = list(space.shape) if space.shape is not None else None
    for attr in ("n", "start", "low", "high", "nvec"):
        if hasattr(space, attr):
            array = np.asarray(getattr(space, attr))
            out[attr] = hashlib.sha256(array.tobytes()).hexdigest()[:16]
    if isinstance(space, gym.spaces.Dict):
        out["spaces"] = {str(k): canonical_space(v) for k, v in space.spaces.items()}
    return out


# ----------------------------------------------------------------------------- settings
def settings_of_zip(path: Path) -> dict[str, Any]:
    """policy.json's fields (but `recipe`) for an SB3 zip of the suite, read without unpickling;
    CheckpointError naming what is not the suite's (a policy class elsewhere, a pickled call)."""
    data = sb3zip.read_data(path)
    policy_class = sb3zip.decoded(data.get("policy_class"))
    if not isinstance(policy_class, sb3zip.Ref) or str(policy_class) not in POLICY_CLASSES:
        what = getattr(policy_class, "what", policy_class)
        raise CheckpointError(
            f"cannot export {path}: its policy_class is {what}, not one of the suite's policy "
            f"classes ({', '.join(POLICY_CLASSES)})"
        )
    canon = sb3zip.Canon()
    raw = sb3zip.decoded(data.get("policy_kwargs") or {})
    kwargs = canon(raw)
    refs = {
        k for k, v in (raw.items() if isinstance(raw, dict) else ()) if isinstance(v, sb3zip.Ref)
    }
    bad = sorted(f"{k}={kwargs[k]}" for k in refs if str(kwargs[k]) not in CLASS_KWARGS.get(k, {}))
    if canon.opaque or not isinstance(kwargs, dict) or bad:
        raise CheckpointError(
            f"cannot export {path}: its policy_kwargs hold {', '.join(bad or canon.opaque)}, "
            f"not plain values or the classes the suite passes ({_allowed_kwargs()})"
        )
    out = {"format": SETTINGS_FORMAT, "policy_class": str(policy_class), "policy_kwargs": kwargs}
    for key in SPACE_KEYS:
        try:
            out[key] = space_json(sb3zip.decoded(data.get(key)), f"{path}: {key}")
        except (KeyError, TypeError, ValueError, AttributeError) as e:  # a state it lacks
            raise CheckpointError(
                f"cannot export {path}: its {key} is not a space this format carries "
                f"({type(e).__name__}: {e})"
            ) from e
    return out


def _allowed_kwargs() -> str:
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in CLASS_KWARGS.items())


def read_settings(weights: Path) -> dict[str, Any]:
    """policy.json beside `weights`, checked for its shape (not yet for its classes)."""
    path = settings_path(weights)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(
            f"{path} is missing: the weights {Path(weights).name} are loaded with the settings "
            f"in {SETTINGS} beside them"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path} is corrupt (not JSON): {e}") from e
    if not isinstance(data, dict) or data.get("format") != SETTINGS_FORMAT:
        raise CheckpointError(
            f"{path} is not a policy's settings (format {SETTINGS_FORMAT!r} expected, got "
            f"{data.get('format') if isinstance(data, dict) else data!r})"
        )
    if not isinstance(data.get("policy_class"), str) or not isinstance(
        data.get("policy_kwargs"), dict
    ):
        raise CheckpointError(f"{path} needs policy_class (a name) and policy_kwargs (an object)")
    return data


def _classes(settings: dict[str, Any], path: Path) -> tuple[type, type, dict[str, Any]]:
    """(algorithm, policy class, kwargs with their classes) of settings, each from the
    allow-lists; CheckpointError naming a class that is not there."""
    name = settings["policy_class"]
    if name not in POLICY_CLASSES:
        raise CheckpointError(
            f"refused to load {path}: {settings_path(path).name} names the policy class "
            f"{name!r}; a bundle's policy is rebuilt from the suite's own classes only: "
            f"{', '.join(POLICY_CLASSES)}"
        )
    algo, policy_class = POLICY_CLASSES[name]
    kwargs = dict(settings["policy_kwargs"])
    for key, allowed in CLASS_KWARGS.items():
        if key in kwargs:
            if kwargs[key] not in allowed:
                raise CheckpointError(
                    f"refused to load {path}: {settings_path(path).name} names {key}="
                    f"{kwargs[key]!r}; allowed: {', '.join(allowed)}"
                )
            kwargs[key] = allowed[kwargs[key]]
    return algo, policy_class, kwargs


# ----------------------------------------------------------------------------- export
def write(zip_path: Path, out: Path) -> dict[str, Any]:
    """`out` (.safetensors): the policy tensors of the SB3 zip `zip_path`, read with torch's
    weights_only; returns its settings (settings_of_zip). Each tensor is stored on its own (a
    features extractor shared by actor and critic is three names of one tensor in the zip)."""

    def tensors_of(zf: zipfile.ZipFile, member: str) -> dict[str, torch.Tensor]:
        return torch.load(io.BytesIO(zf.read(member)), map_location="cpu", weights_only=True)

    extra = "pytorch_variables.pth"
    try:
        settings = settings_of_zip(zip_path)
        with zipfile.ZipFile(zip_path) as zf:
            state = tensors_of(zf, MEMBER)
            others = tensors_of(zf, extra) if extra in zf.namelist() else {}
    except CheckpointError:
        raise
    except Exception as e:  # zip, JSON and torch's weights_only refusals: an unusable file
        raise CheckpointError(f"cannot export {zip_path}: {type(e).__name__}: {e}") from e
    if others:
        raise CheckpointError(
            f"cannot export {zip_path}: it holds tensors beside the policy's ({extra}); a PPO "
            "policy has none"
        )
    tensors = {k: v.detach().clone().contiguous() for k, v in state.items()}
    save_file(tensors, str(out), metadata={"format": "pt"})
    return settings


# ----------------------------------------------------------------------------- import
def load(path: Path, device: str = "cpu") -> Any:
    """The PPO (or RecurrentPPO) of `path` (.safetensors) and the policy.json beside it, built
    from the suite's classes as SB3's `load` builds one, then given the tensors (all of them,
    and no other)."""
    model = _built(path, device)
    check_weights(path, model)
    tensors = read_tensors(path)
    try:
        model.policy.load_state_dict(tensors, strict=True)
    except (TypeError, ValueError, RuntimeError, KeyError) as e:
        raise CheckpointError(f"cannot load {path} with {SETTINGS}: {type(e).__name__}: {e}") from e
    return model


def _built(path: Path, device: str = "cpu") -> Any:
    """The untrained algorithm and policy the policy.json beside `path` describes."""
    settings = read_settings(path)
    algo, policy_class, kwargs = _classes(settings, path)
    obs = space_of(settings.get("observation_space"), f"{settings_path(path)}: observation_space")
    act = space_of(settings.get("action_space"), f"{settings_path(path)}: action_space")
    try:
        model = algo(policy=policy_class, env=None, device=device, _init_setup_model=False)
        model.observation_space, model.action_space = obs, act
        model.policy_kwargs, model.n_envs = kwargs, 1
        model._setup_model()
    except (TypeError, ValueError, RuntimeError, KeyError) as e:
        raise CheckpointError(f"cannot load {path} with {SETTINGS}: {type(e).__name__}: {e}") from e
    return model


def check_weights(path: Path, model: Any = None) -> None:
    """Refuse `path` when its header says other than the policy declares (`benchmark.weights`:
    a tensor's dtype of another kind, another shape, a tensor too many or missing), naming the
    file and the tensor. `model`: the policy built from policy.json (built here when None)."""
    model = _built(path) if model is None else model
    try:
        weights.check(path, weights.declared(model.policy.state_dict()), strict=True)
    except weights.WeightsError as e:
        raise CheckpointError(str(e)) from e


def digest(path: Path) -> str:
    """The policy identity of `path` and its policy.json: `checkpoints.policy_digest` of the zip
    they were made from. Reads tensors and JSON only; builds the two spaces, nothing else."""
    h = hashlib.sha256()
    hash_tensors(h, MEMBER, read_tensors(path))
    settings = read_settings(path)
    canon = {
        "policy_class": settings["policy_class"],
        "policy_kwargs": settings["policy_kwargs"],
        **{
            k: canonical_space(space_of(settings.get(k), f"{settings_path(path)}: {k}"))
            for k in SPACE_KEYS
        },
    }
    h.update(json.dumps(canon, sort_keys=True).encode())
    return h.hexdigest()
