"""Weights that lie are refused: a `.safetensors` whose header declares int32 for a float32 tensor
(the same byte size, so it loads) or whose tensors' offsets were swapped, with the manifests
signed again as the liar would, is refused by every loader (a policy bundle, `policy.path`, a
consultant's model folder, the fine-tuning loader), naming the file and the tensor."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import pytest
import torch

from benchmark.build import policy_checkpoint, prepare
from benchmark.consultants import ConsultantError
from benchmark.consultants.hf import HFConsultant
from benchmark.finetune import lm
from benchmark.policy.bundle import export
from benchmark.policy.checkpoints import CheckpointError, load
from benchmark.weights import WeightsError, check, dtype_kind, header
from tests.conftest import SMALL_POLICY, compose_cfg
from tests.small_policy import committed

PPO_ONLY = ["env=empty5x5_random", "gate=never", "eval.n_episodes=4"]


# ----------------------------------------------------------------------------- lying files
def edit_header(path: Path, edit) -> None:
    """Rewrite the JSON header of a .safetensors file in place (`edit` changes the parsed
    header), leaving the tensor bytes as they are: a header padded with spaces to 8 bytes."""
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    head = json.loads(blob[8 : 8 + n])
    edit(head)
    text = json.dumps(head, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + blob[8 + n :])


def lie_dtype(name: str):
    def edit(head: dict) -> None:
        assert head[name]["dtype"] == "F32"
        head[name]["dtype"] = "I32"  # the same 4 bytes per value: it loads

    return edit


def swap_offsets(a: str, b: str):
    def edit(head: dict) -> None:
        assert head[a]["shape"] == head[b]["shape"] and head[a]["dtype"] == head[b]["dtype"]
        head[a]["data_offsets"], head[b]["data_offsets"] = (
            head[b]["data_offsets"],
            head[a]["data_offsets"],
        )

    return edit


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def resign(bundle: Path, weights: Path, index_too: bool = False) -> None:
    """Sign the changed weights again as a liar would: the policy's COMPLETE, (the SHA-256 in
    bundle.json,) and the bundle's COMPLETE over them. The policy identity bundle.json records
    is left as it was."""
    policy = weights.parent
    manifest = json.loads((policy / "COMPLETE").read_text())
    manifest["checkpoints"][weights.stem] = sha256(weights)
    (policy / "COMPLETE").write_text(json.dumps(manifest))
    if index_too:
        index = json.loads((bundle / "bundle.json").read_text())
        for entry in index["policies"]:
            if entry["name"] == policy.name:
                entry["checkpoints"][weights.stem]["sha256"] = sha256(weights)
        (bundle / "bundle.json").write_text(json.dumps(index))
    top = json.loads((bundle / "COMPLETE").read_text())
    for name in top["files"]:
        top["files"][name] = sha256(bundle / name)
    (bundle / "COMPLETE").write_text(json.dumps(top))


@pytest.fixture(scope="module")
def small_bundle(tmp_path_factory) -> Path:
    """The committed small policy exported as a bundle (no training)."""
    source = committed()
    if source is None:
        pytest.skip("tests/data/small-policy holds no committed policy (make test-policy)")
    return export([source], tmp_path_factory.mktemp("weights") / "bundle")


def _copy(bundle: Path, tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "bundle"
    shutil.copytree(bundle, out)
    (policy,) = [p for p in out.iterdir() if p.is_dir()]
    return out, policy / "best.safetensors"


def _checkpoint(tmp_path: Path, path: Path) -> Path:
    cfg = compose_cfg(tmp_path / "root", *PPO_ONLY, *SMALL_POLICY, f"policy.path={path}")
    task, splits, _ = prepare(cfg)
    return policy_checkpoint(cfg, task, splits, train=False)


# ----------------------------------------------------------------------------- policies
def test_an_honest_bundle_still_loads(small_bundle, tmp_path):
    out, weights = _copy(small_bundle, tmp_path)
    assert _checkpoint(tmp_path, out) == weights
    assert _checkpoint(tmp_path, weights) == weights
    bias = load(weights).policy.state_dict()["action_net.bias"]
    assert float(bias.abs().max()) < 10.0


def test_a_header_that_lies_about_a_dtype_is_refused_naming_file_and_tensor(small_bundle, tmp_path):
    out, weights = _copy(small_bundle, tmp_path)
    edit_header(weights, lie_dtype("action_net.bias"))
    resign(out, weights, index_too=True)
    for load_it in (
        lambda: _checkpoint(tmp_path, out),  # policy.path=<bundle>
        lambda: _checkpoint(tmp_path, weights),  # policy.path=<file.safetensors>
        lambda: load(weights),  # the file alone, no record to compare with
    ):
        with pytest.raises(CheckpointError) as err:
            load_it()
        message = str(err.value)
        assert "\n" not in message
        assert str(weights) in message and "'action_net.bias'" in message
        assert "I32" in message and "float32" in message


def test_swapped_offsets_are_refused_by_the_recorded_policy_identity(small_bundle, tmp_path):
    """Two biases of one shape swap their bytes: dtypes and shapes hold, the manifests and the
    file's SHA-256 in bundle.json are signed again; the policy identity bundle.json records
    is another."""
    out, weights = _copy(small_bundle, tmp_path)
    a, b = "mlp_extractor.policy_net.0.bias", "mlp_extractor.value_net.0.bias"
    edit_header(weights, swap_offsets(a, b))
    resign(out, weights, index_too=True)
    load(weights)  # the file alone still loads: only the recorded identity tells
    for path in (out, weights):
        with pytest.raises(CheckpointError) as err:
            _checkpoint(tmp_path, path)
        message = str(err.value)
        assert "\n" not in message
        assert str(weights) in message and "bundle.json" in message
        assert "digest" in message


def test_a_shape_or_a_tensor_the_policy_does_not_declare_is_refused(small_bundle, tmp_path):
    _, weights = _copy(small_bundle, tmp_path)

    def reshape(head: dict) -> None:  # 4x128 as 8x64: the same bytes
        head["action_net.weight"]["shape"] = [8, 64]

    edit_header(weights, reshape)
    with pytest.raises(CheckpointError, match=r"'action_net.weight' of shape \[8, 64\]"):
        load(weights)
    _, weights = _copy(small_bundle, tmp_path / "renamed")

    def rename(head: dict) -> None:
        head["action_net.extra"] = head.pop("action_net.bias")

    edit_header(weights, rename)
    with pytest.raises(CheckpointError, match="'action_net.extra', which the model does not"):
        load(weights)


# ----------------------------------------------------------------------------- consultants
def _lying_model(tiny_model, tmp_path: Path, name: str = "lm_head.weight") -> tuple[Path, Path]:
    folder = tmp_path / "model"
    shutil.copytree(tiny_model(), folder)
    (weights,) = sorted(folder.glob("*.safetensors"))
    assert name in header(weights)
    edit_header(weights, lie_dtype(name))
    return folder, weights


def test_a_consultant_folder_whose_header_lies_is_refused(tiny_model, tmp_path):
    folder, weights = _lying_model(tiny_model, tmp_path)
    with pytest.raises(ConsultantError) as err:
        HFConsultant(path=str(folder), device_map="cpu")
    message = str(err.value)
    assert "\n" not in message
    assert str(weights) in message and "'lm_head.weight'" in message
    assert f"the model {folder}" in message
    with pytest.raises(WeightsError, match="'lm_head.weight'"):
        lm.load(folder, device="cpu")


def test_a_consultant_lie_is_caught_against_the_loaded_model_without_a_config_dtype(
    tiny_model, tmp_path
):
    """A config that records no dtype leaves the loaded model's own parameters to compare
    with."""
    folder, weights = _lying_model(tiny_model, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    for key in ("dtype", "torch_dtype"):
        config.pop(key, None)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConsultantError, match=f"{weights}.*'lm_head.weight'.*float32"):
        HFConsultant(path=str(folder), device_map="cpu")


def test_a_consultant_header_that_is_not_one_names_file_and_model(tiny_model, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_model(), folder)
    (weights,) = sorted(folder.glob("*.safetensors"))
    blob = weights.read_bytes()
    weights.write_bytes(blob[:8] + b"{not json" + blob[17:])
    with pytest.raises(ConsultantError) as err:
        HFConsultant(path=str(folder), device_map="cpu")
    message = str(err.value)
    assert "\n" not in message
    assert f"cannot read the weights in {weights} (the model {folder})" in message


def test_an_honest_consultant_folder_loads(tiny_model):
    consultant = HFConsultant(path=str(tiny_model()), device_map="cpu")
    head = consultant.model.state_dict()["lm_head.weight"]
    assert float(head.abs().max()) < 100.0


# ----------------------------------------------------------------------------- the helper
def test_kinds_of_safetensors_and_torch_dtypes():
    assert [dtype_kind(d) for d in ("F32", "BF16", "F8_E4M3", "I32", "U8", "BOOL")] == [
        "float",
        "float",
        "float",
        "int",
        "int",
        "bool",
    ]
    assert dtype_kind(torch.float16) == "float" and dtype_kind(torch.int64) == "int"
    assert dtype_kind(torch.bool) == "bool"


def test_a_config_dtype_checks_the_tensors_the_model_does_not_name(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    save_file({"a": torch.zeros(3), "b": torch.zeros(2, dtype=torch.int32)}, str(path))
    assert set(check(path, {"a": (torch.float32, (3,))})) == {"a", "b"}
    with pytest.raises(WeightsError, match="'b' as I32, where the model's config records float16"):
        check(path, {"a": (torch.float32, (3,))}, dtype=torch.float16)
    with pytest.raises(WeightsError, match="lacks tensor 'c'"):
        check(
            path,
            {"a": (torch.float32, (3,)), "b": (torch.int32, (2,)), "c": (torch.float32, (1,))},
            strict=True,
        )


def test_an_agent_brace_folder_whose_weights_changed_after_its_record_is_refused(
    tiny_model, tmp_path
):
    """Agent-BRACE's model folders record every file's SHA-256 (complete.json, written last):
    a load compares the weights with it, so swapped offsets (same header, other bytes) that
    pass the dtype and shape checks are refused, naming the file and the record."""
    from benchmark.brace.models import build_model

    folder = tmp_path / "sft" / "belief"
    build_model(folder, lambda work: shutil.copytree(tiny_model(), work, dirs_exist_ok=True), {})
    lm.load(folder, device="cpu")  # the record holds
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of the last float: the header is unchanged
    weights.write_bytes(bytes(data))
    with pytest.raises(WeightsError) as err:
        lm.load(folder, device="cpu")
    message = str(err.value)
    assert "\n" not in message
    assert str(weights) in message and "complete.json" in message
