"""W&B dashboards as code (benchmark.dashboard): every preset's dashboard is built offline from its
sweep, and its views' filters, groupings and panels are checked against the preset's own
`hydra.sweeper.params` (read here straight from conf/experiment/<preset>.yaml), so a preset and
its dashboard cannot drift apart; the JSON written is the library's own model (it loads back)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time

import pytest
from omegaconf import OmegaConf

from benchmark import dashboard, dashboard_views
from benchmark.dashboard import spec_of
from benchmark.dashboard_design import DashboardError, design, question_of
from benchmark.dashboard_views import report, workspaces
from tests.conftest import CONF, REPO

PRESET_FILES = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
# the W&B config key each swept key is grouped by (the method label covers gate, slm, prompt)
GROUPED_BY = {
    "method": "method",
    "gate": "method",
    "slm": "method",
    "prompt": "method",
    "policy.checkpoint": "policy.checkpoint",
    "policy.seed": "policy.seed",
}
AGAINST = {"gate.tau": "tau", "gate.mc_samples": "mc_samples"}  # swept key -> line panels' x
INDEX = {"tau_point": "gate.tau"}  # a swept index into a per-env tau grid -> the key it sets
FAMILY = {"fourrooms": "success", "doorkey8": "success", "higherlower": "accuracy"}
TABLE_METRICS = ["reward_mean", "{m}_mean", "ir_mean", "or_mean", "invalid_rate_pooled"]


def _sweep(preset: str) -> dict[str, list[str]]:
    """The preset's sweep as its YAML file writes it."""
    params = OmegaConf.select(OmegaConf.load(CONF / "experiment" / f"{preset}.yaml"), "hydra")
    params = OmegaConf.select(params, "sweeper.params") if params is not None else None
    return {k: str(v).split(",") for k, v in (params or {}).items()}


def _runset(view) -> tuple[str, list[str]]:
    rs = view.runset_settings
    return rs.filters, [g.name for g in rs.groupby]


def _name(metric) -> str:
    return getattr(metric, "name", metric)


def _panel_metrics(view) -> list[tuple[str, str, str]]:
    """(kind, x, y) of each panel of a view's section (a loaded view names metrics as objects)."""
    out = []
    for p in view.sections[0].panels:
        kind = type(p).__name__
        if kind == "BarPlot":
            out += [(kind, "", _name(m)) for m in p.metrics]
        elif kind == "LinePlot":
            out += [(kind, _name(p.x), _name(y)) for y in p.y]
        elif kind == "ScatterPlot":
            out.append((kind, _name(p.x), _name(p.y)))
    return out


def test_every_preset_has_a_dashboard_entry():
    """A new preset fails here until the `dashboard:` entry of its YAML says what its dashboard
    answers (or `why_none`: train, demo, smoke, finetune, brace_tw_train, brace_demo need none)."""
    questions = {}
    for p in PRESET_FILES:
        with contextlib.suppress(DashboardError):
            questions[p] = question_of(p)
    missing = [p for p in PRESET_FILES if p not in questions]
    assert not missing, f"presets without a `dashboard:` entry in conf/experiment/: {missing}"
    assert {p for p, q in questions.items() if q is None} == {
        "train",
        "demo",
        "smoke",
        "finetune",
        "brace_tw_train",
        "brace_demo",
    }


@pytest.mark.parametrize("preset", PRESET_FILES)
def test_dashboard_follows_the_preset_sweep(preset, tmp_path):
    d = design(preset, [f"paths.root={tmp_path}"])
    if question_of(preset) is None:
        assert d is None
        return
    sweep = _sweep(preset)
    envs = sweep["env"]
    swept_x = next((k for k in sweep if k in AGAINST or k in INDEX), None)
    x = INDEX.get(swept_x, swept_x)
    grouping = []
    for key in (k.lstrip("+") for k in sweep):  # `++gate.tau` sweeps the key gate.tau
        if key in ("env", swept_x):
            continue
        g = GROUPED_BY.get(key, key if "." in key else f"{key}.name")
        if g not in grouping:
            grouping.append(g)
    assert d.envs == envs and d.x == x
    assert d.grouping == (grouping or ["method"])
    views = workspaces(d)
    assert [v.name for v in views] == [dashboard_views.view_name(d, e) for e in envs]
    for view, env in zip(views, envs, strict=True):
        filters, groupby = _runset(view)
        assert f"Metric(\"Group\") == '{d.experiment}'" in filters
        assert "Metric(\"JobType\") != 'report'" in filters
        assert f"Config(\"env.value.name\") == '{env}'" in filters
        assert groupby == d.grouping
        panels = _panel_metrics(view)
        wanted = set(d.metrics_of[env].values())
        family = FAMILY.get(env)
        if family and "metric" in d.question.metrics:
            assert f"{family}_mean" in wanted
        if x is None:
            assert {y for kind, _, y in panels if kind == "BarPlot"} == wanted
        else:
            assert {(k, xx, y) for k, xx, y in panels if k == "LinePlot"} == {
                ("LinePlot", AGAINST[x], y) for y in wanted
            }
        # the file's spec is the library's model: it loads back as the same view
        from wandb_workspaces.workspaces import Workspace, internal

        back = Workspace._from_model(internal.View.model_validate(spec_of(view)))
        assert _runset(back) == (filters, groupby)
        assert _panel_metrics(back) == panels


@pytest.mark.parametrize(
    "preset, grouping",
    [
        ("table1", ["method", "ppo_baseline.name"]),  # the recipe's PPO and the matched one
        ("table2", ["method"]),
        ("table3", ["policy.checkpoint", "method"]),
    ],
)
def test_paper_tables_bars_per_env_by_method_with_ppo_reference(preset, grouping, tmp_path):
    """Per env, bar panels of reward, success or accuracy, IR, OR and invalid rate,
    grouped by method (and SLM: the label carries it; table2: the prompt variant is the method;
    table3: by checkpoint), PPO-only in grey; and a report."""
    d = design(preset, [f"paths.root={tmp_path}"])
    assert d.grouping == grouping
    for view, env in zip(workspaces(d), ["fourrooms", "doorkey8", "higherlower"], strict=True):
        bars = [y for kind, _, y in _panel_metrics(view) if kind == "BarPlot"]
        assert bars == [m.format(m=FAMILY[env]) for m in TABLE_METRICS]
        colors = spec_of(view)["spec"]["section"]["customRunColors"]
        if preset != "table2":  # table2 has no PPO-only cells
            assert colors and all(c == dashboard_views.PPO_COLOR for c in colors.values())
            assert all("PPO" in k for k in colors)
            if preset == "table3":  # one PPO group per checkpoint, as the runs log it (tK -> rNNN)
                assert len(colors) == 6
                named = {"fourrooms": "r010", "doorkey8": "r030", "higherlower": "r010"}[env]
                assert sum(f"%22{named}%22" in k for k in colors) == 1
    rep = report(d)
    grids = [b for b in rep.blocks if type(b).__name__ == "PanelGrid"]
    assert len(grids) == 4  # one per env, then the report run's tables and figures
    tables = [p.table_name for p in grids[-1].panels if hasattr(p, "table_name")]
    assert tables[0] == "main"
    assert "Metric(\"JobType\") == 'report'" in grids[-1].runsets[0].filters


@pytest.mark.parametrize("preset, x", [("fig2_tau", "tau"), ("mc_samples", "mc_samples")])
def test_tau_and_n_presets_plot_reward_and_ir_against_their_axis(preset, x, tmp_path):
    d = design(preset, [f"paths.root={tmp_path}"])
    for view in workspaces(d):
        lines = [(xx, y) for kind, xx, y in _panel_metrics(view) if kind == "LinePlot"]
        assert lines == [(x, "reward_mean"), (x, "ir_mean")]
        points = [(xx, y) for kind, xx, y in _panel_metrics(view) if kind == "ScatterPlot"]
        assert points == [(f"gate.{x}", "reward_mean"), (f"gate.{x}", "ir_mean")]
    assert (report(d) is not None) == (preset == "fig2_tau")


def test_command_line_overrides_change_the_sweep(tmp_path):
    """`slm=tiny` replaces the SLM axis, `hydra.sweeper.params.env=...` the envs."""
    d = design(
        "table1", [f"paths.root={tmp_path}", "slm=tiny", "hydra.sweeper.params.env=doorkey8"]
    )
    assert d.envs == ["doorkey8"] and d.axes["slm"] == ["tiny"]
    assert d.n_runs == 8  # 4 methods x the two PPO baselines (recipe, match)


def test_unknown_preset_and_presets_without_dashboard(capsys, tmp_path):
    with pytest.raises(DashboardError, match="no preset"):
        design("no_such_preset")
    assert dashboard.main(["+experiment=train", f"paths.root={tmp_path}"]) == 0
    assert "has no dashboard" in capsys.readouterr().out
    assert not (tmp_path / "dashboards").exists()


def test_cli_writes_the_definition_offline(tmp_path, capsys):
    assert dashboard.main(["+experiment=table1", f"paths.root={tmp_path}", "slm=tiny"]) == 0
    out = capsys.readouterr().out
    path = tmp_path / "dashboards" / "table1" / "dashboard.json"
    assert str(path) in out and "--publish" in out
    data = json.loads(path.read_text())
    assert len(data["workspaces"]) == 3 and data["report"] is not None
    assert data["grouping"] == ["method", "ppo_baseline.name"]
    assert "python -m benchmark.dashboard +experiment=table1" in data["publish"]
    assert (path.parent / "dashboard.md").read_text().startswith("# W&B dashboard of `table1`")
    # the same preset gives the same file (ids are seeded by the preset)
    first = path.read_text()
    assert dashboard.main(["+experiment=table1", f"paths.root={tmp_path}", "slm=tiny"]) == 0
    assert path.read_text() == first


@pytest.mark.slow  # a subprocess waiting for a refusal (~5 s)
def test_publish_without_a_server_fails_fast_and_keeps_the_file(tmp_path):
    """--publish against a closed local port: an error within seconds, never a hang, and the
    definition is still written. Nothing outside 127.0.0.1 is contacted."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "WANDB_BASE_URL": f"http://127.0.0.1:{port}",
        "WANDB_API_KEY": "x" * 40,
        "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
        "WANDB_MODE": "online",
    }
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "benchmark.dashboard", "+experiment=fig2_tau"]
        + [f"paths.root={tmp_path}", "--publish"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr
    assert "not published" in proc.stderr and "127.0.0.1" in proc.stderr
    assert (tmp_path / "dashboards" / "fig2_tau" / "dashboard.json").exists()
    assert elapsed < 60
