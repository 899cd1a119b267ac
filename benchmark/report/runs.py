"""The runs table (Agent-BRACE reports mean and std over 3 runs): for every (env, method) of the
sweep computed as several distinct cells (the trained rows' training seeds, brace.seed; with
sampled decoding, each run's own draws), the mean and standard deviation over those runs of the
env's metric, the context length and the Brier score of the certainty labels. Jobs that are the
same cell (an untrained row decoding greedily, swept over brace.seed) count once. The table
says whether the std includes sampling: at which temperature the runs decoded."""

from __future__ import annotations

import numpy as np

from benchmark.report.model import Sweep, env_label, method_label, method_order
from benchmark.report.render import DASH, Table

TABLE = "runs"
FIELDS = (("metric", None), ("context tokens", "context_tokens_mean"), ("Brier", "belief_brier"))


def _mean_std(values: list[float], digits: int = 3) -> str:
    if not values:
        return DASH
    std = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return f"{np.mean(values):.{digits}f} ± {std:.{digits}f}"


def sampling_note(cells: list) -> str:
    """What the runs' std includes: sampling at the cells' temperature(s) (each run its own
    draws), or only what differs between runs (greedy decoding)."""
    temps = sorted({c.temperature for c in cells if c.temperature is not None})
    sampled = [t for t in temps if t > 0]
    if not temps:
        return "decoding temperature: not recorded in the cells' configs."
    if not sampled:
        return "decoding: greedy; the std is over the training seeds only (no sampling)."
    text = ", ".join(f"{t:g}" for t in sampled)
    mixed = " (greedy rows: over training seeds only)" if 0.0 in temps else ""
    return f"the std includes sampling at temperature {text}: each run its own draws{mixed}."


def runs_table(sweep: Sweep) -> Table | None:
    groups: dict[tuple[str, str], dict[str, object]] = {}
    order: dict[tuple[str, str], tuple] = {}
    for c in sweep.ok:
        s = c.summary or {}
        key = (c.env, method_label(c))
        groups.setdefault(key, {})[s.get("cell_hash") or c.job] = c
        order[key] = (sweep.envs().index(c.env), method_order(c))
    if not any(len(cells) > 1 for cells in groups.values()):
        return None
    table = Table(
        TABLE,
        "Runs: mean ± std over the distinct cells of each method (runs: brace.seed)",
        ["env", "method"],
        [("", ["runs", *(name for name, _ in FIELDS)])],
        notes=[
            "runs: distinct cells (an untrained row decoding greedily, swept over brace.seed, "
            "is one cell). metric: the env's metric (success on TextWorld) per cell; context "
            "tokens: the per-episode mean context length; Brier: the certainty labels' Brier "
            "score (benchmark.analysis.belief); std with ddof 1 (0 for one run).",
            sampling_note([c for cells in groups.values() for c in cells.values()]),
        ],
    )
    for key in sorted(groups, key=order.__getitem__):
        cells = list(groups[key].values())
        metric = [v[0] for c in cells if (v := c.value(c.metric or "reward")) is not None]
        cols = [str(len(cells)), _mean_std(metric)]
        for _, field in FIELDS[1:]:
            vals = [
                float(c.summary[field]) for c in cells if (c.summary or {}).get(field) is not None
            ]
            cols.append(_mean_std(vals, 0 if field.startswith("context") else 3))
        table.rows.append(([env_label(key[0]), key[1]], cols))
    return table
