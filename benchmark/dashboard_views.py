"""The W&B objects of a dashboard design (wandb-workspaces): its workspace views (run filters,
panels, grouping colors) and, for the paper's tables and figure, its report."""

from __future__ import annotations

import contextlib
import itertools
import random
from typing import Any

from omegaconf import OmegaConf

from benchmark.dashboard_design import AXES, AXIS_TITLES, Design, env_metric, group_key

PPO_COLOR = "#9e9e9e"  # the PPO-only bars: the reference the other methods are read against


def config_path(key: str) -> str:
    """The backend name of a (nested) run config key, as the W&B app and the library's grouping
    write it (`policy.checkpoint` -> `policy.value.checkpoint`)."""
    from wandb_workspaces import expr

    return expr.groupby_str_to_key(f"config.{key}").name


def run_filters(d: Design, env: str) -> list[Any]:
    """The experiment's runs (its W&B group) of one env, without the sweep's `report` run."""
    from wandb_workspaces import expr

    return [
        expr.Metric("Group") == d.experiment,
        expr.Metric("JobType") != "report",
        expr.Config(config_path("env.name")) == env,
    ]


def panels(d: Design, env: str) -> list[Any]:
    """The panels of one env: bars of the family's metrics by the grouping, or the metrics
    against x (a line through the runs' summaries, and the runs as points), plus the PPO
    learning curves where the preset asks for them."""
    import wandb_workspaces.reports.v2 as wr

    out: list[Any] = []
    n = max(d.n_runs, 1)
    for title, key in d.metrics_of[env].items():
        if d.x is None:
            out.append(
                wr.BarPlot(
                    title=title,
                    metrics=[wr.SummaryMetric(key)],
                    orientation="h",
                    groupby_aggfunc="mean",
                    groupby_rangefunc="minmax",
                    max_runs_to_show=n,
                    max_bars_to_show=n,
                )
            )
            continue
        out.append(
            wr.LinePlot(
                title=f"{title} against {AXES[d.x]}",
                x=AXES[d.x],  # the summary's numbers are also one history row (Tracker.summary)
                y=[key],
                title_x=AXIS_TITLES[d.x],
                title_y=title,
                groupby_aggfunc="mean",
                groupby_rangefunc="minmax",
                max_runs_to_show=n,
            )
        )
        out.append(
            wr.ScatterPlot(
                title=f"{title} against {AXES[d.x]} (runs)",
                x=wr.Config(d.x),
                y=wr.SummaryMetric(key),
                running_ymean=True,
            )
        )
    if d.question.curves:
        curves = {
            "eval_reward": "validation reward",
            "eval_success": f"validation {env_metric(env)}",
        }
        for y, title in curves.items():
            out.append(
                wr.LinePlot(
                    title=f"PPO learning curve: {title}",
                    x="timesteps",
                    y=[y],
                    title_x="timesteps",
                    title_y=title,
                    max_runs_to_show=n,
                )
            )
    return out


def _pinned_columns(d: Design, env: str) -> list[str]:
    cols = []
    if d.x is not None:
        cols.append(f"summary:{AXES[d.x]}")
    for key in d.metrics_of[env].values():
        base = key[: -len("_mean")] if key.endswith("_mean") else key
        cols += [f"summary:{key}", f"summary:{base}_ci95_low", f"summary:{base}_ci95_high"]
    return cols


def _group_colors(d: Design, env: str) -> dict[Any, str]:
    """PPO-only in grey, at the `method` level of the grouping (prefixed by the values the runs
    of `env` log for the levels above it, which the sweep lists)."""
    from wandb_workspaces.workspaces import GroupPath

    from benchmark.report.model import Cell, method_label

    if "method" not in d.grouping:
        return {}
    ppo = method_label(Cell(job="", status="ok", gate="never"))
    level = d.grouping.index("method")
    above = []
    for g in d.grouping[:level]:
        values = next((v for k, v in d.axes.items() if group_key(k) == g), None)
        if values is None:
            return {}
        above.append([logged_value(g, v, env) for v in values])
    if not above:
        return {ppo: PPO_COLOR}
    return {GroupPath(*prefix, ppo): PPO_COLOR for prefix in itertools.product(*above)}


def logged_value(key: str, value: str, env: str) -> str:
    """The value a run of `env` logs for config `key` swept as `value`: the job normalizes
    `policy.checkpoint=tK` to the env's rNNN name (`benchmark.build.normalize_checkpoint`)."""
    if key != "policy.checkpoint":
        return value
    from benchmark.build import normalize_checkpoint
    from benchmark.envs import load_env_cfg

    cfg = OmegaConf.create({"policy": {"checkpoint": value}, "env": load_env_cfg(env)})
    normalize_checkpoint(cfg)
    return str(cfg.policy.checkpoint)


def view_name(d: Design, env: str) -> str:
    from benchmark.report.model import env_label

    return f"{d.experiment} · {env_label(env)}"


@contextlib.contextmanager
def stable_ids(seed: str):
    """The library names panels and run sets with `random`: seeded here, so a rebuilt
    definition is the same file (the global random state is restored after)."""
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)


def workspaces(d: Design) -> list[Any]:
    """One saved workspace view per env of the sweep."""
    import wandb_workspaces.workspaces as ws
    from wandb_workspaces import expr

    from benchmark.report.model import env_label

    views = []
    with stable_ids(f"workspace/{d.preset}"):
        for env in d.envs:
            settings = ws.RunsetSettings(
                filters=run_filters(d, env),
                groupby=[expr.Config(g) for g in d.grouping],
                group_colors=_group_colors(d, env),
                pinned_columns=_pinned_columns(d, env),
                order=[expr.Ordering(expr.Metric("Name"), ascending=True)],
            )
            views.append(
                ws.Workspace(
                    entity=d.entity or "",
                    project=d.project,
                    name=view_name(d, env),
                    sections=[
                        ws.Section(
                            name=f"{env_label(env)}: {d.question.title}",
                            panels=panels(d, env),
                            is_open=True,
                        )
                    ],
                    settings=ws.WorkspaceSettings(max_runs=max(d.n_runs, 10)),
                    runset_settings=settings,
                )
            )
    return views


def report_contents(d: Design) -> tuple[list[str], list[str]]:
    """The tables and figures of the local report (`python -m benchmark.report`, logged to the
    sweep's `report` run) that this preset's W&B report shows."""
    from benchmark.report import PLOTS, TABLES

    methods = d.axes.get("method", [])
    tables = ["main"]
    if "ppo" in methods:
        tables.append("paired")
    if "policy.seed" in d.axes:
        tables.append("policy_seeds")
    if "policy.checkpoint" in d.axes:
        tables.append("policy_checkpoints")
    tables += ["details", "failures"]
    plots = []
    if "gate.tau" in d.axes:
        plots.append("tau")
    if "policy.checkpoint" in d.axes:
        plots.append("checkpoints")
    if "gate.tau" not in d.axes:
        plots.append("trials")
    if "ppo" in methods or "policy.checkpoint" in d.axes:
        plots.append("learning_curves")
    assert set(tables) <= set(TABLES) and set(plots) <= set(PLOTS)
    return tables, plots


def report(d: Design) -> Any | None:
    """The W&B report of a paper preset: per env, the view's panels over its runs; then the
    tables and figures of the local report, from the sweep's `report` run."""
    if not d.question.report:
        return None
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces import expr

    from benchmark.report.model import env_label

    blocks: list[Any] = [wr.P(d.question.text)]
    with stable_ids(f"report/{d.preset}"):
        for env in d.envs:
            blocks += [
                wr.H2(env_label(env)),
                wr.PanelGrid(
                    runsets=[
                        wr.Runset(
                            entity=d.entity or "",
                            project=d.project,
                            name=env_label(env),
                            filters=run_filters(d, env),
                            groupby=[f"config.{g}" for g in d.grouping],
                            order=[wr.OrderBy("Name", ascending=True)],
                        )
                    ],
                    panels=panels(d, env),
                ),
            ]
        tables, plots = report_contents(d)
        blocks += [
            wr.H2("Tables and figures of the local report"),
            wr.P(
                "As `python -m benchmark.report <sweep dir>` writes them, logged to the sweep's "
                "W&B run named `report`."
            ),
            wr.PanelGrid(
                runsets=[
                    wr.Runset(
                        entity=d.entity or "",
                        project=d.project,
                        name="report run",
                        filters=[
                            expr.Metric("Group") == d.experiment,
                            expr.Metric("JobType") == "report",
                        ],
                    )
                ],
                panels=[wr.WeavePanelSummaryTable(table_name=t) for t in tables]
                + [wr.MediaBrowser(title=p, media_keys=[p]) for p in plots],
            ),
        ]
        return wr.Report(
            entity=d.entity or "",
            project=d.project,
            title=f"{d.experiment}: {d.question.title}",
            description=d.question.text,
            blocks=blocks,
        )
