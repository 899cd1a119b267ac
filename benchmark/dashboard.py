"""W&B dashboards as code: the saved workspace views (and, for the paper's tables and figure, a
report) that compare a preset's ablation, built with `wandb-workspaces` from the preset's own sweep.

    python -m benchmark.dashboard +experiment=<preset> [overrides] [--out DIR] [--dry-run] [--publish]

Offline (the default) it writes the definition, the library's own view and report specs, to
`<paths.root>/dashboards/<experiment>/dashboard.json` (and a readable `dashboard.md`) and says how
to publish; `--publish` saves the views and the report to W&B (`Workspace.save`, `Report.save`),
failing fast with that file kept when the server cannot be reached.

What the sweep varies decides the dashboard (`design`):
- `env`: one workspace view per env (the runs filtered to it), whose panels are the metrics of the
  env's family (`success` for MiniGrid, `accuracy` for HigherLower);
- `method`, `gate`, `slm`, `prompt` (and their keys): grouping by the run config's `method`, the
  label the report gives a cell (`benchmark.tracking.run_config` logs it), PPO-only in grey;
- `policy.checkpoint`, `policy.seed`, any other key: grouping by that config key, in the preset's
  order (Table 3: checkpoint, then method);
- `gate.tau`, `gate.mc_samples`: line panels of the metrics against tau (N) instead of bars.
Every view selects the runs of the experiment's W&B group, without its `report` run. What each
preset's dashboard answers, and which metrics it shows, is `PRESETS`; a preset missing there has
no dashboard until it is added (tests/test_dashboard.py fails for it)."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import random
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

import benchmark  # noqa: F401 - registers the config resolvers
from benchmark.store import Store

log = logging.getLogger(__name__)

PPO_COLOR = "#9e9e9e"  # the PPO-only bars: the reference the other methods are read against
METHOD_GROUPS = ("method", "gate", "slm", "prompt")  # what the `method` label is made of
OWN_GROUP_KEYS = ("prompt.planner_hint",)  # swept keys the `method` label does not show
AXES = {"gate.tau": "tau", "gate.mc_samples": "mc_samples"}  # config key -> its summary key
AXIS_TITLES = {"gate.tau": "τ (entropy threshold, bits)", "gate.mc_samples": "N (MC passes)"}
PUBLISH_TIMEOUT = 120.0  # seconds --publish waits for W&B before giving up (the file stays)


@dataclass(frozen=True)
class Question:
    """What a preset's dashboard answers (`title`, `text`: docs/dashboards.md lists them) and what it
    shows: `metrics` among reward, metric (the env family's success or accuracy), ir, or,
    invalid_rate; `report`: also a W&B report (the paper's tables and figures); `curves`: the
    PPO learning curves."""

    title: str
    text: str
    metrics: tuple[str, ...] = ("reward", "metric", "ir", "or", "invalid_rate")
    report: bool = False
    curves: bool = False


PRESETS: dict[str, Question | None] = {
    "table1": Question(
        "ASK+ Table 1",
        "ASK+ Table 1: per env, do ASK and ASK+ beat PPO-only and SLM-only, and at what query "
        "cost (IR, OR, invalid answers)? One bar per method and SLM; PPO-only in grey.",
        report=True,
    ),
    "table2": Question(
        "ASK+ Table 2 (prompt ablation)",
        "ASK+ Table 2: which prompt variant (basic, enriched, stateful_min, stateful, "
        "stateful+rationale) gives the most reward at the same tau, and how often is the answer "
        "invalid? One bar per prompt variant and SLM.",
        report=True,
    ),
    "table3": Question(
        "ASK+ Table 3 (PPO checkpoints)",
        "ASK+ Table 3: how much of a weaker PPO checkpoint (t1..t4, best, final) does ASK+ "
        "recover? Bars per checkpoint, PPO-only (grey) against ASK+ per SLM.",
        report=True,
    ),
    "fig2_tau": Question(
        "ASK+ Figure 2 (tau grid)",
        "ASK+ Figure 2: reward and IR against a fixed tau grid (line, with the runs as points).",
        metrics=("reward", "ir"),
        report=True,
    ),
    "mc_samples": Question(
        "MC-dropout passes N",
        "Does the gate need 50 MC-dropout passes? Reward and IR against N (tau tuned per N).",
        metrics=("reward", "ir"),
    ),
    "gating": Question(
        "Entropy gate against chance",
        "Does the entropy signal beat chance at equal query budget? Entropy, epistemic and a "
        "random gate matched to the entropy cell's IR, with the oracle and a real SLM: reward "
        "and success at the IR (budget) and OR each gate spends.",
        metrics=("reward", "metric", "ir", "or"),
    ),
    "ceiling": Question(
        "Oracle ceiling per gate",
        "The oracle consultant under each gate: the upper bound each gate can reach (reward and "
        "success per gate, at its IR).",
        metrics=("reward", "metric", "ir"),
    ),
    "feedback": Question(
        "Feedback paper Tables II-IV",
        "Feedback paper Tables II-IV: LLM-only policies with growing prompt context: reward, "
        "success and invalid-answer rate per prompt strategy and model.",
        metrics=("reward", "metric", "invalid_rate"),
    ),
    "belief": Question(
        "Stateful against belief-state",
        "Raw history (stateful) against a belief-state consultant, both entropy-gated: reward, "
        "success, IR and invalid answers.",
        metrics=("reward", "metric", "ir", "invalid_rate"),
    ),
    "brace": Question(
        "Agent-BRACE: frozen against fine-tuned belief",
        "Agent-BRACE: raw history against belief prompting (observed claims, ground-truth "
        "teacher), untrained base against fine-tuned, SLM-only and inside the ASK gate: reward, "
        "success, IR and invalid answers.",
        metrics=("reward", "metric", "ir", "invalid_rate"),
    ),
    "hint_ablation": Question(
        "Policy-hint ablation",
        "Policy-hint ablation: ASK+ with the PPO suggestion in the prompt against without it "
        "(stateful_nohint), per SLM: reward, success, IR, OR, invalid answers.",
    ),
    "policies": Question(
        "PPO fidelity",
        "PPO fidelity: the learning curves (validation reward and success against timesteps, one "
        "line per training seed) and each seed's test reward and success.",
        metrics=("reward", "metric"),
        curves=True,
    ),
    "analysis": Question(
        "Why ASK works (gate quality)",
        "Why ASK works or not (issue 16): PPO-only against ASK with the oracle (the gate's "
        "quality alone) and the dice (a consultant that knows nothing): reward, success, IR, OR "
        "per env; the gate-quality table and ROC curves are in the local report.",
        metrics=("reward", "metric", "ir", "or"),
    ),
    "recurrent": Question(
        "Recurrent policy in HigherLower",
        "Does a recurrent PPO (LSTM) close HigherLower's gap to card counting (accuracy 0.738), "
        "and what does ASK add on top? Reward and accuracy per training seed, PPO-only against "
        "ASK with the oracle, at the IR the gate spends.",
        metrics=("reward", "metric", "ir"),
    ),
    "gates": Question(
        "Gates by what a query costs",
        "Every gate (entropy, epistemic, learned, IR-matched random; never and always as the "
        "ends) with the oracle and the dice over a tau grid: reward against IR per env, the "
        "reward-IR frontier and the tuned points; the frontier area and the gate precision and "
        "recall at fixed IR budgets are in the local report.",
        metrics=("reward", "metric", "ir", "or"),
    ),
    "train": None,  # trains checkpoints only: no evaluation to compare
    "demo": None,  # a walkthrough at toy size: its report is the view
    "smoke": None,  # the machinery at toy size: nothing to compare
    "finetune": None,  # fine-tunes a consultant: its evaluation cells run under other presets
}
NO_DASHBOARD_WHY = {
    "train": "it trains checkpoints only (no evaluated cells to compare)",
    "demo": "it is a walkthrough at toy size (`python -m benchmark.report` on its sweep shows it)",
    "smoke": "it checks the machinery at toy size (nothing to compare)",
}


@dataclass
class Design:
    """A preset's dashboard, as its sweep decides it (see the module docstring)."""

    preset: str
    experiment: str
    question: Question
    envs: list[str]
    axes: dict[str, list[str]]  # the swept keys (Hydra override keys) -> their values
    grouping: list[str]  # W&B config keys, outermost first
    x: str | None  # a config key the metrics are plotted against (gate.tau, gate.mc_samples)
    project: str
    entity: str | None
    root: Path
    metrics_of: dict[str, dict[str, str]] = field(default_factory=dict)  # env -> title -> key

    @property
    def n_runs(self) -> int:
        """How many runs one env's view holds (the grid without the env axis)."""
        n = 1
        for key, values in self.axes.items():
            if key != "env":
                n *= len(values)
        return n

    def publish_command(self) -> str:
        entity = f" tracking.entity={self.entity}" if self.entity else " tracking.entity=<you>"
        return (
            f"python -m benchmark.dashboard +experiment={self.preset}{entity} "
            f"tracking.project={self.project} --publish"
        )


class DashboardError(RuntimeError):
    """A preset without a dashboard definition, or a publish that could not happen."""


# --------------------------------------------------------------------------------------------
# the design: from the preset's sweep


def compose_preset(preset: str, overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """The root config of `+experiment=<preset> <overrides>` with its hydra node (the sweep)."""
    from benchmark.config import compose

    return compose([f"+experiment={preset}", *overrides], hydra=True)


def group_key(override_key: str) -> str:
    """The W&B config key a swept override key is grouped by."""
    key = override_key.lstrip("+~")
    if key.split(".")[0] in METHOD_GROUPS and key not in AXES and key not in OWN_GROUP_KEYS:
        return "method"
    return key if "." in key else f"{key}.name"


def sweep_axes(cfg: DictConfig) -> dict[str, list[str]]:
    """Swept key -> values, in the preset's order: the keys of `hydra.sweeper.params` and any key
    the command line gives several values, expanded as Hydra's basic sweeper does."""
    from benchmark.config import expand_sweep

    params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    values: dict[str, list[str]] = {}
    for job in expand_sweep(cfg):
        for override in job:
            key, value = override.split("=", 1)
            seen = values.setdefault(key, [])
            if value not in seen:
                seen.append(value)
    return {k: v for k, v in values.items() if k in params or len(v) > 1}


def family_metrics(env: str, names: tuple[str, ...]) -> dict[str, str]:
    """Panel title -> summary key of the env family's metrics (`benchmark.metrics.MAIN_FIGURE`:
    IR and OR as per-episode means, the invalid rate pooled over queries)."""
    from benchmark.metrics import MAIN_FIGURE
    from benchmark.report.tables import RATES

    metric = _metric(env)
    out = {}
    for name in names:
        if name == "reward":
            out["reward"] = "reward_mean"
        elif name == "metric":
            out[metric] = f"{metric}_mean"
        else:
            figure = MAIN_FIGURE[name]
            label, definition, _ = RATES[name]
            out[f"{label} ({definition})"] = (
                figure if figure.endswith("_pooled") else f"{figure}_mean"
            )
    return out


def design(preset: str, overrides: list[str] | tuple[str, ...] = ()) -> Design | None:
    """The dashboard of `preset` (None for a preset that needs none); DashboardError for a
    preset `PRESETS` does not know."""
    if preset not in PRESETS:
        raise DashboardError(
            f"no dashboard defined for preset {preset!r}: add what it answers to "
            "benchmark.dashboard.PRESETS (None if it needs none)"
        )
    question = PRESETS[preset]
    cfg = compose_preset(preset, overrides)
    if question is None:
        return None
    axes = sweep_axes(cfg)
    envs = axes.get("env") or [str(cfg.env.name)]
    x = next((k for k in axes if k in AXES), None)
    grouping: list[str] = []
    for key in axes:
        if key == "env" or key == x:
            continue
        g = group_key(key)
        if g not in grouping:
            grouping.append(g)
    if x is not None and not grouping:
        grouping = ["method"]  # one group per view: its runs make one line against x
    return Design(
        preset=preset,
        experiment=str(cfg.experiment_name),
        question=question,
        envs=list(envs),
        axes=axes,
        grouping=grouping,
        x=x,
        project=str(OmegaConf.select(cfg, "tracking.project", default=None) or "ask-benchmark"),
        entity=OmegaConf.select(cfg, "tracking.entity", default=None),
        root=Path(str(cfg.paths.root)),
        metrics_of={env: family_metrics(env, question.metrics) for env in envs},
    )


# --------------------------------------------------------------------------------------------
# the W&B objects (wandb-workspaces)


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
        curves = {"eval_reward": "validation reward", "eval_success": f"validation {_metric(env)}"}
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


def _metric(env: str) -> str:
    """The env family's metric: success (MiniGrid) or accuracy (HigherLower)."""
    from benchmark.envs import load_env_cfg

    return str(load_env_cfg(env).get("metric") or "success")


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
def _stable_ids(seed: str):
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
    with _stable_ids(f"workspace/{d.preset}"):
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
    with _stable_ids(f"report/{d.preset}"):
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


# --------------------------------------------------------------------------------------------
# files and publishing


def spec_of(obj: Any) -> dict:
    """The library's own JSON model of a workspace view or a report (what `save` sends)."""
    return obj._to_model().model_dump(mode="json", by_alias=True, exclude_none=True)


def definition(d: Design) -> dict:
    """Everything the dashboard is, as JSON: the views and report specs, and how to publish."""
    rep = report(d)
    with _stable_ids(f"spec/{d.preset}"):  # run set ids are drawn when serialized
        views = [spec_of(w) for w in workspaces(d)]
        rep_spec = spec_of(rep) if rep is not None else None
    return {
        "preset": d.preset,
        "experiment": d.experiment,
        "question": d.question.text,
        "entity": d.entity,
        "project": d.project,
        "envs": d.envs,
        "sweep": d.axes,
        "grouping": d.grouping,
        "x": d.x,
        "publish": d.publish_command(),
        "workspaces": views,
        "report": rep_spec,
    }


def describe(d: Design) -> str:
    """The dashboard in words (dashboard.md, and what --dry-run prints)."""
    lines = [f"# W&B dashboard of `{d.preset}`: {d.question.title}", "", d.question.text, ""]
    lines.append(
        f"Runs: project `{d.project}`, group `{d.experiment}` (without its `report` run), "
        f"grouped by {', '.join(f'`{g}`' for g in d.grouping) or 'nothing'}."
    )
    for env in d.envs:
        lines += ["", f"## View `{view_name(d, env)}` (env `{env}`)", ""]
        for p in panels(d, env):
            kind = type(p).__name__
            if kind == "ScatterPlot":
                what = f"{p.y.name} against config {p.x.name}"
            elif kind == "LinePlot":
                what = f"{', '.join(str(y) for y in p.y)} against {p.x}"
            else:
                what = ", ".join(m.name for m in p.metrics)
            lines.append(f"- {kind} `{p.title}`: {what}")
    rep = report(d)
    if rep is not None:
        tables, plots = report_contents(d)
        lines += [
            "",
            f"## Report `{rep.title}`",
            "",
            "The views' panels per env, then the local report's tables "
            f"({', '.join(tables)}) and figures ({', '.join(plots)}) from the `report` run.",
        ]
    lines += ["", "Publish (online, after `wandb sync`):", "", f"    {d.publish_command()}", ""]
    return "\n".join(lines)


def write(d: Design, out: Path) -> Path:
    """dashboard.json (the specs) and dashboard.md into `out`; returns the JSON file."""
    from benchmark import results

    out.mkdir(parents=True, exist_ok=True)
    path = out / "dashboard.json"
    results.write_text_atomic(path, json.dumps(definition(d), indent=1, ensure_ascii=False))
    results.write_text_atomic(out / "dashboard.md", describe(d))
    return path


def publish(d: Design, timeout: float = PUBLISH_TIMEOUT) -> list[str]:
    """Save the views and the report to W&B (the library's `save`); their URLs. Fails fast, with
    DashboardError, when the server does not answer; never waits longer than `timeout`."""
    import wandb

    from benchmark.tracking import unreachable

    why = unreachable(wandb.setup().settings.base_url)
    if why is not None:
        raise DashboardError(f"W&B is not reachable: {why}")
    outcome: dict[str, Any] = {}

    def save() -> None:
        try:
            entity = d.entity or wandb.Api().default_entity
            urls = []
            for view in workspaces(d):
                view.entity = entity
                urls.append(view.save().url)
            rep = report(d)
            if rep is not None:
                rep.entity = entity
                for block in rep.blocks:
                    for runset in getattr(block, "runsets", []):
                        runset.entity = entity
                urls.append(rep.save().url)
            outcome["urls"] = urls
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            outcome["error"] = exc

    worker = threading.Thread(target=save, daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise DashboardError(f"W&B did not answer within {timeout:g} s")
    if "error" in outcome:
        exc = outcome["error"]
        raise DashboardError(f"saving to W&B failed: {type(exc).__name__}: {exc}") from exc
    return outcome["urls"]


# --------------------------------------------------------------------------------------------
# CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmark.dashboard",
        description="Build the W&B dashboard of a preset: +experiment=<preset> [overrides].",
    )
    parser.add_argument(
        "--out",
        "--save-to",
        type=Path,
        default=None,
        help="default: <paths.root>/dashboards/<experiment>",
    )
    parser.add_argument("--dry-run", action="store_true", help="print it; write nothing")
    parser.add_argument("--publish", action="store_true", help="save it to W&B (online)")
    parser.add_argument(
        "--timeout", type=float, default=PUBLISH_TIMEOUT, help="seconds --publish may wait for W&B"
    )
    args, overrides = parser.parse_known_args(argv)
    flags = [o for o in overrides if o.startswith("-")]
    if flags:
        parser.error(f"unknown option(s) {flags}")
    presets = [o.split("=", 1)[1] for o in overrides if o.lstrip("+").startswith("experiment=")]
    if len(presets) != 1:
        parser.error("name one preset: +experiment=<preset> (conf/experiment/)")
    rest = [o for o in overrides if not o.lstrip("+").startswith("experiment=")]
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        d = design(presets[0], rest)
    except DashboardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if d is None:
        print(f"preset {presets[0]!r} has no dashboard: {NO_DASHBOARD_WHY[presets[0]]}")
        return 0
    if args.dry_run:
        print(describe(d))
        return 0
    out = args.out or Store(d.root).dashboard_dir(d.experiment)
    path = write(d, out)
    n = len(d.envs)
    what = f"{n} workspace view{'s' if n > 1 else ''}" + (
        " and a report" if d.question.report else ""
    )
    print(f"{d.preset}: {what}, written to {path} (readable: {path.with_suffix('.md')})")
    if not args.publish:
        print(f"Publish it (online, after `wandb sync`): {d.publish_command()}")
        return 0
    try:
        urls = publish(d, args.timeout)
    except DashboardError as exc:
        print(f"error: not published ({exc}); the definition stays in {path}", file=sys.stderr)
        return 1
    for url in urls:
        print(f"saved: {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
