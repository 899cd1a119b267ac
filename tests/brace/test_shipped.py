"""The shipped base (benchmark.brace.shipped): only a probed base that meets the goal ships; its
config pins its weights, and a changed byte is refused at load (by every loader's folder check)
and by `brace.base=pretrained`; the pin enters the SFT identity."""

from __future__ import annotations

import json

import pytest

from benchmark.brace import shipped
from benchmark.brace.base import BaseSettings, pretrain
from benchmark.store import file_sha256
from benchmark.weights import WeightsError, check_folder

TINY = dict(
    layers=1, width=32, heads=2, kv_heads=1, mlp=64, context=256, batch=2, lr=3e-3, warmup=2
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished pretraining folder with its records (a probe result written as the probe
    writes it; the tiny model's own probe scores 0: tests/brace/test_base.py)."""
    out = tmp_path_factory.mktemp("base") / "run"
    pretrain(BaseSettings(steps=2, **TINY), out, None, False)
    probe = {"n": 200, "room": 0.99, "room_ci": [0.96, 1.0], "visible": 0.97,
             "visible_ci": [0.94, 0.99], "visible_names": 0.99}  # fmt: skip
    (out / "probe.json").write_text(json.dumps(probe))
    return out


@pytest.fixture
def package(tmp_path, monkeypatch):
    """The package folder the base ships into, here a temporary one."""
    monkeypatch.setattr(shipped, "FOLDER", tmp_path / "pretrained_base")
    return shipped.FOLDER


def test_a_base_below_the_probe_goal_is_refused(run, package):
    probe = json.loads((run / "probe.json").read_text())
    (run / "probe.json").write_text(json.dumps({**probe, "visible": 0.90}))
    try:
        with pytest.raises(shipped.ShippedError, match=r"visible 0\.900.*>= 0\.95"):
            shipped.ship(run)
    finally:
        (run / "probe.json").write_text(json.dumps(probe))
    assert not package.exists()


def test_a_shipped_base_is_pinned_and_a_changed_byte_is_refused(run, package, monkeypatch):
    result = shipped.ship(run)
    digest = file_sha256(run / "model" / "model.safetensors")
    assert result["weights_sha256"] == digest
    assert json.loads((package / "config.json").read_text())["weights_sha256"] == digest
    card = (package / "README.md").read_text()
    assert "room 0.990 [0.960, 1.000]" in card and digest in card
    check_folder(package)  # the pin holds
    monkeypatch.setattr(shipped, "PINNED", digest)
    assert shipped.folder() == package
    assert shipped.identity() == f"pretrained:{digest[:16]}"

    weights = package / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # the last byte of the last tensor
    weights.write_bytes(bytes(data))
    with pytest.raises(WeightsError, match=r"model\.safetensors.*weights_sha256") as err:
        check_folder(package)
    assert "\n" not in str(err.value)
    with pytest.raises(shipped.ShippedError, match=r"is not the pinned") as err:
        shipped.folder()
    assert "\n" not in str(err.value)


def test_no_shipped_base_is_a_one_line_refusal(package, monkeypatch):
    monkeypatch.setattr(shipped, "PINNED", "")
    with pytest.raises(shipped.ShippedError, match=r"brace\.base=pretrained: no pretrained base"):
        shipped.folder()
    assert shipped.main(["check"]) == 2
