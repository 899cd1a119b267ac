"""Weights that lie are refused, not loaded: the one check every loader of `.safetensors` runs
(the PPO policy of a bundle or of `policy.path`, a consultant's model folder, the fine-tuned and
Agent-BRACE models).

A safetensors header declares each tensor's dtype, shape and byte offsets; nothing else says what
the bytes are. A header that declares int32 for a float32 tensor (the same byte size) loads
without an error: torch casts the integers to floats, and a bias of 0.01 becomes 1e9. So each
tensor of the header is checked against what the model declares (its state dict, or the dtype
its config records): an integer tensor where the model has a floating one, or the other way
round, is a lie, and another shape is a refusal. A digest on record (a bundle's index, a
manifest) is compared with the one the file gives. Each refusal is one line naming the file and
the tensor (`WeightsError`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUFFIX = ".safetensors"


class WeightsError(ValueError):
    """A weights file that cannot be read, or whose header says other than the model declares,
    or whose digest is not the one on record; the message is one line naming file and tensor."""


@dataclass(frozen=True)
class Tensor:
    """One tensor as a safetensors header declares it: dtype (safetensors' name: F32, I32,
    BF16, ...) and shape."""

    dtype: str
    shape: tuple[int, ...]

    @property
    def kind(self) -> str:
        return dtype_kind(self.dtype)


def dtype_kind(dtype: Any) -> str:
    """float, int, bool or complex: of a safetensors dtype name (F32, I32, BOOL, C64) or of a
    torch dtype (torch.float32, ...). Within a kind a load casts honestly (float16 to float32);
    across kinds the bytes mean something else."""
    if hasattr(dtype, "is_floating_point"):  # a torch dtype
        if dtype.is_floating_point:
            return "float"
        if dtype.is_complex:
            return "complex"
        return "bool" if str(dtype) == "torch.bool" else "int"
    name = str(dtype).upper()
    if name == "BOOL":
        return "bool"
    if name.startswith("C"):
        return "complex"
    if name.startswith(("F", "BF", "E")):  # F32, F16, BF16, F8_E4M3, E8M0
        return "float"
    return "int"  # I8..I64, U8..U64


def header(path: str | Path, what: str = "") -> dict[str, Tensor]:
    """The tensors a `.safetensors` file declares (its header only: no tensor is read);
    WeightsError naming the file (and `what`, the model it belongs to) when it is not one."""
    from safetensors import SafetensorError, safe_open

    where = f"{path}" + (f" ({what})" if what else "")
    try:
        with safe_open(str(path), framework="pt") as f:
            out = {}
            for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                sliced = f.get_slice(name)
                out[name] = Tensor(str(sliced.get_dtype()), tuple(sliced.get_shape()))
            return out
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise WeightsError(
            f"cannot read the weights in {where}: {type(e).__name__}: "
            f"{one_line(e)} (not a safetensors file, or truncated)"
        ) from e


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def declared(state: Mapping[str, Any]) -> dict[str, tuple[Any, tuple[int, ...]]]:
    """What a torch module declares, by name: (dtype, shape) of each tensor of its state dict."""
    return {k: (v.dtype, tuple(v.shape)) for k, v in state.items()}


def check(
    path: str | Path,
    model: Mapping[str, tuple[Any, tuple[int, ...]]] | None = None,
    *,
    dtype: Any = None,
    strict: bool = False,
    prefixes: Iterable[str] = (),
    what: str = "",
) -> dict[str, Tensor]:
    """Check the header of `path` against what the model declares and return it.

    `model`: by name, the (dtype, shape) the model declares (`declared(module.state_dict())`);
    a tensor found there must have the kind of its dtype and its shape. `prefixes`: names a
    loader adds or strips (transformers' `base_model_prefix`), tried when the name is not found.
    `dtype`: the dtype the model's config records, for a tensor the model does not name (or
    for every tensor when there is no `model`): its kind must be the same. `strict`: the file
    and the model name the same tensors (a policy's state dict, loaded with strict=True).
    WeightsError naming the file and the first tensor that differs."""
    tensors = header(path, what)
    where = f"{path}" + (f" ({what})" if what else "")
    model = model or {}
    for name, tensor in tensors.items():
        found = _lookup(model, name, tuple(prefixes))
        if found is not None:
            want_dtype, want_shape = found
            if tensor.kind != dtype_kind(want_dtype):
                raise WeightsError(
                    f"refused {where}: its header declares tensor {name!r} as {tensor.dtype}, "
                    f"where the model's parameter is {_name(want_dtype)}: the bytes would load as "
                    "other numbers (a header that lies); export or download the weights again"
                )
            if tuple(tensor.shape) != tuple(want_shape):
                raise WeightsError(
                    f"refused {where}: its header declares tensor {name!r} of shape "
                    f"{list(tensor.shape)}, where the model's parameter has shape "
                    f"{list(want_shape)}"
                )
        elif strict:
            raise WeightsError(
                f"refused {where}: it holds tensor {name!r}, which the model does not declare"
            )
        elif dtype is not None and tensor.kind != dtype_kind(dtype):
            raise WeightsError(
                f"refused {where}: its header declares tensor {name!r} as {tensor.dtype}, where "
                f"the model's config records {_name(dtype)}: the bytes would load as other "
                "numbers (a header that lies); export or download the weights again"
            )
    if strict and (missing := sorted(set(model) - set(tensors))):
        raise WeightsError(
            f"refused {where}: it lacks tensor {missing[0]!r} the model declares"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        )
    return tensors


def _lookup(model: Mapping[str, Any], name: str, prefixes: tuple[str, ...]) -> Any:
    if name in model:
        return model[name]
    for p in prefixes:
        if p and name.startswith(p + ".") and name[len(p) + 1 :] in model:
            return model[name[len(p) + 1 :]]
        if p and f"{p}.{name}" in model:
            return model[f"{p}.{name}"]
    return None


def _name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def config_dtype(directory: str | Path) -> Any:
    """The torch dtype a model folder's config.json records (`dtype`, or `torch_dtype` of
    earlier transformers; a multimodal config's `text_config`), None when it records none or
    none of torch's (a model whose config quantizes it: its integer tensors are honest)."""
    import torch

    try:
        config = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or config.get("quantization_config"):
        return None
    for node in (config, config.get("text_config")):
        if isinstance(node, dict):
            name = node.get("dtype") or node.get("torch_dtype")
            if isinstance(name, str) and isinstance(getattr(torch, name, None), torch.dtype):
                return getattr(torch, name)
    return None


def folder_files(directory: str | Path) -> list[Path]:
    """The safetensors files of a model folder (sharded or not), sorted."""
    return sorted(p for p in Path(directory).glob(f"*{SUFFIX}") if p.is_file())


def check_folder(directory: str | Path, model: Any = None, what: str = "") -> None:
    """Check every safetensors file of a transformers model folder: before loading (`model`
    None) each header is read (naming the file when it is not one) and each tensor's dtype
    checked against the config's dtype; after loading, against the loaded model's own state
    dict as well, by name (with its `base_model_prefix`), dtypes and shapes."""
    dtype = config_dtype(directory)
    if model is None:
        check_pinned(directory)
    state = declared(model.state_dict()) if model is not None else None
    prefix = getattr(model, "base_model_prefix", "") if model is not None else ""
    for f in folder_files(directory):
        check(f, state, dtype=dtype, prefixes=(prefix,), what=what)


RECORDS = ("complete.json",)  # completion records listing each file's SHA-256 (Agent-BRACE's)


def check_pinned(directory: str | Path) -> None:
    """Compare each weights file of a folder with the digest on record there: the config's
    `weights_sha256` (the shipped base pins its weights so) and a completion record's `files`
    (Agent-BRACE's model folders); a folder with neither is not hashed."""
    from benchmark.store import file_sha256

    folder = Path(directory)
    config = folder / "config.json"
    recorded: dict[str, tuple[Any, str]] = {}
    pinned = json.loads(config.read_text()).get("weights_sha256") if config.is_file() else None
    if pinned is not None:
        recorded[f"model{SUFFIX}"] = (pinned, f"{config}'s weights_sha256")
    for name in RECORDS:
        try:
            files = json.loads((folder / name).read_text()).get("files") or {}
        except (OSError, ValueError, AttributeError):
            continue
        for file, sha in files.items():
            if file.endswith(SUFFIX) and file not in recorded:
                recorded[file] = (sha, f"{folder / name}")
    for file, (sha, record) in sorted(recorded.items()):
        if not (folder / file).is_file():
            raise WeightsError(f"refused {folder}: {record} lists {file}, which is missing")
        check_digest(folder / file, sha, file_sha256(folder / file), record)


def check_digest(path: str | Path, recorded: Any, actual: str, record: str) -> None:
    """Refuse `path` when the digest on record (`record` names where: a bundle's index, a
    manifest) is not the one its content gives."""
    if recorded is not None and recorded != actual:
        raise WeightsError(
            f"refused {path}: its content gives the digest {str(actual)[:16]}..., not the one "
            f"{record} records ({str(recorded)[:16]}...): the weights were changed after they "
            "were recorded (a tensor's bytes moved or replaced); export or download them again"
        )
