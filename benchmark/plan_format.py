"""The plan as a table for the terminal (`python -m benchmark.plan` without --json)."""

from __future__ import annotations

from benchmark.plan_data import COMPLETE, FAILED, INVALID, PENDING, Plan


# ----------------------------------------------------------------------------- output
def _n(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 360:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def format_plan(plan: Plan) -> str:
    head = (
        "status",
        "hash",
        "cell",
        "episodes",
        "trials",
        "max steps",
        "LM calls",
        "prompt tok",
        "gen tok",
        "time",
        "note",
    )
    rows = [head]
    for c in plan.cells:
        w = c.work
        note = "; ".join(
            x
            for x in (
                c.note,
                w.basis if w is not None and w.calls else "",
                f"jobs {','.join(map(str, c.jobs))}" if len(c.jobs) > 1 else "",
            )
            if x
        )
        numbers = (
            (
                str(w.episodes),
                str(w.tuning_trials),
                _n(w.max_steps),
                _n(w.calls),
                _n(w.prompt_tokens) if w.calls else "0",
                _n(w.generated_tokens),
                _time(c.projected_s),
            )
            if w is not None
            else ("-",) * 7
        )
        rows.append((c.status, c.hash or "-", c.name, *numbers, note))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    right = {3, 4, 5, 6, 7, 8, 9}
    protocol = ", ".join(plan.protocols) + (" (mixed)" if len(plan.protocols) > 1 else "")
    lines = [
        f"plan: {plan.experiment}, protocol {protocol or '-'}, {plan.jobs} jobs = "
        f"{len(plan.cells)} cells under {plan.root}"
    ]
    for r in rows:
        cols = [
            v.rjust(widths[i]) if i in right else v.ljust(widths[i]) for i, v in enumerate(r[:-1])
        ]
        lines.append("  ".join([*cols, r[-1]]).rstrip())
    lines.insert(2, "  ".join("-" * w for w in widths))
    lines[1:1] = plan.content
    t = plan.totals()
    lines.append("")
    lines.append(
        f"cells: {t[COMPLETE]} complete, {t[FAILED]} failed, {t[PENDING]} pending"
        f" ({t['policy_not_trained']} policy not trained, {t['model_not_built']} model not built,"
        f" {t['inputs_changed']} inputs changed),"
        f" {t[INVALID]} invalid"
    )
    prompt = (
        f"{t['prompt_tokens_measured']:,} prompt tokens in the {t['cells_with_prompt_tokens']} "
        "cells measured with the tiny model"
        if t["cells_with_prompt_tokens"]
        else "prompt tokens not measured (no tiny-model reference)"
    )
    lines.append(
        f"to run (failed + pending): {t['episodes']:,} episodes, {t['tuning_trials']} tuning "
        f"trials ({t['tuning_episodes']:,} episodes), {t['max_steps']:,} max steps; "
        f"{t['calls']:,} LM calls (bound {t['calls_max']:,}), {t['generated_tokens']:,} "
        f"generated tokens (bound {t['generated_tokens_max']:,}), {prompt}"
    )
    sources = sorted({c.throughput.source for c in plan.cells if c.throughput is not None})
    projected = [f"at {'; '.join(sources)}"] if sources else []
    if t["lm_cells_without_throughput"]:
        projected.append(
            f"{t['lm_cells_without_throughput']} LM cells without a throughput figure: "
            "--queries-per-s / --tokens-per-s, or run make bench-gpu"
        )
    projected.append("PPO training not included")
    when = "unknown" if t["projected_s"] is None else _time(t["projected_s"])
    lines.append(f"projected LM time: {when} ({'; '.join(projected)})")
    return "\n".join(lines)
