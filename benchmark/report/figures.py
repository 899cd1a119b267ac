"""The report's figures (matplotlib, Agg): reward and IR against tau (ASK+ Figure 2), reward
against checkpoint quality (Table 3), Optuna trials, PPO learning curves. Each is drawn only when
the sweep's data supports it; each function returns the PNG path or None."""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmark.metrics import MAIN_FIGURE  # noqa: E402
from benchmark.report.model import (  # noqa: E402
    Cell,
    Layout,
    Sweep,
    checkpoint_order,
    checkpoint_tick,
    env_label,
    is_number,
    ppo_reference,
    row_label,
    threshold_of,
)

plt.rcParams.update(
    {
        "font.size": 10,
        "axes.titlesize": 11,
        "legend.fontsize": 8,
        "axes.grid": True,
        "grid.alpha": 0.3,
    }
)


def figure_grid(n_rows: int, n_cols: int, w: float = 4.2, h: float = 3.2):
    """A figure of n_rows x n_cols panels (`axes` always 2-D), sized alike for every report
    figure."""
    fig, axes = plt.subplots(
        n_rows, n_cols, figsize=(max(w * n_cols, 6.5), h * n_rows), squeeze=False
    )
    return fig, axes


def save_figure(fig, path: Path) -> Path:
    """Write `fig` to `path` at the reports' resolution and close it (pyplot keeps open figures)."""
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _errorbar(ax, xs, cells: list[Cell], metric: str, **kw) -> None:
    vals = [c.value(metric) for c in cells]
    pts = [(x, v) for x, v in zip(xs, vals, strict=True) if v is not None]
    if not pts:
        return
    x, v = zip(*pts, strict=True)
    mean = [m for m, _, _ in v]
    err = [[max(m - lo, 0) for m, lo, _ in v], [max(hi - m, 0) for m, _, hi in v]]
    ax.errorbar(x, mean, yerr=err, marker="o", ms=4, capsize=3, **kw)


def tau_plot(sweep: Sweep, lay: Layout, out: Path) -> Path | None:
    """Figure 2: reward (top) and IR (bottom) against a fixed tau grid, one column per env,
    one line per method; PPO-only as a dashed reference."""
    if not lay.tau_grid:
        return None
    lines: dict[tuple[str, str], list[Cell]] = defaultdict(list)
    for c in sweep.ok:
        if is_number(c.tau_setting):
            base = row_label(_without_tau(c), lay)
            if lay.checkpoint:
                base += f" @{c.checkpoint}"
            if lay.policy_seed:
                base += f" s{c.policy_seed}"
            lines[(c.env, base)].append(c)
    envs = [e for e in sweep.envs() if any(k[0] == e and len(v) > 1 for k, v in lines.items())]
    if not envs:
        return None
    fig, axes = figure_grid(2, len(envs))
    for j, env in enumerate(envs):
        top, bottom = axes[0][j], axes[1][j]
        mine = sorted((label, cells) for (e, label), cells in lines.items() if e == env)
        taus = [float(c.tau_setting) for _, cells in mine for c in cells]
        step = 0.012 * ((max(taus) - min(taus)) or 1.0)
        for i, (label, cells) in enumerate(mine):
            cells.sort(key=lambda c: float(c.tau_setting))
            dodge = step * (i - (len(mine) - 1) / 2)
            xs = [float(c.tau_setting) + dodge for c in cells]
            _errorbar(top, xs, cells, "reward", label=label)
            _errorbar(bottom, xs, cells, MAIN_FIGURE["ir"], label=label)
        ref = ppo_reference(next(c for (e, _), cs in lines.items() if e == env for c in cs), sweep)
        if ref is not None and ref.value("reward") is not None:
            top.axhline(ref.value("reward")[0], color="k", ls="--", lw=1, label="PPO-only")
        top.set_title(env_label(env))
        top.set_ylabel("reward")
        bottom.set_ylabel("IR (queried steps / steps)")
        bottom.set_ylim(-0.03, 1.03)
        bottom.set_xlabel("τ (entropy threshold, bits)")
        top.legend(loc="best")
    fig.suptitle("Reward and intervention rate against τ (95% CI)", y=1.0)
    return save_figure(fig, out / "tau.png")


def _without_tau(c: Cell) -> Cell:
    return replace(c, tau_setting=None)


def checkpoint_plot(sweep: Sweep, lay: Layout, out: Path) -> Path | None:
    """Table 3: reward (top) and IR (bottom) against the checkpoint (weakest left), PPO-only vs
    each assisted method, one column per env."""
    if not lay.checkpoint:
        return None
    envs = [
        e
        for e in sweep.envs()
        if len({c.checkpoint for c in sweep.ok if c.env == e and c.checkpoint}) > 1
    ]
    if not envs:
        return None
    fig, axes = figure_grid(2, len(envs))
    for j, env in enumerate(envs):
        cells = [c for c in sweep.ok if c.env == env and c.checkpoint is not None]
        order = sorted({c.checkpoint for c in cells}, key=checkpoint_order)
        names = {c.checkpoint: c.checkpoint_name or c.checkpoint for c in cells}
        lines: dict[str, list[Cell]] = defaultdict(list)
        for c in cells:
            label = row_label(c, lay) + (f" s{c.policy_seed}" if lay.policy_seed else "")
            lines[label].append(c)
        top, bottom = axes[0][j], axes[1][j]
        ordered = sorted(lines.items(), key=lambda kv: (kv[0] != "PPO", kv[0]))
        for i, (label, cs) in enumerate(ordered):
            cs.sort(key=lambda c: checkpoint_order(c.checkpoint))
            dodge = 0.05 * (i - (len(ordered) - 1) / 2)  # side by side, not on top of each other
            xs = [order.index(c.checkpoint) + dodge for c in cs]
            style = {"color": "k", "ls": "--"} if label.startswith("PPO") else {}
            _errorbar(top, xs, cs, "reward", label=label, **style)
            if not label.startswith("PPO"):
                _errorbar(bottom, xs, cs, MAIN_FIGURE["ir"], label=label)
        for ax in (top, bottom):
            ax.set_xticks(range(len(order)))
            ax.set_xticklabels([checkpoint_tick(names[k]) for k in order])
        top.set_title(env_label(env))
        top.set_ylabel("reward")
        top.legend(loc="best")
        bottom.set_ylabel("IR")
        bottom.set_ylim(-0.03, 1.03)
        bottom.set_xlabel("PPO checkpoint (validation-reward threshold)")
    fig.suptitle("Robustness to a weak policy: reward and IR per checkpoint (95% CI)", y=1.0)
    return save_figure(fig, out / "checkpoints.png")


def trials_plot(sweep: Sweep, lay: Layout, out: Path) -> Path | None:
    """Optuna's trials per tuned cell: tau against validation reward, coloured by IR; the chosen
    tau as a vertical line."""
    cells = [c for c in sweep.ok if c.trials and any(is_number(t.get("tau")) for t in c.trials)]
    if not cells:
        return None
    n = len(cells)
    n_cols = min(n, 4)
    n_rows = math.ceil(n / n_cols)
    fig, axes = figure_grid(n_rows, n_cols, w=3.8, h=3.0)
    scatter = None
    for i, c in enumerate(cells):
        ax = axes[i // n_cols][i % n_cols]
        trials = [t for t in c.trials if is_number(t.get("tau")) and is_number(t.get("reward"))]
        ir = [t.get("ir") if is_number(t.get("ir")) else math.nan for t in trials]
        scatter = ax.scatter(
            [t["tau"] for t in trials],
            [t["reward"] for t in trials],
            c=ir,
            cmap="viridis",
            vmin=0,
            vmax=1,
            s=30,
            edgecolors="k",
            linewidths=0.4,
        )
        if c.tau is not None:
            ax.axvline(c.tau, color="r", lw=1, ls="--", label=f"chosen τ={c.tau:.2f}")
            ax.legend(loc="best")
        title = f"{env_label(c.env)}: {row_label(c, lay)}"
        if lay.checkpoint or lay.policy_seed:
            title += f" ({c.checkpoint}, s{c.policy_seed})"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("τ")
        ax.set_ylabel("validation reward")
    for k in range(n, n_rows * n_cols):
        axes[k // n_cols][k % n_cols].set_visible(False)
    fig.suptitle("Optuna trials (colour = IR)", y=1.0)
    fig.tight_layout()
    if scatter is not None:
        fig.colorbar(scatter, ax=axes.ravel().tolist(), label="IR", shrink=0.8)
    fig.savefig(out / "trials.png", dpi=120)
    plt.close(fig)
    return out / "trials.png"


def learning_curves_plot(runs: list[dict], out: Path) -> Path | None:
    """All PPO runs' validation curves in one figure: reward (top) and success or accuracy
    (bottom), one column per env, threshold checkpoints marked."""
    runs = [r for r in runs if r.get("curve") is not None]
    curves = {id(r): _read_curve(r["curve"]) for r in runs}
    runs = [r for r in runs if curves[id(r)]]
    if not runs:
        return None
    envs = list(dict.fromkeys(r["env"] for r in runs))
    fig, axes = figure_grid(2, len(envs))
    for j, env in enumerate(envs):
        top, bottom = axes[0][j], axes[1][j]
        for r in (r for r in runs if r["env"] == env):
            rows = curves[id(r)]
            t = [row["timesteps"] for row in rows]
            label = f"seed {r['policy_seed']} ({r['dir'].name[-8:]})"
            (line,) = top.plot(t, [row["eval_reward"] for row in rows], label=label)
            bottom.plot(t, [row["eval_success"] for row in rows], color=line.get_color())
            marks = [
                (m["timesteps"], m["eval_reward"])
                for k, m in r["metas"].items()
                if threshold_of(k) is not None and "timesteps" in m
            ]
            if marks:
                top.scatter(
                    *zip(*marks, strict=True), color=line.get_color(), marker="^", s=30, zorder=3
                )
        top.set_title(env_label(env))
        top.set_ylabel("validation reward")
        metric = next(
            (r.get("metric") for r in runs if r["env"] == env and r.get("metric")), "success"
        )
        bottom.set_ylabel(f"validation {metric}")
        bottom.set_xlabel("environment steps")
        top.legend(loc="best")
    fig.suptitle("PPO learning curves (▲ = threshold checkpoint saved)", y=1.0)
    return save_figure(fig, out / "learning_curves.png")


def _read_curve(path: Path) -> list[dict]:
    try:
        with open(path, newline="") as f:
            rows = []
            for r in csv.DictReader(f):
                try:
                    rows.append(
                        {k: float(r[k]) for k in ("timesteps", "eval_reward", "eval_success")}
                    )
                except (KeyError, TypeError, ValueError):
                    continue
        return sorted(rows, key=lambda r: r["timesteps"])
    except OSError:
        return []
