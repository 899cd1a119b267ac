"""The reward-IR frontier of each gate (`+experiment=gates`; benchmark.analysis.frontier): a
figure per env with every gate's tau grid and its frontier between PPO-only and SLM-only, the
tuned cells marked, and a table of each frontier's normalised area and its gate precision and
recall at IR 5%, 10% and 20%."""

from __future__ import annotations

from pathlib import Path

from benchmark.analysis.frontier import BUDGETS, Point, at_budget, envelope, normalised_area
from benchmark.gates import swept_gates
from benchmark.report.model import (
    Cell,
    Sweep,
    env_label,
    method_label,
    ppo_reference,
    tuned_objective,
)
from benchmark.report.render import DASH, Table

TABLE = "frontier"
PLOT = "frontier"


def _key(c: Cell) -> tuple:
    """Cells on one frontier: the same gate, consultant, prompt and policy."""
    return (c.env, c.gate, c.slm, c.prompt, bool(c.rationale), c.checkpoint, c.policy_seed)


def _slm_only(c: Cell, sweep: Sweep) -> Cell | None:
    cands = [
        s
        for s in sweep.ok
        if s.gate == "always"
        and s.env == c.env
        and (s.slm, s.prompt, bool(s.rationale)) == (c.slm, c.prompt, bool(c.rationale))
    ]
    return cands[0] if cands else None


def _point(c: Cell) -> Point | None:
    ir, reward = c.value("ir_pooled"), c.value("reward")
    if ir is None or reward is None:
        return None
    s = c.summary or {}
    return Point(
        ir[0],
        reward[0],
        tuned=tuned_objective(c) is not None,
        precision=s.get("gate_precision"),
        recall=s.get("gate_recall"),
        label=c,
    )


def frontiers(sweep: Sweep) -> list[dict]:
    """One entry per swept gate with its PPO-only and SLM-only ends: the cells' points, and the
    frontier through the grid cells (tuned cells are marked on it, not part of it)."""
    groups: dict[tuple, list[Cell]] = {}
    swept = swept_gates()  # gates with a threshold (or p) to sweep (Gate.swept)
    for c in sweep.ok:
        if c.gate in swept:
            groups.setdefault(_key(c), []).append(c)
    out = []
    for key, cells in groups.items():
        ppo, slm = ppo_reference(cells[0], sweep), _slm_only(cells[0], sweep)
        if ppo is None or slm is None or ppo.value("reward") is None:
            continue
        points = [p for p in map(_point, cells) if p is not None]
        grid = [p for p in points if not p.tuned]
        if not grid:
            continue
        r_ppo, r_slm = ppo.value("reward")[0], slm.value("reward")[0]
        out.append(
            {
                "key": key,
                "label": method_label(cells[0]),
                "ppo": r_ppo,
                "slm": r_slm,
                "points": points,
                "grid": grid,
                "envelope": envelope(grid, r_ppo, r_slm),
                "area": normalised_area(grid, r_ppo, r_slm),
            }
        )
    return out


def _fmt(x: float | None) -> str:
    return DASH if x is None else f"{x:.3f}"


def frontier_table(sweep: Sweep) -> Table | None:
    found = frontiers(sweep)
    if not found:
        return None
    budgets = [f"IR≤{b:.0%}" for b in BUDGETS]
    table = Table(
        TABLE,
        "Reward-IR frontier (test seeds): normalised area and gate quality at fixed IR budgets",
        ["env", "gate", "checkpoint"],
        [
            ("", ["grid cells", "PPO-only", "SLM-only", "norm. area"]),
            *((b, ["reward", "precision", "recall"]) for b in budgets),
        ],
        notes=[
            "The frontier joins PPO-only (IR 0), the gate's grid cells that beat every cell at a "
            "lower IR, and SLM-only (IR 1); norm. area = its area, 0 at PPO-only's reward and 1 "
            "at SLM-only's (0.5: reward rises linearly with IR). At a budget: the grid cell with "
            "the largest IR within it; precision and recall against the expert need step "
            "records (eval.step_records=true)."
        ],
    )
    for f in found:
        env, _, _, _, _, checkpoint, seed = f["key"]
        vals = [str(len(f["grid"])), _fmt(f["ppo"]), _fmt(f["slm"]), _fmt(f["area"])]
        for b in BUDGETS:
            p = at_budget(f["grid"], b)
            vals += [DASH] * 3 if p is None else [_fmt(p.reward), _fmt(p.precision), _fmt(p.recall)]
        ckpt = DASH if checkpoint is None else f"{checkpoint}-s{seed}"
        table.rows.append(([env_label(env), f["label"], ckpt], vals))
    return table


def frontier_plot(sweep: Sweep, out: Path) -> Path | None:
    """Reward against IR per env: each gate's grid (dots) and frontier (line), its tuned cells
    (stars, named by objective), PPO-only (square) and SLM-only (triangle)."""
    from benchmark.report.figures import figure_grid, plt, save_figure

    found = frontiers(sweep)
    envs = [e for e in sweep.envs() if any(f["key"][0] == e for f in found)]
    if not envs:
        return None
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = figure_grid(1, len(envs), w=5.4, h=4.2)
    for j, env in enumerate(envs):
        ax = axes[0][j]
        mine = [f for f in found if f["key"][0] == env]
        for i, f in enumerate(mine):
            color = palette[i % len(palette)]
            area = "" if f["area"] is None else f" (area {f['area']:.2f})"
            xs, ys = zip(*f["envelope"], strict=True)
            ax.plot(xs, ys, color=color, lw=1.5, label=f"{f['label']}{area}")
            ax.scatter([p.ir for p in f["grid"]], [p.reward for p in f["grid"]], color=color, s=14)
            for p in f["points"]:
                if p.tuned:
                    ax.scatter([p.ir], [p.reward], marker="*", s=150, color=color, ec="k", zorder=5)
                    ax.annotate(
                        tuned_objective(p.label),
                        (p.ir, p.reward),
                        fontsize=7,
                        xytext=(4, 4),
                        textcoords="offset points",
                    )
            ax.scatter([0], [f["ppo"]], marker="s", color="k", zorder=6)
            ax.scatter([1], [f["slm"]], marker="^", color="k", zorder=6)
        ax.set_xlim(-0.03, 1.03)
        ax.set_title(env_label(env))
        ax.set_xlabel("IR (share of steps asked)")
        ax.set_ylabel("reward (test seeds)")
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle("Reward-IR frontier: ■ PPO-only, ▲ SLM-only, ★ tuned τ (objective)", fontsize=10)
    return save_figure(fig, out / f"{PLOT}.png")
