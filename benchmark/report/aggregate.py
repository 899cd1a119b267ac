"""The aggregate table over envs and training seeds (benchmark.analysis.aggregate): for every
method run with several PPO training seeds on every env of the sweep, its reward IQM with a
stratified bootstrap CI, and its probability of improvement over PPO-only of the same
checkpoint and seeds."""

from __future__ import annotations

import numpy as np

from benchmark.analysis.aggregate import improvement_ci, iqm_ci
from benchmark.report.model import Cell, Sweep, method_label
from benchmark.report.render import DASH, Table

TABLE = "aggregate"


def _method(c: Cell) -> tuple:
    return (c.gate, c.slm, c.prompt, bool(c.rationale), str(c.tau_setting), c.checkpoint, c.variant)


def score_matrices(sweep: Sweep) -> dict[tuple, tuple[str, list[int], list[str], np.ndarray]]:
    """method -> (label, seeds, envs, rewards (seeds x envs)) for the methods with one cell per
    (training seed, env) over at least two seeds and every env they ran on."""
    cells: dict[tuple, dict[tuple[int, str], Cell]] = {}
    for c in sweep.ok:
        if c.policy_seed is None or c.value("reward") is None:
            continue
        cells.setdefault(_method(c), {})[(int(c.policy_seed), c.env)] = c
    out = {}
    for key, by in cells.items():
        seeds = sorted({s for s, _ in by})
        envs = [e for e in sweep.envs() if any(env == e for _, env in by)]
        if len(seeds) < 2 or len(by) != len(seeds) * len(envs):
            continue
        scores = np.array([[by[(s, e)].value("reward")[0] for e in envs] for s in seeds])
        out[key] = (method_label(next(iter(by.values()))), seeds, envs, scores)
    return out


def aggregate_table(sweep: Sweep) -> Table | None:
    found = score_matrices(sweep)
    if not found:
        return None
    table = Table(
        TABLE,
        "Aggregate over envs and training seeds: reward IQM and probability of improvement over "
        "PPO-only (95% stratified bootstrap CIs)",
        ["method", "checkpoint"],
        [("", ["envs", "training seeds", "reward IQM", "P(better than PPO-only)"])],
        notes=[
            "IQM: the mean of the middle 50% of the (training seed x env) rewards; P(better): "
            "the chance that a run of the method beats a run of PPO-only on the same env (ties "
            "count one half), averaged over envs (rliable's definitions, Agarwal et al. 2021). "
            "Rewards are not rescaled across envs."
        ],
    )
    for key, (label, seeds, envs, scores) in sorted(found.items(), key=lambda kv: str(kv[0])):
        m, lo, hi = iqm_ci(scores)
        checkpoint, variant = key[-2:]
        ppo_key = ("never", None, None, False, "None", checkpoint, variant)
        ppo = found.get(ppo_key)
        better = DASH
        if key != ppo_key and ppo is not None and ppo[1] == seeds and ppo[2] == envs:
            p, plo, phi = improvement_ci(scores, ppo[3])
            better = f"{p:.2f} [{plo:.2f}, {phi:.2f}]"
        table.rows.append(
            (
                [label, str(checkpoint or DASH)],
                [str(len(envs)), str(len(seeds)), f"{m:.3f} [{lo:.3f}, {hi:.3f}]", better],
            )
        )
    return table
