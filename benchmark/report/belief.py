"""The report's context-length and belief section (Agent-BRACE), for the cells run with
eval.step_records=true: a table of the context length per queried step, the belief correctness
against the true state and the calibration of the certainty labels (share of claims true per
label), and a plot of the mean context length per step, one line per cell (belief prompts stay
near-constant, raw-history prompts grow). Numbers come from the summary's fields
(benchmark.analysis.belief), else from the step records.

A per-step mean averages the episodes still running at that step: in a long run (Quest episodes
of up to 100 steps) most episodes end early, so the late steps rest on the few still going,
mostly the failing ones. Each per-step plot has a lower panel with that count per cell, and the
table says up to which step at least half the cell's episodes run and how many reach its last."""

from __future__ import annotations

from pathlib import Path

from benchmark.analysis.belief import (
    belief_metrics,
    brier_by_step,
    context_by_step,
    running_by_step,
)
from benchmark.report.model import (
    Cell,
    Sweep,
    add_cell_row,
    cell_table,
    env_label,
    method_label,
    method_order,
    step_numbers,
)
from benchmark.report.render import DASH, Table, fmt

TABLE = "belief"
PLOT = "context_length"
BRIER_PLOT = "belief_brier"
LABEL_COLUMNS = ("confirmed", "almost certain", "probable", "possible", "unlikely", "doubtful")


def metrics(c: Cell, records: list[dict] | None) -> dict:
    """The cell's context/belief fields: its summary's, else computed from its step records."""
    keys = ("context_tokens_mean", "belief_steps")
    return step_numbers(c, records, keys, belief_metrics) or {}


def _cells(sweep: Sweep, steps: dict[str, list[dict]]) -> list[tuple[Cell, dict]]:
    """The cells with context/belief numbers, each with its numbers (computed once)."""
    numbered = [(c, metrics(c, steps.get(c.job))) for c in sweep.ok]
    envs = sweep.envs()
    return sorted(
        ((c, m) for c, m in numbered if m),
        key=lambda cm: (envs.index(cm[0].env), method_order(cm[0]), cm[0].job),
    )


def _ci(m: dict, key: str, digits: int = 3) -> str:
    if m.get(f"{key}_mean") is None:
        return DASH
    low, high = m.get(f"{key}_ci95_low"), m.get(f"{key}_ci95_high")
    if digits == 0:
        return f"{m[f'{key}_mean']:.0f} [{low:.0f}, {high:.0f}]"
    return fmt((m[f"{key}_mean"], low, high))


def belief_table(sweep: Sweep, steps: dict[str, list[dict]]) -> Table | None:
    cells = _cells(sweep, steps)
    if not cells:
        return None
    table = cell_table(
        TABLE,
        "Context length and belief quality (test seeds, 95% bootstrap CI over episodes)",
        [
            "context tokens",
            "first -> last",
            "half running to step",
            "running at last step",
            "belief correct",
            "update fail",
            "ECE",
            "Brier",
            "Brier first -> last",
            *(f"true|{lb}" for lb in LABEL_COLUMNS),
        ],
        notes=[
            "context tokens: the longest prompt of a queried step (per-episode mean); first -> "
            "last: its first and last queried step. belief correct: mean verdict of the held "
            "belief's verifiable claims against the true state (1 correct, 0.5 right fact with a "
            "miscalibrated label, 0 wrong). true|label: share of claims with that label whose "
            "fact holds (n claims); calibrated when it matches the label's probability "
            "(confirmed 1, almost certain 0.9, probable 0.7, possible 0.5, unlikely 0.3, "
            "doubtful 0.1); ECE: their n-weighted mean gap. Brier: the mean squared gap between "
            "a claim's label probability ('unknown' at 0, as Agent-BRACE reads it) and whether "
            "its fact holds, over verifiable claims; first -> last: each episode's first and "
            "last held step (belief_brier.png: per step).",
            "half running to step: the last step at which at least half the cell's episodes "
            "still run; a per-step mean after it (context_length.png, belief_brier.png) averages "
            "fewer than half, those still going (mostly the failing ones in a long run). running "
            "at last step: the episodes still running at the cell's last recorded step, of its "
            "episodes (those that reached the step cap when any did). The plots' lower panels "
            "give the count at every step. Both need the cell's step records.",
        ],
    )
    for c, m in cells:
        cal = m.get("belief_calibration") or {}
        first, last = m.get("context_tokens_first_mean"), m.get("context_tokens_last_mean")
        add_cell_row(
            table,
            c,
            method_label(c),
            [
                _ci(m, "context_tokens", 0),
                DASH if first is None else f"{first:.0f} -> {last:.0f}",
                *_survivors(steps.get(c.job)),
                _ci(m, "belief_correctness"),
                DASH
                if m.get("belief_update_failure_rate") is None
                else f"{m['belief_update_failure_rate']:.3f}",
                DASH if m.get("belief_ece") is None else f"{m['belief_ece']:.3f}",
                DASH if m.get("belief_brier") is None else f"{m['belief_brier']:.3f}",
                DASH
                if m.get("belief_brier_first_mean") is None
                else f"{m['belief_brier_first_mean']:.3f} -> {m['belief_brier_last_mean']:.3f}",
                *(
                    f"{cal[lb]['share_true']:.2f} ({cal[lb]['n']})" if lb in cal else DASH
                    for lb in LABEL_COLUMNS
                ),
            ],
        )
    return table


def _survivors(records: list[dict] | None) -> tuple[str, str]:
    """The table's two survivor columns: the last step with at least half the episodes running,
    and how many of them run at the last recorded step (dashes without step records)."""
    x, running, n = running_by_step(records or [])
    if not n:
        return DASH, DASH
    half = max(s for s, k in zip(x, running, strict=True) if 2 * k >= n)
    return str(half), f"{running[-1]}/{n} at {x[-1]}"


def context_plot(sweep: Sweep, steps: dict[str, list[dict]], out: Path) -> Path | None:
    """Mean context tokens per step, one panel per env, one line per cell with the records."""
    return _per_step_plot(sweep, steps, out, context_by_step, PLOT, "context tokens")


def brier_plot(sweep: Sweep, steps: dict[str, list[dict]], out: Path) -> Path | None:
    """Mean Brier score of the certainty labels per step (Agent-BRACE's calibration over an
    episode), one panel per env, one line per cell with verifiable claims."""
    return _per_step_plot(sweep, steps, out, brier_by_step, BRIER_PLOT, "Brier score")


def _per_step_plot(sweep, steps, out: Path, by_step, name: str, what: str) -> Path | None:
    """Per env, the per-step mean (top) over the episodes still running, whose number is
    drawn below it in the same colour, so a late mean resting on few episodes shows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [c for c in sweep.ok if by_step(steps.get(c.job, []))[0]]
    if not cells:
        return None
    envs = [e for e in sweep.envs() if any(c.env == e for c in cells)]
    fig, axes = plt.subplots(
        2,
        len(envs),
        figsize=(5 * len(envs), 5.4),
        squeeze=False,
        sharex="col",
        gridspec_kw={"height_ratios": [2.6, 1]},
    )
    for top, low, env in zip(axes[0], axes[1], envs, strict=True):
        for c in sorted((c for c in cells if c.env == env), key=method_order):
            x, y = by_step(steps[c.job])
            (line,) = top.plot(x, y, marker=".", markersize=3, label=f"{method_label(c)} ({c.job})")
            x, running, _ = running_by_step(steps[c.job])
            low.plot(x, running, color=line.get_color(), drawstyle="steps-post")
        top.set(title=env_label(env), ylabel=f"{what} (mean, episodes running)")
        top.legend(loc="best")
        low.set(xlabel="step", ylabel="episodes running", ylim=(0, None))
    fig.tight_layout()
    path = out / f"{name}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
