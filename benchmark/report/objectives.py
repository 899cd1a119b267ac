"""Tuned gates by objective (docs/gates.md): per env, every cell whose threshold was
tuned on validation seeds (`tau=auto`, any `tuning.objective`) with its test-seed reward, IR
and missed-mistake rate (PPO mistakes the gate did not ask about; 1 - the gate's recall), each
with its 95% CI; for the risk objective, also whether its guarantee held on the test seeds:
the share of episode-bootstrap resamples whose missed-mistake rate is <= alpha, which the
guarantee says should be >= 1 - delta."""

from __future__ import annotations

from benchmark.analysis.quality import PREFIX
from benchmark.analysis.risk import missed_mistakes
from benchmark.report.model import (
    Cell,
    Layout,
    Sweep,
    checkpoint_order,
    env_label,
    method_label,
    method_order,
    tuned_objective,
    unique_cells,
)
from benchmark.report.render import DASH, Table, fmt

TABLE = "objectives"
ORDER = ("reward", "budget", "frugal", "risk")


def objective_label(c: Cell) -> str | None:
    """`reward`, `budget 0.2`, `frugal 0.01`, `risk α0.2 δ0.1`; None for a cell whose threshold
    was not tuned (a grid cell, a fixed tau, the IR-matched random gate)."""
    name = tuned_objective(c)
    if name in (None, "match") or c.tau is None:
        return None
    params = (c.summary or {}).get("tuning_params") or {}
    if name == "risk":
        return f"risk α{params.get('alpha')} δ{params.get('delta')}"
    return " ".join([name, *(str(v) for v in params.values())])


def _miss(c: Cell) -> str:
    """1 - recall, its CI flipped."""
    s = c.summary or {}
    recall = s.get(f"{PREFIX}recall")
    if recall is None:
        return DASH
    low, high = s.get(f"{PREFIX}recall_ci95_low"), s.get(f"{PREFIX}recall_ci95_high")
    if low is None or high is None:
        return f"{1 - recall:.3f}"
    return fmt((1 - recall, 1 - high, 1 - low))


def _held(c: Cell, records: list[dict] | None) -> str:
    s = c.summary or {}
    if s.get("tuning_objective") != "risk" or records is None:
        return DASH
    params = s.get("tuning_params") or {}
    check = missed_mistakes(records, float(params["alpha"]))
    if check["held"] is None:
        return "no mistake"
    need = 1 - float(params["delta"])
    return f"{check['held']:.2f} {'≥' if check['held'] >= need else '< (failed)'} {need:.2f}"


def _order(sweep: Sweep, c: Cell) -> tuple:
    name = tuned_objective(c)
    return (
        sweep.envs().index(c.env),
        checkpoint_order(c.checkpoint),
        c.policy_seed or 0,
        method_order(c),
        ORDER.index(name) if name in ORDER else len(ORDER),
        objective_label(c),
    )


def objectives_table(sweep: Sweep, steps: dict[str, list[dict]]) -> Table | None:
    """None unless two or more tuned cells share an env (one tuned cell is the main table)."""
    cells = unique_cells(
        [c for c in sweep.ok if c.gate != "random" and objective_label(c) is not None]
    )
    if len(cells) < 2:
        return None
    cells.sort(key=lambda c: _order(sweep, c))
    lay = Layout.of_cells(cells)
    table = Table(
        TABLE,
        "Tuned gates by objective (tau chosen on validation seeds; test seeds, 95% CIs)",
        ["env", "gate", "objective"],
        [("", ["checkpoint", "tau", "reward", "IR", "missed mistakes", "PPO mistakes", "held"])],
        notes=[
            "missed mistakes = PPO mistakes (actions outside the expert's optimal set) the gate "
            "did not ask about / PPO mistakes, pooled over steps, CI by bootstrap over episodes "
            "(needs eval.step_records=true). held (risk only): the share of episode-bootstrap "
            "resamples of the test seeds whose missed-mistake rate is <= alpha, against the "
            "1 - delta the guarantee promises."
        ],
    )
    for c in cells:
        s = c.summary or {}
        checkpoint = c.checkpoint_name or c.checkpoint
        if lay.policy_seed and c.policy_seed is not None:
            checkpoint = f"{checkpoint}-s{c.policy_seed}"
        mistakes = s.get(f"{PREFIX}wrong")
        table.rows.append(
            (
                [env_label(c.env), method_label(c), objective_label(c)],
                [
                    str(checkpoint or DASH),
                    f"{c.tau:.3f}",
                    fmt(c.value("reward")),
                    fmt(c.value("ir_pooled")),
                    _miss(c),
                    DASH if mistakes is None else f"{mistakes:,}",
                    _held(c, steps.get(c.job)),
                ],
            )
        )
    return table
