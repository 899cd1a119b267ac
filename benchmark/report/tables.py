"""The report's tables, laid out like the papers' (rows = methods, column groups = environments,
`mean [low, high]` cells) from the model's rows; numbers come from the cells' summaries, paired
comparisons reuse benchmark.metrics.paired_difference. Each builder returns a `Table` (None when
the sweep has nothing for it); `benchmark.report.render` turns it into Markdown, LaTeX and CSV."""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict

import numpy as np

from benchmark.metrics import (
    BY_NAME,
    MAIN_FIGURE,
    RATES,
    SUMMARY_METRICS,
    cache_hit_share,
    paired_difference,
)
from benchmark.policy.names import threshold_name
from benchmark.report.model import (
    FAILED,
    MISSING,
    Cell,
    Layout,
    Row,
    Sweep,
    add_cell_row,
    cell_table,
    checkpoint_order,
    env_kind,
    env_label,
    job_order,
    method_label,
    method_order,
    ppo_reference,
    row_label,
    slm_reference,
    threshold_of,
)
from benchmark.report.render import DASH, Table, fmt, fmt_diff


def status_mark(c: Cell) -> str:
    return f"{c.status.upper()} (job {c.job})"


def rate_note(rates) -> str:
    """What the main table's rate columns are: the definition and the figure each rate's
    declaration (benchmark.metrics.METRICS) picks."""
    parts = []
    for rate in rates:
        m = BY_NAME[rate]
        how = (
            f"pooled over all {m.over} of the cell" if m.main == "pooled" else "mean over episodes"
        )
        if m.of_queried:
            how += " (episodes without queries do not count)"
        parts.append(f"{m.label} = {m.definition}, {how}")
    return "; ".join(parts) + (
        ". CIs resample episodes; the details table has both the per-episode mean and the "
        "pooled figure of each rate."
    )


def main_table(sweep: Sweep, rows: list[Row], lay: Layout) -> Table:
    # a rate over queries (the invalid rate) only where some cell had a consultant answer
    rates = [r for r in RATES if lay.invalid or not BY_NAME[r].of_queried]
    groups = []
    for env in sweep.envs():
        cols = ["reward", sweep.metric_of(env), *(BY_NAME[r].label for r in rates)]
        groups.append((env_label(env), cols))
    table = Table(
        "main",
        f"Results: {sweep.experiment} (test seeds, mean [95% bootstrap CI])",
        lay.index_names(),
        groups,
    )
    keys = ("reward", None, *(MAIN_FIGURE[r] for r in rates))
    queried = {MAIN_FIGURE[r] for r in rates if BY_NAME[r].of_queried}  # a dash without queries
    for row in rows:
        vals: list[str] = []
        for env in sweep.envs():
            n = len(dict(groups)[env_label(env)])
            c = row.cells.get(env)
            if c is None:
                vals += [""] * n
            elif not c.ok:
                vals += [status_mark(c)] + [DASH] * (n - 1)
            else:
                metric = sweep.metric_of(env)
                asked = (c.summary or {}).get("queries_total", 0) > 0
                vals += [
                    fmt(c.value(k or metric)) if k not in queried or asked else DASH
                    for k in keys[:n]
                ]
        table.rows.append((row.index, vals))
    table.notes.append(rate_note(rates))
    if any(not c.ok for c in sweep.cells):
        table.notes.append("FAILED / MISSING cells: see the table of failed and missing cells.")
    aliases = _checkpoint_aliases(sweep)
    if aliases:
        table.notes.append("Checkpoints used: " + "; ".join(aliases) + ".")
    if any(c.checkpoint == "match" for c in sweep.cells):
        table.notes.append(MATCH_NOTE + _match_picks(sweep))
    degenerate = [
        f"{c.name} τ={c.tau_setting} ({c.summary['gate_degenerate']})"
        for c in sweep.ok
        if (c.summary or {}).get("gate_degenerate")
    ]
    if degenerate:
        table.notes.append(
            "DEGENERATE learned-gate classifier, its tau picks out no PPO mistakes: "
            + "; ".join(degenerate)
            + "."
        )
    table.notes += alone_notes(sweep, rows)
    return table


def gated(c: Cell) -> bool:
    """Whether a gate decides when `c` asks (ASK, ASK+ and their variants): neither PPO-only
    (`never`) nor SLM-only (`always`)."""
    return c.gate not in (None, "never", "always")


# what a gated row is when its IR's CI reaches an end: the CI includes IR 1 (0)
ALONE = {
    1.0: "asks at every step: the consultant alone",
    0.0: "never asks: the policy alone",
}


def alone(c: Cell) -> str | None:
    """ALONE's note for a gated cell whose IR CI reaches 1 (or 0): its gain over PPO-only is
    then the consultant's (or none), not the gate's."""
    ir = c.value(MAIN_FIGURE["ir"]) if c.ok and gated(c) else None
    if ir is None:
        return None
    if ir[2] >= 1.0 - 1e-9:
        return ALONE[1.0]
    if ir[1] <= 1e-9:
        return ALONE[0.0]
    return None


def alone_notes(sweep: Sweep, rows: list[Row]) -> list[str]:
    """One note per ALONE case naming the gated rows (and envs) it holds for, with their IR."""
    found: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        for env in sweep.envs():
            c = row.cells.get(env)
            if c is not None and (note := alone(c)) is not None:
                ir = fmt(c.value(MAIN_FIGURE["ir"]))
                found[note].append(f"{' '.join(row.index)} on {env_label(env)} (IR {ir})")
    return [
        f"{note.upper()} (IR's CI reaches {int(end)}): " + "; ".join(found[note]) + "."
        for end, note in ALONE.items()
        if found[note]
    ]


MATCH_NOTE = (
    "match: the saved PPO checkpoint whose validation success is nearest policy.match_success "
    "(Table 1: the paper's PPO row of the env); the other checkpoint is the recipe's own."
)


def _match_picks(sweep: Sweep) -> str:
    """What `match` picked per env: the file, its validation success and the target, so a reader
    sees how near the paper's strength the matched rows are (nearest is not equal)."""
    picks = set()
    for c in sweep.ok:
        if c.checkpoint == "match" and c.checkpoint_name:
            got = DASH if c.checkpoint_success is None else f"{c.checkpoint_success:.2f}"
            want = DASH if c.match_success is None else f"{c.match_success:.2f}"
            picks.add(
                f"{env_label(c.env)}: {c.checkpoint_name}, validation success {got} (target {want})"
            )
    return (" Picked: " + "; ".join(sorted(picks)) + ".") if picks else ""


def _checkpoint_aliases(sweep: Sweep) -> list[str]:
    out = defaultdict(set)
    for c in sweep.ok:
        if c.checkpoint and c.checkpoint_name and c.checkpoint_name != c.checkpoint:
            out[c.checkpoint].add(f"{c.checkpoint_name} ({c.env})")
    return [
        f"{k} = {', '.join(sorted(v))}"
        for k, v in sorted(out.items(), key=lambda kv: checkpoint_order(kv[0]))
    ]


def paired(c: Cell, ref: Cell, key: str) -> dict | None:
    """metrics.paired_difference of `key` over the episode seeds both cells ran."""
    a = {e["seed"]: e.get(key) for e in c.episodes or []}
    b = {e["seed"]: e.get(key) for e in ref.episodes or []}
    seeds = sorted(s for s in a if s in b and a[s] is not None and b[s] is not None)
    if not seeds:
        return None
    out = paired_difference([float(a[s]) for s in seeds], [float(b[s]) for s in seeds])
    out["n"] = len(seeds)
    return out


def paired_table(sweep: Sweep, rows: list[Row], lay: Layout) -> Table | None:
    """Each method against PPO-only on the same seeds; where the sweep has SLM-only cells, the
    gated rows also against SLM-only of the same consultant (a gain over PPO-only that SLM-only
    has too is the consultant's, not the gate's)."""
    if not any(c.gate == "never" for c in sweep.ok):
        return None
    vs_slm = any(c.gate == "always" for c in sweep.ok) and any(gated(c) for c in sweep.ok)
    groups = []
    for env in sweep.envs():
        metric = sweep.metric_of(env)
        cols = ["Δ reward", f"Δ {metric}", "n"]
        if vs_slm:
            cols += ["Δ reward vs SLM-only", f"Δ {metric} vs SLM-only"]
        groups.append((env_label(env), cols))
    table = Table(
        "paired",
        "Paired difference vs PPO-only on the same seeds (method − PPO, mean [95% bootstrap CI])"
        + ("; gated rows also vs SLM-only (method − SLM-only)" if vs_slm else ""),
        lay.index_names(),
        groups,
    )
    other_prompt = False
    for row in rows:
        if all(c.gate == "never" for c in row.cells.values()):
            continue
        vals: list[str] = []
        for env in sweep.envs():
            c = row.cells.get(env)
            extra = [DASH, DASH] if vs_slm else []
            if c is None:
                vals += ["", "", ""] + [""] * len(extra)
                continue
            if not c.ok:
                vals += [status_mark(c), DASH, DASH, *extra]
                continue
            ref = ppo_reference(c, sweep)
            dr = paired(c, ref, "reward") if ref else None
            dm = paired(c, ref, sweep.metric_of(env)) if ref else None
            if dr is None:
                vals += ["no PPO reference" if ref is None else "no common seeds", DASH, DASH]
            else:
                vals += [fmt_diff(dr), fmt_diff(dm), str(dr["n"])]
            slm = slm_reference(c, sweep) if vs_slm and gated(c) else None
            if slm is not None and (sr := paired(c, slm, "reward")) is not None:
                mark = ""
                if (slm.prompt, bool(slm.rationale)) != (c.prompt, bool(c.rationale)):
                    mark, other_prompt = " †", True
                extra = [
                    fmt_diff(sr) + mark,
                    fmt_diff(paired(c, slm, sweep.metric_of(env))) + mark,
                ]
            elif vs_slm and gated(c):
                extra = ["no SLM-only reference" if slm is None else "no common seeds", DASH]
            vals += extra
        table.rows.append((row.index, vals))
    table.notes.append(
        "Episodes matched by seed; PPO of the same env, checkpoint and policy seed "
        "(SLM-only: PPO's strongest checkpoint). * = the CI excludes 0."
    )
    if vs_slm:
        table.notes.append(
            "vs SLM-only: SLM-only of the same env and consultant, with the same prompt"
            + (" († where the sweep has none: its first SLM-only prompt)" if other_prompt else "")
            + "."
        )
    table.notes += alone_notes(sweep, rows)
    return table if table.rows else None


def seeds_table(sweep: Sweep, lay: Layout) -> Table | None:
    """Policy-seed variance: each seed's test numbers, then mean ± std across seeds."""
    if not lay.policy_seed:
        return None
    envs = sweep.envs()
    groups = [(env_label(env), ["reward", sweep.metric_of(env)]) for env in envs]
    index = ["method"] + (["checkpoint"] if lay.checkpoint else []) + ["policy seed"]
    table = Table("policy_seeds", "Policy-seed variance (test seeds)", index, groups)
    by_method: dict[tuple, list[Cell]] = defaultdict(list)
    for c in sweep.cells:
        if c.policy_seed is not None and c.env:
            key = (
                method_order(c),
                checkpoint_order(c.checkpoint),
                row_label(c, lay),
                str(c.checkpoint),
            )
            by_method[key].append(c)
    for key in sorted(by_method):
        label, ckpt = key[2], key[3]
        group = by_method[key]
        head = [label] + ([ckpt] if lay.checkpoint else [])
        for seed in sorted({c.policy_seed for c in group}):
            vals = []
            for env in envs:
                c = next((x for x in group if x.env == env and x.policy_seed == seed), None)
                if c is None:
                    vals += ["", ""]
                elif not c.ok:
                    vals += [status_mark(c), DASH]
                else:
                    vals += [fmt(c.value("reward")), fmt(c.value(sweep.metric_of(env)))]
            table.rows.append((head + [str(seed)], vals))
        vals = []
        for env in envs:
            ok = [c for c in group if c.env == env and c.ok]
            for metric in ("reward", sweep.metric_of(env)):
                xs = [c.value(metric)[0] for c in ok if c.value(metric) is not None]
                vals.append(_mean_std(xs))
        table.rows.append((head + ["mean ± std"], vals))
    table.notes.append("std: sample standard deviation across policy seeds (ddof=1).")
    return table


def _mean_std(xs: list[float]) -> str:
    if not xs:
        return DASH
    std = float(np.std(xs, ddof=1)) if len(xs) > 1 else 0.0
    return f"{np.mean(xs):.3f} ± {std:.3f} (n={len(xs)})"


def checkpoints_table(runs: list[dict]) -> Table | None:
    if not runs:
        return None
    table = Table(
        "policy_checkpoints",
        "PPO runs: reward-threshold checkpoints written "
        "(validation reward at the step it was saved)",
        ["env", "policy seed", "run"],
        [("", ["thresholds reached", "not reached", "best", "final"])],
    )

    def at(meta: dict | None) -> str:
        if not meta:
            return DASH
        return f"{meta.get('eval_reward', math.nan):.3f} @ {int(meta.get('timesteps', 0)):,}"

    for r in runs:
        metas = r["metas"]
        reached = sorted((k for k in metas if threshold_of(k) is not None), key=checkpoint_order)
        reached_txt = ", ".join(f"{k} ({at(metas[k])})" for k in reached) or "none"
        missing = DASH
        if r["thresholds"]:
            names = [threshold_name(t) for t in r["thresholds"]]
            missing = ", ".join(n for n in names if n not in metas) or "none"
        table.rows.append(
            (
                [env_label(r["env"]), str(r["policy_seed"]), r["dir"].name],
                [reached_txt, missing, at(metas.get("best")), at(metas.get("final"))],
            )
        )
    return table


def failures_table(sweep: Sweep) -> Table | None:
    bad = [c for c in sweep.cells if c.status in (FAILED, MISSING)]
    if not bad:
        return None
    table = Table(
        "failures",
        "Failed and missing cells",
        ["job", "status"],
        [("", ["env", "method", "overrides", "message"])],
    )
    for c in sorted(bad, key=job_order):
        if c.status == FAILED:
            err = c.error or {}
            msg = f"{err.get('type', 'Error')}: {err.get('message', '')}".strip()
        else:
            msg = c.note or "missing"
        msg = " ".join(msg.split())
        msg = msg if len(msg) <= 240 else msg[:237] + "..."
        method = method_label(c) if c.gate else DASH
        table.rows.append(
            (
                [c.job, c.status.upper()],
                [env_label(c.env) if c.env else DASH, method, " ".join(c.overrides) or DASH, msg],
            )
        )
    return table


def tau_source(summary: dict, tuned: bool) -> str:
    """Where a cell's tau came from: its own study, or the shared study of another cell
    (tuning.scope=shared)."""
    if summary.get("tau_from"):
        return f" (from {summary['tau_from']})"
    return " (tuned)" if tuned else ""


def details_table(sweep: Sweep, lay: Layout) -> Table | None:
    """Per cell: the threshold used, each rate both ways (per-episode mean and pooled), and
    what it cost."""
    cells = sorted(sweep.ok, key=sweep.cell_order)
    if not cells:
        return None
    table = cell_table(
        "details",
        "Per cell: threshold, rates (mean over episodes and pooled) and cost",
        [
            "checkpoint",
            "policy seed",
            "tau",
            "episodes",
            *(f"{BY_NAME[r].label} ({way})" for r in RATES for way in ("episode mean", "pooled")),
            "queries",
            "prompt tokens",
            "generated tokens",
            "consultant s",
            "wall s",
            "cache hits",
        ],
    )
    for c in cells:
        s = c.summary or {}
        hit_share = cache_hit_share(s)
        add_cell_row(
            table,
            c,
            row_label(c, lay),
            [
                str(c.checkpoint_name or c.checkpoint or DASH),
                DASH if c.policy_seed is None else str(c.policy_seed),
                DASH if c.tau is None else f"{c.tau:.3f}" + tau_source(s, bool(c.trials)),
                str(s.get("n_episodes", DASH)),
                *(fmt(c.value(r + way)) for r in RATES for way in ("", "_pooled")),
                f"{s.get('queries_total', 0):,.0f}",
                f"{s.get('prompt_tokens_total', 0):,.0f}",
                f"{s.get('generated_tokens_total', 0):,.0f}",
                f"{s.get('consultant_seconds_total', 0):.1f}",
                f"{s.get('wall_seconds', 0):.1f}",
                DASH if hit_share is None else f"{hit_share:.0%}",
            ],
        )
    return table


def cells_csv(sweep: Sweep, lay: Layout) -> str:
    """Every cell as one tidy row of raw numbers (for pandas), failed and missing ones included."""
    fields = [
        "job",
        "status",
        "env",
        "env_kind",
        "metric",
        "method",
        "gate",
        "slm",
        "prompt",
        "rationale",
        "checkpoint",
        "checkpoint_name",
        "policy_seed",
        "tau_setting",
        "tau",
        "mc_samples",
        "n_episodes",
    ]
    fields += [f"{m}_{s}" for m in SUMMARY_METRICS for s in ("mean", "ci95_low", "ci95_high")]
    fields += [f"{r}_pooled{s}" for r in RATES for s in ("", "_ci95_low", "_ci95_high")]
    fields += [
        "queries_total",
        "prompt_tokens_total",
        "generated_tokens_total",
        "consultant_seconds_total",
        "wall_seconds",
        "overrides",
        "message",
    ]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    for c in sweep.cells:
        row = {k: getattr(c, k) for k in fields if hasattr(c, k)}  # labels: summary's, merged
        row.update({k: v for k, v in (c.summary or {}).items() if k in fields and k not in row})
        row["env_kind"] = env_kind(c.env)
        row["method"] = row_label(c, lay) if c.gate else None
        row["overrides"] = " ".join(c.overrides)
        row["message"] = (c.error or {}).get("message") if c.error else (c.note or None)
        writer.writerow(row)
    return buf.getvalue()
