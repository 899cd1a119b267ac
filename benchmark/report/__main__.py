"""CLI: python -m benchmark.report SWEEP_DIR [--out DIR] [--no-wandb] [--brief] [--page NAME]. Prints
the Markdown report (--brief: the main table, the paired differences and where the rest is); logs
tables and plots to one W&B run (name 'report') when the sweep had tracking enabled; --page also
writes the report as docs/measured/NAME.md (benchmark.measured), the page the docs quote."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from benchmark.report import SECTIONS, Report, build_report

log = logging.getLogger("benchmark.report")


def tracking_config(sweep_cfg: DictConfig | None, fallback_dir: Path) -> DictConfig | None:
    """The sweep's `tracking` node resolved outside Hydra (`${hydra:...}` read from the saved
    hydra node), or None when tracking was off."""
    if sweep_cfg is None or not OmegaConf.select(sweep_cfg, "tracking.enabled", default=False):
        return None
    data = OmegaConf.to_container(sweep_cfg, resolve=False)
    text = re.sub(r"\$\{hydra:([^}]+)\}", r"${hydra_saved_.\1}", OmegaConf.to_yaml(data))
    cfg = OmegaConf.create(text)
    cfg.hydra_saved_ = data.get("hydra", {})
    try:
        tracking = OmegaConf.to_container(cfg.tracking, resolve=True)
    except Exception as exc:  # noqa: BLE001 - fall back to an offline run beside the report
        log.warning(
            "cannot resolve the sweep's tracking config (%s): offline run in %s", exc, fallback_dir
        )
        raw = OmegaConf.to_container(cfg.tracking, resolve=False)
        tracking = {k: v for k, v in raw.items() if not (isinstance(v, str) and "${" in v)}
        tracking.update(dir=str(fallback_dir), mode="offline")
    tracking["project"] = tracking.get("project") or "ask-benchmark"
    return OmegaConf.create(tracking)


def log_to_wandb(report: Report) -> str | None:
    """One summary run: every table as a W&B table, every plot as an image. Returns the run dir."""
    from benchmark.tracking import Tracker

    cfg = tracking_config(report.sweep.config, report.out / "wandb")
    if cfg is None:
        return None
    sweep = report.sweep
    tracker = Tracker(
        cfg,
        name="report",
        group=sweep.experiment,
        job_type="report",
        config={"sweep_dir": str(sweep.root), "jobs": len(sweep.cells)},
    )
    run_dir = None
    with tracker:
        if tracker.run is not None:
            run_dir = str(getattr(tracker.run, "dir", "") or "")
        for t in report.tables:
            tracker.table(t.name, t.records())
        for p in report.plots:
            tracker.image(p.stem, str(p))
        tracker.summary(
            {
                f"jobs_{s}": sum(c.status == s for c in sweep.cells)
                for s in ("ok", "failed", "missing")
            }
        )
    return run_dir


def brief(report: Report) -> str:
    """What a person reads first: the main table, the paired differences with PPO-only, and the
    paths of the full report and its figures."""
    lines = []
    for name in ("main", "paired"):
        table = report.table(name)
        if table is not None:
            lines += [f"## {SECTIONS[name]}", "", table.to_markdown(title=False), ""]
    if (line := headline(report)) is not None:
        lines += [line, ""]
    lines.append(f"full report: {report.out / 'report.md'}")
    lines += [f"figure: {p}" for p in report.plots]
    return "\n".join(lines)


def headline(report: Report) -> str | None:
    """One line on what the paired table shows: the largest paired gain over PPO-only in its
    first column, whether its CI excludes 0, and the methods that reach it."""
    table = report.table("paired")
    if table is None:
        return None
    head = table.header()
    scored = []
    for idx, vals in table.rows:
        m = re.match(r"\s*([+-]?\d+(?:\.\d+)?)", str(vals[0])) if vals else None
        if m:
            scored.append((float(m.group(1)), " ".join(idx), str(vals[0])))
    if not scored:
        return None
    top = max(v for v, _, _ in scored)
    best = [(label, shown) for v, label, shown in scored if v == top]
    labels = ", ".join(label for label, _ in best)
    shown = best[0][1]
    column = head[len(table.index)]
    sure = "its 95% CI excludes 0" if shown.endswith("*") else "its 95% CI includes 0"
    return (
        f"What it shows: against PPO-only on the same seeds, the largest gain in {column} is "
        f"{shown.rstrip('*')} ({sure}), by {labels}."
    )


def write_measured_page(report: Report, name: str, argv: list[str] | None) -> Path:
    """docs/measured/<name>.md: the report's text, its figures named by their paths in the
    sweep (a page holds text; the images stay with the run)."""
    from benchmark.measured import write_page

    args = sys.argv[1:] if argv is None else argv
    lines = [line for line in report.markdown.splitlines() if not line.startswith("![")]
    lines += [f"- figure: `{p}`" for p in report.plots]
    command = " ".join(["python -m benchmark.report", *args])
    return write_page(name, f"Measured: {report.sweep.experiment}", "\n".join(lines), command)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmark.report", description=__doc__)
    parser.add_argument(
        "sweep_dir",
        type=Path,
        help="a Hydra multirun dir (holds multirun.yaml and numbered job dirs)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to write the report (default: SWEEP_DIR/report)",
    )
    parser.add_argument(
        "--no-wandb",
        action="store_true",
        help="do not log to W&B even when the sweep had tracking enabled",
    )
    parser.add_argument(
        "--brief",
        action="store_true",
        help="print only the main table and the paired differences, and where the report is",
    )
    parser.add_argument(
        "--page",
        default=None,
        metavar="NAME",
        help="also write the report as docs/measured/NAME.md, with the command, commit, date and "
        "machine (`make demo`: --page demo)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        report = build_report(args.sweep_dir, args.out)
    except (FileNotFoundError, ValueError) as exc:
        parser.error(str(exc))
    if args.page:
        print(f"measured page: {write_measured_page(report, args.page, argv)}", file=sys.stderr)
    if args.brief:
        print(brief(report))
    else:
        print(report.markdown)
        print(
            f"Written to {report.out}: "
            + ", ".join(sorted(p.name for p in report.out.iterdir() if p.is_file())),
            file=sys.stderr,
        )
    if not args.no_wandb:
        run_dir = log_to_wandb(report)
        if run_dir:
            print(f"W&B run: {run_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
