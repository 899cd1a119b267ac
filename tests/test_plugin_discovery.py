"""A consultant backend and a gate from another pip package (tests/plugin_pkg) run a job with no
edit in this repository: what the suite needs to know about them (config keys, which are
execution settings, checks, capabilities, how the gate is trained, its place in the report) is
declared on their classes, and cell.py, validate.py, build.py, the plan and the report ask the
classes (docs/consultants.md "Adding a backend", docs/gates.md "Adding a gate")."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchmark import gates
from tests.envs.test_family import _install_dist

REPO = Path(__file__).resolve().parent.parent
PLUGIN_PKG = REPO / "tests" / "plugin_pkg"


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """tests/plugin_pkg importable, its gate registered under `benchmark.gates`."""
    entry = {"period": "benchmark_toyplugins:PeriodGate"}
    _install_dist(tmp_path, "toyplugins", entry, group="benchmark.gates")
    monkeypatch.syspath_prepend(str(PLUGIN_PKG))
    monkeypatch.syspath_prepend(str(tmp_path))
    gates.available_gates.cache_clear()
    yield
    gates.available_gates.cache_clear()
    monkeypatch.delitem(sys.modules, "benchmark_toyplugins", raising=False)


def test_an_installed_gate_takes_its_declared_place_in_the_report(plugins):
    found = gates.available_gates()
    assert found["period"].__module__ == "benchmark_toyplugins"
    assert gates.gate_order() == ("never", "always", "entropy", "epistemic", "random", "period")
    assert gates.gate_markers()["period"] == "X"
    assert "period" not in gates.swept_gates()


def test_the_gate_registry_names_a_bad_entry_point(tmp_path, monkeypatch):
    _install_dist(tmp_path, "badgates", {"odd": "json:loads"}, group="benchmark.gates")
    monkeypatch.syspath_prepend(str(tmp_path))
    gates.available_gates.cache_clear()
    try:
        with pytest.raises(TypeError, match=r"entry point odd = json:loads .* not a benchmark"):
            gates.available_gates()
    finally:
        gates.available_gates.cache_clear()


def test_the_core_asks_the_backend_its_execution_keys_and_capabilities(plugins, tmp_path):
    from omegaconf import OmegaConf, open_dict

    from benchmark.cell import CellSpec
    from tests.conftest import compose_cfg

    base = compose_cfg(tmp_path, "env=empty5x5_random", "gate=always", "prompt=basic")

    def spec(**backend):
        cfg = base.copy()
        with open_dict(cfg):
            target = {"_target_": "benchmark_toyplugins.ToyConsultant", **backend}
            OmegaConf.update(cfg, "slm.backend", target, merge=False)
        return CellSpec.from_config(cfg).with_inputs(model=None)

    one = spec(index=1)
    assert one.hash == spec(index=1, note="hello").hash  # `note`: a declared execution key
    assert one.hash != spec(index=2).hash
    assert one.identity["slm"]["backend"] == {
        "_target_": "benchmark_toyplugins.ToyConsultant",
        "index": 1,
    }
    assert not one.uses_lm  # ToyConsultant.uses_lm: the plan counts no LM calls for it


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_backend_and_a_gate_in_another_pip_package_run_a_job(tmp_path):
    """tests/plugin_pkg, pip-installed into a folder on PYTHONPATH; its Hydra search-path plugin
    adds slm=toy and gate=period. A job trains the gate (its declared trainer), asks the toy
    backend on its period, and names the cell without the backend's execution key; a second
    job with another value of that key reuses the cell; bad values fail with the plugin's own
    messages, unknown keys with the keys the plugin declares."""
    from benchmark.envs import make_task
    from tests.conftest import installed_package, untrained_ppo

    env = installed_package(PLUGIN_PKG, tmp_path)
    ckpt = tmp_path / "ppo.zip"
    untrained_ppo(make_task("empty5x5_random"), ckpt)
    job = ["env=empty5x5_random", "gate=period", "slm=toy", "prompt=basic", f"policy.path={ckpt}"]
    job += ["eval.n_episodes=2", "tracking=none", "quiet=true"]

    def run(*extra):
        return subprocess.run(
            [sys.executable, "-m", "benchmark", *job, *extra],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=400,
        )

    first = run("slm.backend.note=first")
    assert first.returncode == 0, first.stderr[-3000:]
    (cell,) = [p.parent for p in (tmp_path / "root" / "cells").rglob("cell.json")]
    record = json.loads((cell / "cell.json").read_text())
    assert record["identity"]["slm"]["backend"]["index"] == 1
    assert "note" not in record["identity"]["slm"]["backend"]
    assert record["identity"]["gate"] == {
        "_target_": "benchmark_toyplugins.PeriodGate",
        "offset": 0,
    }
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["gate"] == "period" and summary["slm"] == "toy-1"
    # asked at every 4th step from step 0: the trained period, Empty-Random-5x5's 4 actions
    rows = [json.loads(line) for line in (cell / "episodes.jsonl").read_text().splitlines()]
    assert [r["queries"] for r in rows] == [math.ceil(r["length"] / 4) for r in rows]

    second = run("slm.backend.note=second")
    assert second.returncode == 0, second.stderr[-3000:]
    assert [p.parent for p in (tmp_path / "root" / "cells").rglob("cell.json")] == [cell]

    check = textwrap.dedent(
        """
        import json
        from benchmark.config import compose
        from benchmark.validate import validate

        out = {}
        for bad in (["gate.offset=-1"], ["+slm.backend.bogus=1"], ["slm.backend.index=-2"]):
            cfg = compose(["env=empty5x5_random", "gate=period", "slm=toy", *bad])
            try:
                validate(cfg)
            except ValueError as exc:
                out[bad[0]] = str(exc)
        print(json.dumps(out))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", check], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    errors = json.loads(out.stdout.strip().splitlines()[-1])
    assert "gate.offset=-1 is invalid: allowed an integer >= 0" in errors["gate.offset=-1"]
    assert "unknown key slm.backend.bogus" in errors["+slm.backend.bogus=1"]
    assert (
        "'index'" in errors["+slm.backend.bogus=1"] and "'note'" in errors["+slm.backend.bogus=1"]
    )
    assert "slm.backend.index=-2 is invalid" in errors["slm.backend.index=-2"]
