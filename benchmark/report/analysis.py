"""The report's gate-quality section, for the cells run with eval.step_records=true:
a table of precision, recall, entropy AUROC, help and harm rates per cell (the decomposition of
an ASK gain: fixed - broken steps), ROC curves of the entropies per env, and where queries land
(a heatmap by grid position for navigation envs, rates by card rank and decision index for
HigherLower). Numbers come from the summary's gate_* fields, or from steps.jsonl.gz when the
summary predates them; docs/analysis.md says how to read each figure."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from benchmark import results
from benchmark.analysis import quality as gq
from benchmark.analysis import where
from benchmark.analysis.steps import STEPS_FILE, UNCHECKED, read_checked_steps
from benchmark.report.model import (
    Cell,
    Layout,
    Sweep,
    add_cell_row,
    cell_table,
    env_label,
    step_numbers,
    unique_cells,
    varying_label,
)
from benchmark.report.render import DASH, Table, fmt

log = logging.getLogger(__name__)
TABLE = "gate_quality"
PLOTS = ("gate_roc",)  # plus where_<env>.png per env (removed by the glob `where_*.png`)
COLUMNS = {  # column -> (summary rate, scale)
    "PPO error": ("ppo_error_rate", 1),
    "precision": ("precision", 1),
    "recall": ("recall", 1),
    "AUROC H": ("auroc_total", 1),
    "AUROC epistemic": ("auroc_epistemic", 1),
    "AUROC score": ("auroc_gate_score", 1),  # a trained gate's own score (gate=learned)
    "help": ("help_rate", 1),
    "harm": ("harm_rate", 1),
    "fixed /100": ("fixed", 100),
    "broken /100": ("broken", 100),
}


def job_dir(sweep: Sweep, c: Cell) -> Path:
    d = sweep.root / c.job
    return d if d.is_dir() else sweep.root


def load_steps(sweep: Sweep) -> tuple[dict[str, list[dict]], dict[str, str]]:
    """job -> its step records, for the finished cells whose records are theirs (count, digest,
    unique (seed, step) and the episodes' seeds against the cell's summary and episodes:
    `analysis.steps.read_checked_steps`), and job -> why its records are left out, or
    "unchecked" (a summary older than the count and digest)."""
    out, notes = {}, {}
    for c in sweep.ok:
        path = job_dir(sweep, c) / STEPS_FILE
        if not path.exists():
            continue
        episodes = results.read_jsonl(job_dir(sweep, c) / "episodes.jsonl")
        records, state = read_checked_steps(path, c.summary or {}, episodes)
        if state != "ok":
            notes[c.job] = state
        if records is None:
            log.warning("job %s left out of the step-record sections: %s", c.job, state)
        else:
            out[c.job] = records
    return out, notes


def steps_note(notes: dict[str, str]) -> list[str]:
    """The report's lines on step records it refused or could not check (empty: none)."""
    refused = {j: n for j, n in notes.items() if n != UNCHECKED}
    unchecked = sorted(j for j, n in notes.items() if n == UNCHECKED)
    lines = [
        f"- job {j}: step records refused, left out of the step-record tables and figures: {n}"
        for j, n in sorted(refused.items())
    ]
    if unchecked:
        lines.append(
            f"- jobs {', '.join(unchecked)}: step records unchecked (their summary.json predates "
            "the records' count and digest)"
        )
    return lines


def quality(c: Cell, records: list[dict] | None) -> dict[str, Any] | None:
    """The cell's gate_* fields: its summary's, else computed from its step records."""
    return step_numbers(c, records, (f"{gq.PREFIX}judged",), gq.gate_quality)


def _cells(sweep: Sweep, steps: dict[str, list[dict]]) -> list[Cell]:
    """The cells with gate-quality numbers, one per cell (jobs that differ only in keys a cell
    does not read share it)."""
    cells = unique_cells(
        [c for c in sweep.ok if c.job in steps or f"{gq.PREFIX}judged" in (c.summary or {})]
    )
    return sorted(cells, key=sweep.cell_order)


def _label(c: Cell, lay: Layout) -> str:
    """The cell's method, with its checkpoint and policy seed where the shown cells differ in
    them (`Layout.of_cells`; cells that differ only in a training seed would otherwise share a
    title)."""
    return varying_label(c, lay, ("checkpoint", "policy_seed"))


def _value(q: dict, rate: str, scale: float = 1) -> str:
    key = f"{gq.PREFIX}{rate}"
    if q.get(key) is None:
        return DASH
    low, high = q.get(f"{key}_ci95_low"), q.get(f"{key}_ci95_high")
    mean = q[key] * scale
    if low is None or high is None:
        return f"{mean:.3f}"
    if scale == 1:
        return fmt((mean, low, high))
    return f"{mean:.1f} [{low * scale:.1f}, {high * scale:.1f}]"


def gate_quality_table(sweep: Sweep, steps: dict[str, list[dict]]) -> Table | None:
    cells = _cells(sweep, steps)
    if not cells:
        return None
    lay = Layout.of_cells(cells)
    table = cell_table(
        TABLE,
        "Gate quality against the expert (test seeds, pooled over steps, 95% bootstrap CI over "
        "episodes)",
        ["checkpoint", "tau", "judged steps", "IR", *COLUMNS],
        notes=[
            "A step is judged when PPO acted and the expert has an answer; PPO is wrong when its "
            "action is not in the expert's set of optimal actions. precision = wrong among "
            "queried; recall = queried among wrong; AUROC = how well the total (H) or epistemic "
            "MC-dropout entropy (AUROC score: a learned gate's classifier score) ranks wrong "
            "steps above right ones (0.5 = chance); help = "
            "queried wrong steps whose final action is optimal; harm = queried right steps whose "
            "final action is not; fixed - broken (per 100 judged steps) is the change in "
            "optimal actions that asking made, fixed = PPO error x recall x help."
        ],
    )
    for c in cells:
        q = quality(c, steps.get(c.job))
        if q is None:
            continue
        judged = q.get(f"{gq.PREFIX}judged") or 0
        queried = q.get(f"{gq.PREFIX}queried") or 0
        add_cell_row(
            table,
            c,
            _label(c, lay),
            [
                str(c.checkpoint_name or c.checkpoint or DASH),
                DASH if c.tau is None else f"{c.tau:.3f}",
                f"{judged:,}",
                f"{queried / judged:.3f}" if judged else DASH,
                *(_value(q, rate, scale) for rate, scale in COLUMNS.values()),
            ],
        )
    return table


# --------------------------------------------------------------------------------------------
# figures


def roc_plot(sweep: Sweep, steps: dict[str, list[dict]], out: Path) -> Path | None:
    """ROC curves of the total (solid) and epistemic (dashed) entropy as detectors of a wrong
    PPO action, one panel per env, one colour per cell."""
    from benchmark.report.figures import figure_grid, save_figure

    cells = [c for c in _cells(sweep, steps) if c.job in steps]
    curves: dict[str, list[tuple[Cell, str, np.ndarray, np.ndarray, float]]] = {}
    lay = Layout.of_cells(cells)
    for c in cells:
        for entropy in ("total", "epistemic"):
            scores, wrong = gq.entropy_detection(steps[c.job], entropy)
            if not any(wrong) or all(wrong):
                continue
            fpr, tpr = gq.roc_curve(scores, wrong)
            curves.setdefault(c.env, []).append((c, entropy, fpr, tpr, gq.auroc(scores, wrong)))
    if not curves:
        return None
    envs = [e for e in sweep.envs() if e in curves]
    fig, axes = figure_grid(1, len(envs), w=4.2, h=4.0)
    for j, env in enumerate(envs):
        ax = axes[0][j]
        colours: dict[str, Any] = {}
        for c, entropy, fpr, tpr, area in curves[env]:
            label = _label(c, lay)
            colour = colours.setdefault(label, f"C{len(colours) % 10}")
            name = "H" if entropy == "total" else "epistemic"
            ax.plot(
                fpr,
                tpr,
                color=colour,
                ls="-" if entropy == "total" else "--",
                label=f"{label}: {name} AUROC {area:.2f}",
            )
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls=":")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.01)
        ax.set_xlabel("false alarm rate (right PPO steps above τ)")
        ax.set_ylabel("detection rate (wrong PPO steps above τ)")
        ax.set_title(env_label(env))
        ax.legend(loc="lower right")
    fig.suptitle("Entropy as a detector of a wrong PPO action (solid: total, dashed: epistemic)")
    return save_figure(fig, out / "gate_roc.png")


def where_plots(sweep: Sweep, steps: dict[str, list[dict]], out: Path) -> list[Path]:
    """One figure per env, the one its family declares (`Family.where_figure`): navigation, a
    heatmap per cell (`grid_figure`); HigherLower, rates by rank and by decision index per cell
    (`cards_figure`); none for a family that declares none."""
    from hydra.utils import get_method

    paths = []
    cells = [c for c in _cells(sweep, steps) if c.job in steps]
    for env in sweep.envs():
        mine = [c for c in cells if c.env == env]
        family = _family_of(sweep, mine[0]) if mine else None
        if family is None or family.where_figure is None:
            continue
        path = get_method(family.where_figure)(sweep, env, mine, steps, out)
        if path is not None:
            paths.append(path)
    return paths


def _recorded_env(sweep: Sweep, c: Cell) -> Any:
    """The env config the cell ran, from its cell.json (None when it has none)."""
    record = results.read_json(job_dir(sweep, c) / "cell.json") or {}
    return (record.get("config") or {}).get("env")


def _family_of(sweep: Sweep, c: Cell):
    """The env family of the cell (`family` of the env in its cell.json, else of
    conf/env/<env>.yaml); None for one this checkout does not know."""
    from benchmark.envs import available_envs, get_family, load_env_cfg

    env_cfg = _recorded_env(sweep, c)
    name = env_cfg.get("family") if isinstance(env_cfg, dict) else None
    if name is None and c.env in available_envs():
        name = load_env_cfg(c.env).get("family")
    try:
        return get_family(str(name)) if name else None
    except ValueError as exc:  # a family of another checkout or package: no figure
        log.info("%s: no where figure (%s)", c.job, exc)
        return None


def _task_of(sweep: Sweep, c: Cell):
    """The cell's task, from its cell.json (the env it ran) when that names one of conf/env's Task
    classes (benchmark.envs.recorded_task: nothing else in a results file is called), else
    conf/env/<env>.yaml by name; None: the heatmap is drawn without walls."""
    from benchmark.envs import available_envs, load_env_cfg, make_task, recorded_task

    env_cfg = _recorded_env(sweep, c)
    try:
        if isinstance(env_cfg, dict):
            return recorded_task(env_cfg)
    except Exception as exc:  # noqa: BLE001 - refused or broken: the env by name instead
        log.warning("%s: the env in its cell.json is not used (%s)", c.job, exc)
    try:
        return make_task(load_env_cfg(c.env)) if c.env in available_envs() else None
    except Exception as exc:  # noqa: BLE001 - the heatmap is then drawn without walls
        log.info("no task for %s (%s): heatmap without walls", c.env, exc)
        return None


def grid_figure(sweep: Sweep, env: str, cells: list[Cell], steps, out: Path) -> Path | None:
    """Per cell, heatmaps by grid position of the query rate, the PPO error rate and the share
    of steps over the walls of the test episodes (the MiniGrid families' `where_figure`)."""
    if not any("pos" in r for r in steps[cells[0].job]):  # records from before positions
        return None
    from matplotlib.colors import LinearSegmentedColormap

    from benchmark.report.figures import figure_grid, save_figure

    wall_map = LinearSegmentedColormap.from_list("walls", ["white", "#5a5a5a"])  # 0..1 of seeds

    lay = Layout.of_cells(cells)
    task = _task_of(sweep, cells[0])
    seeds = sorted({r["seed"] for c in cells for r in steps[c.job]})
    walls = where.wall_frequency(task, seeds) if task is not None else None
    if walls is not None and walls.size:
        height, width = walls.shape
    else:
        xs = [r["pos"] for c in cells for r in steps[c.job] if "pos" in r]
        width, height = max(p[0] for p in xs) + 1, max(p[1] for p in xs) + 1
        walls = np.zeros((height, width))
    fig, axes = figure_grid(len(cells), 3, w=3.6, h=3.4)
    for i, c in enumerate(cells):
        t = where.by_position(steps[c.job], width, height)
        visits = np.where(t.steps > 0, t.steps / max(t.steps.sum(), 1), np.nan)
        share = np.nanmax(visits) if np.isfinite(visits).any() else 1.0
        panels = (
            ("query rate", t.query_rate, "viridis", (0, 1)),
            ("PPO error rate", t.error_rate, "plasma", (0, 1)),
            ("share of steps", visits, "Blues", (0, share)),
        )
        for j, (name, values, cmap, (lo, hi)) in enumerate(panels):
            ax = axes[i][j]
            ax.imshow(walls, cmap=wall_map, vmin=0, vmax=1, interpolation="nearest")
            im = ax.imshow(
                np.ma.masked_invalid(values), cmap=cmap, vmin=lo, vmax=hi, interpolation="nearest"
            )
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
            ax.set_title(f"{_label(c, lay)}\n{name}", fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
    fig.suptitle(
        f"{env_label(env)}: where queries land, by agent cell\n(dark grey: a wall in every test "
        "episode, lighter: in some; white: never visited)",
        y=1.0,
    )
    return save_figure(fig, out / f"where_{env}.png")


def cards_figure(sweep: Sweep, env: str, cells: list[Cell], steps, out: Path) -> Path | None:
    """Per cell, the query and PPO error rates by current card and by decision index (the cards
    family's `where_figure`)."""
    if not any("rank" in r for r in steps[cells[0].job]):
        return None
    from benchmark.envs.higherlower import RANK_NAMES
    from benchmark.report.figures import figure_grid, save_figure

    lay = Layout.of_cells(cells)
    fig, axes = figure_grid(len(cells), 2, w=5.0, h=3.0)
    for i, c in enumerate(cells):
        records = steps[c.job]
        n_decisions = max((r.get("decision") or 0) for r in records) + 1
        for j, (t, ticks, xlabel) in enumerate(
            (
                (where.by_rank(records), list(RANK_NAMES), "current card"),
                (where.by_decision(records, n_decisions), None, "decision index"),
            )
        ):
            ax = axes[i][j]
            x = np.arange(len(t.steps))
            ax.plot(x, t.query_rate, marker="o", ms=3, label="query rate")
            ax.plot(x, t.error_rate, marker="s", ms=3, label="PPO error rate")
            if ticks is not None:
                ax.set_xticks(x, ticks)
            ax.set_ylim(-0.03, 1.03)
            ax.set_xlabel(xlabel)
            ax.set_title(_label(c, lay), fontsize=9)
            ax.legend(loc="best")
    fig.suptitle(f"{env_label(env)}: query and PPO error rates by card and by decision", y=1.0)
    return save_figure(fig, out / f"where_{env}.png")
