"""The shipped base (benchmark.brace.shipped): a base below the probe's goal does not ship; a
pinned config's weights are checked at load (by every loader's folder check) and by
`brace.base=pretrained`, whose identity carries the pin."""

from __future__ import annotations

import json
import shutil

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
    """A finished pretraining folder of a model too small to copy anything."""
    out = tmp_path_factory.mktemp("base") / "run"
    pretrain(BaseSettings(steps=2, **TINY), out, None, False)
    return out


@pytest.fixture
def package(tmp_path, monkeypatch):
    """The package folder the base ships into, here a temporary one."""
    monkeypatch.setattr(shipped, "FOLDER", tmp_path / "pretrained_base")
    return shipped.FOLDER


def test_a_base_below_the_probe_goal_is_not_shipped(run, package, tmp_path):
    with pytest.raises(shipped.ShippedError, match=r"probe room 0\.000, visible 0\.000.*>= 0\.95"):
        shipped.ship(run, n=3, pages=tmp_path / "pages")
    assert not package.exists() and not (tmp_path / "pages").exists()


def test_a_pinned_folder_whose_weights_changed_is_refused(run, package, monkeypatch):
    shutil.copytree(run / "model", package)
    digest = file_sha256(package / "model.safetensors")
    config = json.loads((package / "config.json").read_text())
    (package / "config.json").write_text(json.dumps({**config, "weights_sha256": digest}))
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
