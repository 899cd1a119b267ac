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
preset's dashboard answers, and which metrics it shows, is the `dashboard:` entry of its YAML
(conf/experiment/<preset>.yaml; `why_none:` for a preset that needs none); a preset without it
has no dashboard until it is added (tests/test_dashboard.py fails for it). The design lives in
benchmark.dashboard_design, the W&B objects in benchmark.dashboard_views."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from pathlib import Path
from typing import Any

import benchmark  # noqa: F401 - registers the config resolvers
from benchmark.dashboard_design import DashboardError, Design, dashboard_entry, design
from benchmark.dashboard_views import (
    panels,
    report,
    report_contents,
    stable_ids,
    view_name,
    workspaces,
)
from benchmark.store import Store

log = logging.getLogger(__name__)

PUBLISH_TIMEOUT = 120.0  # seconds --publish waits for W&B before giving up (the file stays)


# --------------------------------------------------------------------------------------------
# files and publishing


def spec_of(obj: Any) -> dict:
    """The library's own JSON model of a workspace view or a report (what `save` sends)."""
    return obj._to_model().model_dump(mode="json", by_alias=True, exclude_none=True)


def definition(d: Design) -> dict:
    """Everything the dashboard is, as JSON: the views and report specs, and how to publish."""
    rep = report(d)
    with stable_ids(f"spec/{d.preset}"):  # run set ids are drawn when serialized
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
    path: Path | None = None  # the definition, once written: a later failure keeps it
    try:
        d = design(presets[0], rest)
        if d is None:
            why = dashboard_entry(presets[0])["why_none"]
            print(f"preset {presets[0]!r} has no dashboard: {why}")
            return 0
        if args.dry_run:
            print(describe(d))
            return 0
        path = write(d, args.out or Store(d.root).dashboard_dir(d.experiment))
        n = len(d.envs)
        what = f"{n} workspace view{'s' if n > 1 else ''}" + (
            " and a report" if d.question.report else ""
        )
        print(f"{d.preset}: {what}, written to {path} (readable: {path.with_suffix('.md')})")
        if not args.publish:
            print(f"Publish it (online, after `wandb sync`): {d.publish_command()}")
            return 0
        for url in publish(d, args.timeout):
            print(f"saved: {url}")
        return 0
    except DashboardError as exc:  # the preset refused (2), or the publish failed (1)
        if path is None:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"error: not published ({exc}); the definition stays in {path}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
