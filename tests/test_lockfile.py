"""requirements.lock: the install `make install` and CI build, checked against what runs."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement

from benchmark import lockfile
from benchmark.results import provenance

REPO = Path(__file__).resolve().parent.parent


def test_differences_name_every_kind_of_drift():
    pins = {"torch": "2.13.0", "transformers": "5.25.0", "numpy": "2.4.6"}
    have = {"torch": "2.13.0+cpu", "transformers": "5.26.0", "einops": "0.8.1", "pip": "26.0"}
    problems = lockfile.differences(pins, have)
    assert problems == [
        "numpy==2.4.6 is locked but not installed",
        "transformers is 5.26.0, the lock says 5.25.0",
        "einops==0.8.1 is installed but not locked",
    ]
    # a CUDA build of the locked torch, pip itself and the GPU runtime are not drift
    gpu = {**pins, "torch": "2.13.0+cu128", "nvidia-cublas-cu12": "12.8", "triton": "3.5"}
    assert lockfile.differences(pins, gpu) == []
    # make install-gpu: the kernels' own dependencies are allowed, a moved pin is not
    assert lockfile.differences(pins, {**gpu, "einops": "0.8.1"}, extra_ok=True) == []
    moved = {**gpu, "numpy": "2.3.0", "einops": "0.8.1"}
    assert lockfile.differences(pins, moved, extra_ok=True) == [
        "numpy is 2.3.0, the lock says 2.4.6"
    ]


def test_a_line_that_is_not_a_pin_is_refused_with_its_place(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("# header\nStable_Baselines3==2.9.2\ntorch>=2.4\n")
    with pytest.raises(ValueError, match=r"requirements.lock:3: 'torch>=2.4'"):
        lockfile.read(lock)
    lock.write_text("Stable_Baselines3==2.9.2  # a comment\n")
    assert lockfile.read(lock) == {"stable-baselines3": "2.9.2"}


def test_the_lock_pins_every_requirement_inside_its_range():
    """Every dependency of pyproject.toml (and of the [dev] extra) is locked, at a version its
    range admits: a lock from an older pyproject would install what the package refuses."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = lockfile.read()
    wanted = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    for text in wanted:
        req = Requirement(text)
        name = lockfile.canonical(req.name)
        assert name in pins, f"{req.name} (pyproject.toml) is not in requirements.lock"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"requirements.lock pins {name}=={pins[name]}, outside pyproject's {req.specifier}"
        )
    assert pins["torch"] == "2.13.0"  # the CPU wheel on disk; plain torch pulls a CUDA build


@pytest.mark.skipif(torch.version.cuda is not None, reason="a CUDA install (make install-gpu)")
def test_the_running_install_is_the_locked_one():
    """What `make install` built is exactly the lock (pip freeze equals it, up to pip itself)."""
    problems = lockfile.differences(lockfile.read(), lockfile.installed())
    assert not problems, (
        "this .venv is not the locked install (rm -rf .venv && make install):\n"
        + ("\n".join(problems))
    )


def test_a_result_names_the_lock_it_ran_under():
    lock = provenance()["lock"]
    assert lock["sha256"] == lockfile.digest() and len(lock["sha256"]) == 64
    assert isinstance(lock["matches_install"], bool)
