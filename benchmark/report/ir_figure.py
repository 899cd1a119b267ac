"""The demo's figure (`reward_vs_ir.png`): every method of a sweep as one point, reward (top) and
success or accuracy (bottom) against the intervention rate, 95% CIs on both axes, one column per
env. PPO-only sits at IR 0, SLM-only at IR 1, ASK in between: how much of the consultant's help
the gate buys with how few queries. Tuned cells add their Optuna trials (validation seeds, each
tau tried) as faint crosses: the reward/IR trade-off the tuned tau was picked from."""

from __future__ import annotations

from pathlib import Path

from benchmark.gates import gate_markers
from benchmark.metrics import MAIN_FIGURE
from benchmark.report.figures import figure_grid, plt
from benchmark.report.model import (
    Cell,
    Layout,
    Sweep,
    env_label,
    method_order,
    prompt_label,
    row_label,
    slm_label,
)

HOLLOW = ("oracle", "random")  # reference consultants: open markers, so a model on top shows
MAX_POINTS = 24  # per env: beyond this the figure is not readable at a glance


def _colors(cells: list[Cell]) -> dict[str | None, str]:
    """PPO black; each consultant its own colour, the same in every panel."""
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    slms = sorted(
        {c.slm for c in cells if c.gate != "never" and c.slm}, key=lambda s: (s in HOLLOW, s)
    )
    out: dict[str | None, str] = {None: "black"}
    for i, slm in enumerate(slms):
        out[slm] = {"oracle": "tab:green", "random": "tab:gray"}.get(slm, palette[i % len(palette)])
    return out


def _label(c: Cell, lay: Layout, prompts: int) -> str:
    """The table's row label, but SLM-only names its consultant ("SLM-only oracle", not
    "Oracle"), so each point says at a glance which gate and which consultant it is."""
    if c.gate == "never":
        return "PPO-only" + row_label(c, lay)[len("PPO") :]
    if c.gate == "always":
        suffix = f" ({prompt_label(c.prompt, c.rationale, c.slm)})" if prompts > 1 else ""
        return f"SLM-only {slm_label(c.slm)}{suffix}"
    return row_label(c, lay)


def _point(ax, c: Cell, metric: str, color: str, label: str | None) -> bool:
    x, y = c.value(MAIN_FIGURE["ir"]), c.value(metric)
    if x is None or y is None:
        return False
    hollow = c.gate != "never" and c.slm in HOLLOW
    ax.errorbar(
        [x[0]],
        [y[0]],
        xerr=[[max(x[0] - x[1], 0)], [max(x[2] - x[0], 0)]],
        yerr=[[max(y[0] - y[1], 0)], [max(y[2] - y[0], 0)]],
        marker=gate_markers().get(c.gate or "", "P"),
        ms=11 if hollow else 7,
        mfc="none" if hollow else color,
        mec=color,
        mew=1.6,
        color=color,
        capsize=3,
        lw=1,
        ls="none",
        label=label,
        zorder=3 if hollow else 4,
    )
    return True


def reward_ir_plot(sweep: Sweep, lay: Layout, out: Path) -> Path | None:
    """None when no env has PPO-only and an assisted method to compare, or too many points."""
    envs = []
    for env in sweep.envs():
        cells = [c for c in sweep.ok if c.env == env]
        gates = {c.gate for c in cells}
        if "never" in gates and gates - {"never"} and len(cells) <= MAX_POINTS:
            envs.append(env)
    if not envs:
        return None
    colors = _colors([c for c in sweep.ok if c.env in envs])
    fig, axes = figure_grid(2, len(envs), w=5.2, h=3.6)
    for j, env in enumerate(envs):
        top, bottom = axes[0][j], axes[1][j]
        metric = sweep.metric_of(env)
        cells = sorted((c for c in sweep.ok if c.env == env), key=method_order)
        prompts = len({(c.prompt, bool(c.rationale)) for c in cells if c.prompt is not None})
        seen: set[str] = set()
        trial_label = "τ trials (validation seeds)"
        for c in cells:
            label = _label(c, lay, prompts)
            color = colors.get(None if c.gate == "never" else c.slm, "black")
            legend = None if label in seen else label
            if _point(top, c, "reward", color, legend):
                seen.add(label)
            _point(bottom, c, metric, color, None)
            trials = [t for t in c.trials or [] if t.get("ir") is not None]
            if trials:
                top.scatter(
                    [float(t["ir"]) for t in trials],
                    [float(t["reward"]) for t in trials],
                    marker="x",
                    s=14,
                    color=color,
                    alpha=0.35,
                    lw=1,
                    label=trial_label if trial_label not in seen else None,
                    zorder=2,
                )
                seen.add(trial_label)
        for ax in (top, bottom):
            ax.set_xlim(-0.05, 1.05)
            ax.axvline(0, color="k", lw=0.5, alpha=0.4)
            ax.axvline(1, color="k", lw=0.5, alpha=0.4)
        top.set_title(env_label(env))
        top.set_ylabel("reward")
        bottom.set_ylabel(metric)
        bottom.set_xlabel(
            "IR: share of steps the consultant is asked (0 = PPO alone, 1 = every step)"
        )
    handles, labels = [], []
    for row in axes:
        for ax in row:
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle(
        "Reward and success against the intervention rate (test seeds, 95% CI)\n"
        "■ PPO-only   ● ASK (entropy gate, tuned τ)   ▲ SLM-only (consultant every step)",
        fontsize=10,
    )
    fig.tight_layout()
    path = out / "reward_vs_ir.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
