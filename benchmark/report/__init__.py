"""Tables (Markdown, LaTeX, CSV) and plots (PNG) from a sweep directory:
`python -m benchmark.report SWEEP_DIR [--out DIR] [--no-wandb]`.

loading  a sweep dir -> the model's cells (labels through benchmark.cell.CellSpec)
model    Cell, Sweep; names, order; the row layout tables and figures share
render   Table -> Markdown, LaTeX, CSV; number formats
tables   the table builders
figures  the plots (matplotlib)
analysis gate quality and where queries land (cells with step records)
frontier, objectives
         the reward-IR frontier of each gate; tuned gates by objective
belief, aggregate
         context length and belief quality; IQM over envs and training seeds"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from benchmark import results
from benchmark.report import aggregate, analysis, belief, frontier, objectives
from benchmark.report import runs as runs_report
from benchmark.report.loading import load_sweep, policy_runs
from benchmark.report.model import FAILED, MISSING, OK, Layout, Sweep, build_rows, protocol_caption
from benchmark.report.render import Table
from benchmark.report.tables import (
    cells_csv,
    checkpoints_table,
    details_table,
    failures_table,
    main_table,
    paired_table,
    seeds_table,
)

__all__ = ["Report", "build_report", "load_sweep"]


@dataclass
class Report:
    sweep: Sweep
    out: Path
    tables: list[Table] = field(default_factory=list)
    protocol: str = ""  # model.protocol_caption of the sweep's cells
    plots: list[Path] = field(default_factory=list)
    markdown: str = ""
    step_notes: list[str] = field(default_factory=list)  # step records refused or unchecked

    def table(self, name: str) -> Table | None:
        return next((t for t in self.tables if t.name == name), None)


TABLES = (
    "main",
    "paired",
    "policy_seeds",
    "policy_checkpoints",
    "failures",
    "details",
    analysis.TABLE,
    belief.TABLE,
    frontier.TABLE,
    objectives.TABLE,
    aggregate.TABLE,
    runs_report.TABLE,
)
PLOTS = (
    "reward_vs_ir",
    "tau",
    "checkpoints",
    "trials",
    "learning_curves",
    *analysis.PLOTS,
    belief.PLOT,
    belief.BRIER_PLOT,
    frontier.PLOT,
)
OUTPUTS = (
    ["report.md", "report.tex", "cells.csv"]
    + [f"{t}.{ext}" for t in TABLES for ext in ("csv", "tex")]
    + [f"{p}.png" for p in PLOTS]
)

SECTIONS = {
    "main": "Results",
    "paired": "Paired comparison with PPO-only",
    "policy_seeds": "Policy-seed variance",
    "policy_checkpoints": "PPO checkpoints",
    "failures": "Failed and missing cells",  # the table's own title
    "details": "Thresholds and cost",
    analysis.TABLE: "Gate quality against the expert",
    belief.TABLE: "Context length and belief quality",
    frontier.TABLE: "Reward-IR frontier",
    objectives.TABLE: "Tuned gates by objective",
    aggregate.TABLE: "Aggregate over envs and training seeds",
}


def build_report(sweep_dir: str | Path, out: str | Path | None = None) -> Report:
    """Read the sweep, write every table and plot into `out` (default SWEEP_DIR/report)."""
    from benchmark.report import figures, ir_figure

    sweep = load_sweep(sweep_dir)
    out = Path(out) if out is not None else sweep.root / "report"
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*OUTPUTS, *out.glob("where_*.png")]:  # a rerun must leave no old output
        (out / stale).unlink(missing_ok=True)
    lay = Layout.of(sweep)
    rows = build_rows(sweep, lay)
    runs = policy_runs(sweep)
    steps, notes = analysis.load_steps(sweep)  # per-step records of the cells that have them
    report = Report(sweep=sweep, out=out, protocol=protocol_caption(sweep.cells))
    report.step_notes = analysis.steps_note(notes)
    for table in (
        main_table(sweep, rows, lay),
        paired_table(sweep, rows, lay),
        seeds_table(sweep, lay),
        checkpoints_table(runs),
        failures_table(sweep),
        details_table(sweep, lay),
        analysis.gate_quality_table(sweep, steps),
        belief.belief_table(sweep, steps),
        frontier.frontier_table(sweep),
        objectives.objectives_table(sweep, steps),
        aggregate.aggregate_table(sweep),
        runs_report.runs_table(sweep),
    ):
        if table is not None and table.rows:
            if report.protocol:  # every caption names the protocol (and keys cells override)
                table.title = f"{table.title}; {report.protocol}"
            report.tables.append(table)
    for draw in (
        lambda: ir_figure.reward_ir_plot(sweep, lay, out),
        lambda: figures.tau_plot(sweep, lay, out),
        lambda: figures.checkpoint_plot(sweep, lay, out),
        lambda: figures.trials_plot(sweep, lay, out),
        lambda: figures.learning_curves_plot(runs, out),
        lambda: analysis.roc_plot(sweep, steps, out),
        lambda: belief.context_plot(sweep, steps, out),
        lambda: belief.brier_plot(sweep, steps, out),
        lambda: frontier.frontier_plot(sweep, out),
    ):
        path = draw()
        if path is not None:
            report.plots.append(path)
    report.plots += analysis.where_plots(sweep, steps, out)
    report.markdown = _markdown(report)
    results.write_text_atomic(out / "report.md", report.markdown)
    results.write_text_atomic(out / "cells.csv", cells_csv(sweep, lay))
    tex = [f"% {sweep.experiment}: {sweep.root}", "% needs \\usepackage{booktabs}", ""]
    for t in report.tables:
        results.write_text_atomic(out / f"{t.name}.csv", t.to_csv())
        results.write_text_atomic(out / f"{t.name}.tex", t.to_latex())
        tex.append(t.to_latex())
    results.write_text_atomic(out / "report.tex", "\n".join(tex))
    umask = os.umask(0)
    os.umask(umask)
    for f in OUTPUTS:  # the atomic writer's temp files are 0600; reports are for sharing
        if (out / f).exists():
            (out / f).chmod(0o666 & ~umask)
    return report


def _markdown(report: Report) -> str:
    sweep = report.sweep
    counts = {s: sum(c.status == s for c in sweep.cells) for s in (OK, FAILED, MISSING)}
    lines = [
        f"# Report: {sweep.experiment}",
        "",
        f"Sweep: `{sweep.root}`  ",
        f"Jobs: {len(sweep.cells)} ({counts[OK]} finished, {counts[FAILED]} failed, "
        f"{counts[MISSING]} missing)" + ("  " if report.protocol else ""),
        *([f"{report.protocol.capitalize()} (docs/protocol.md)"] if report.protocol else []),
        "",
    ]
    if report.step_notes:
        lines += ["## Step records", "", *report.step_notes, ""]
    for t in report.tables:
        lines += [
            f"## {SECTIONS.get(t.name, t.title)}",
            "",
            t.to_markdown(title=t.title != SECTIONS.get(t.name)),
        ]
    if report.plots:
        lines += ["## Figures", ""]
        lines += [f"![{p.stem}]({p.name})" for p in report.plots]
        lines.append("")
    return "\n".join(lines)
