"""The report's tables, laid out like the papers' (rows = methods, column groups = environments,
`mean [low, high]` cells), and their Markdown, LaTeX (booktabs) and CSV renderings. Numbers come
from the cells' summaries; paired comparisons reuse benchmark.metrics.paired_difference."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmark.metrics import paired_difference
from benchmark.report.cells import (
    FAILED,
    MISSING,
    Cell,
    Sweep,
    checkpoint_order,
    env_label,
    is_number,
    method_label,
    method_order,
)

DASH = "—"
NUMERIC = re.compile(r"^([+-]?[\d.,]+|FAILED|MISSING)")
ASKING_GATES = ("entropy", "epistemic")


@dataclass
class Table:
    """A table with optional column groups; every cell is already a display string."""

    name: str  # file stem
    title: str
    index: list[str]  # the leading (row label) column names
    groups: list[tuple[str, list[str]]]  # (group label or "", its column names)
    rows: list[tuple[list[str], list[str]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def header(self) -> list[str]:
        return self.index + [f"{g}: {c}" if g else c for g, cols in self.groups for c in cols]

    def records(self) -> list[dict[str, str]]:
        return [dict(zip(self.header(), idx + vals, strict=True)) for idx, vals in self.rows]

    def to_markdown(self, title: bool = True) -> str:
        def esc(s: str) -> str:
            return str(s).replace("|", "\\|").replace("\n", " ")

        head = self.header()
        lines = [f"**{self.title}**", ""] if title else []
        lines.append("| " + " | ".join(esc(h) for h in head) + " |")
        lines.append("|" + "|".join(self._align()) + "|")
        for idx, vals in self.rows:
            lines.append("| " + " | ".join(esc(v) for v in idx + vals) + " |")
        lines += [""] + [f"_{n}_  " for n in self.notes]
        return "\n".join(lines).rstrip() + "\n"

    def _align(self) -> list[str]:
        """Numbers right, text left (Markdown)."""
        out = [":---"] * len(self.index)
        for j in range(len(self.header()) - len(self.index)):
            col = [vals[j] for _, vals in self.rows if vals[j] not in ("", DASH)]
            numeric = col and all(NUMERIC.match(v) for v in col)
            out.append("---:" if numeric else ":---")
        return out

    def to_latex(self) -> str:
        n_idx = len(self.index)
        spec = "l" * n_idx + "".join("c" * len(cols) for _, cols in self.groups)
        out = [
            "\\begin{table}[ht]",
            "\\centering",
            "\\small",
            f"\\caption{{{tex(self.title)}}}",
            f"\\label{{tab:{self.name}}}",
            f"\\begin{{tabular}}{{{spec}}}",
            "\\toprule",
        ]
        if any(g for g, _ in self.groups):
            top, rules, col = [""] * n_idx, [], n_idx + 1
            for g, cols in self.groups:
                top.append(
                    f"\\multicolumn{{{len(cols)}}}{{c}}{{{tex(g)}}}"
                    if g
                    else " & ".join([""] * len(cols))
                )
                if g:
                    rules.append(f"\\cmidrule(lr){{{col}-{col + len(cols) - 1}}}")
                col += len(cols)
            out.append(" & ".join(top) + " \\\\")
            out.append(" ".join(rules))
        out.append(
            " & ".join(tex(h) for h in self.index + [c for _, cols in self.groups for c in cols])
            + " \\\\"
        )
        out.append("\\midrule")
        for idx, vals in self.rows:
            out.append(" & ".join([tex(v) for v in idx] + [tex_cell(v) for v in vals]) + " \\\\")
        out += ["\\bottomrule", "\\end{tabular}"]
        if self.notes:
            out.append("\\par\\smallskip\\footnotesize " + tex(" ".join(self.notes)))
        out.append("\\end{table}")
        return "\n".join(out) + "\n"

    def to_csv(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(self.header())
        for idx, vals in self.rows:
            writer.writerow(idx + vals)
        return buf.getvalue()


TEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "—": "---",
    "±": r"$\pm$",
    "Δ": r"$\Delta$",
    "τ": r"$\tau$",
}


def tex(s: str) -> str:
    return "".join(TEX_ESCAPES.get(ch, ch) for ch in str(s))


def tex_cell(s: str) -> str:
    """`0.640 [0.55, 0.72]` -> the mean with a small CI below-right, as papers print it."""
    s = str(s)
    if " [" in s and s.endswith("]"):
        mean, ci = s.split(" [", 1)
        return f"{tex(mean)} {{\\scriptsize[{tex(ci)}}}"
    return tex(s)


def fmt(v: tuple[float, float, float] | None, digits: int = 3) -> str:
    if v is None:
        return DASH
    mean, low, high = v
    return f"{mean:.{digits}f} [{low:.2f}, {high:.2f}]"


def fmt_diff(d: dict | None) -> str:
    if d is None:
        return DASH
    star = "*" if d["diff_ci95_low"] > 0 or d["diff_ci95_high"] < 0 else ""
    return f"{d['diff_mean']:+.3f} [{d['diff_ci95_low']:+.2f}, {d['diff_ci95_high']:+.2f}]{star}"


# --------------------------------------------------------------------------------------------
# rows: which cells share a row of the paper-like tables


@dataclass
class Layout:
    """Which dimensions vary in this sweep (each one that does gets a column or a label part)."""

    checkpoint: bool
    policy_seed: bool
    tau_grid: bool
    mc_samples: bool
    invalid: bool

    @classmethod
    def of(cls, sweep: Sweep) -> Layout:
        cells = sweep.cells
        asking = [c for c in cells if c.gate in ASKING_GATES]
        prompts = {(c.prompt, bool(c.rationale)) for c in cells if c.gate not in (None, "never")}
        return cls(
            checkpoint=len({c.checkpoint for c in cells if c.checkpoint is not None}) > 1,
            policy_seed=len({c.policy_seed for c in cells if c.policy_seed is not None}) > 1,
            tau_grid=len({c.tau_setting for c in asking if is_number(c.tau_setting)}) > 1,
            mc_samples=len({c.mc_samples for c in asking if c.mc_samples is not None}) > 1,
            invalid=len(prompts) > 1
            or any((c.summary or {}).get("queries_total", 0) > 0 for c in cells),
        )


@dataclass
class Row:
    index: list[str]
    order: tuple
    cells: dict[str, Cell] = field(default_factory=dict)  # env -> cell


def row_label(c: Cell, lay: Layout) -> str:
    label = method_label(c)
    if c.gate in ASKING_GATES:
        if lay.tau_grid and c.tau_setting is not None:
            label += f" τ={c.tau_setting:g}" if is_number(c.tau_setting) else f" τ={c.tau_setting}"
        if lay.mc_samples and c.mc_samples is not None:
            label += f" N={c.mc_samples}"
    return label


def build_rows(sweep: Sweep, lay: Layout) -> list[Row]:
    """One row per method (x checkpoint x policy seed where they vary), cells keyed by env;
    two cells that would share a (row, env) slot are told apart by the overrides that differ."""
    cells = [c for c in sweep.cells if c.env is not None]
    extra: dict[str, str] = {c.job: "" for c in cells}

    def index(c: Cell) -> list[str]:
        idx = [row_label(c, lay) + extra[c.job]]
        if lay.checkpoint:
            idx.append(str(c.checkpoint) if c.checkpoint is not None else DASH)
        if lay.policy_seed:
            idx.append(str(c.policy_seed) if c.policy_seed is not None else DASH)
        return idx

    for attempt in range(2):
        slots: dict[tuple, list[Cell]] = defaultdict(list)
        for c in cells:
            slots[(*index(c), c.env)].append(c)
        clashes = [group for group in slots.values() if len(group) > 1]
        if not clashes:
            break
        for group in clashes:
            if attempt == 0:
                keys = _differing_override_keys(group)
                for c in group:
                    ov = dict(o.split("=", 1) for o in c.overrides if "=" in o)
                    extra[c.job] += "".join(f" {k}={ov.get(k, DASH)}" for k in keys)
            else:
                for c in group:
                    extra[c.job] += f" #{c.job}"
    rows: dict[tuple, Row] = {}
    for c in cells:
        idx = index(c)
        order = (
            method_order(c),
            c.tau_setting if is_number(c.tau_setting) else -1,
            c.mc_samples or 0,
            checkpoint_order(c.checkpoint),
            c.policy_seed or 0,
            idx[0],
        )
        if lay.checkpoint:
            order = (checkpoint_order(c.checkpoint), *order)
        row = rows.setdefault(tuple(idx), Row(index=idx, order=order))
        row.order = min(row.order, order)
        row.cells[c.env] = c
    return sorted(rows.values(), key=lambda r: r.order)


def _differing_override_keys(group: list[Cell]) -> list[str]:
    maps = [dict(o.split("=", 1) for o in c.overrides if "=" in o) for c in group]
    keys = sorted({k for m in maps for k in m})
    return [k for k in keys if len({m.get(k) for m in maps}) > 1]


def index_names(lay: Layout) -> list[str]:
    return (
        ["method"]
        + (["checkpoint"] if lay.checkpoint else [])
        + (["policy seed"] if lay.policy_seed else [])
    )


def status_mark(c: Cell) -> str:
    return f"{c.status.upper()} (job {c.job})"


# --------------------------------------------------------------------------------------------
# the tables


def main_table(sweep: Sweep, rows: list[Row], lay: Layout) -> Table:
    groups = []
    for env in sweep.envs():
        cols = ["reward", sweep.metric_of(env), "IR", "OR"] + (["invalid"] if lay.invalid else [])
        groups.append((env_label(env), cols))
    table = Table(
        "main",
        f"Results: {sweep.experiment} (test seeds, mean [95% bootstrap CI])",
        index_names(lay),
        groups,
    )
    keys = ("reward", None, "ir", "or", "invalid_rate")
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
                    fmt(c.value(k or metric)) if k != "invalid_rate" or asked else DASH
                    for k in keys[:n]
                ]
        table.rows.append((row.index, vals))
    table.notes.append(
        "IR = queried steps / steps; OR = steps whose action differs from PPO's / "
        "steps" + ("; invalid = unparseable answers / queries." if lay.invalid else ".")
    )
    if any(not c.ok for c in sweep.cells):
        table.notes.append("FAILED / MISSING cells: see the table of failed and missing cells.")
    aliases = _checkpoint_aliases(sweep)
    if aliases:
        table.notes.append("Checkpoints used: " + "; ".join(aliases) + ".")
    return table


def _checkpoint_aliases(sweep: Sweep) -> list[str]:
    out = defaultdict(set)
    for c in sweep.ok:
        if c.checkpoint and c.checkpoint_name and c.checkpoint_name != c.checkpoint:
            out[c.checkpoint].add(f"{c.checkpoint_name} ({c.env})")
    return [
        f"{k} = {', '.join(sorted(v))}"
        for k, v in sorted(out.items(), key=lambda kv: checkpoint_order(kv[0]))
    ]


def ppo_reference(c: Cell, sweep: Sweep) -> Cell | None:
    """PPO-only of the same env (and checkpoint and policy seed when `c` uses a policy);
    SLM-only is compared with the strongest checkpoint in the sweep (final, else best, else the
    highest threshold) of the lowest policy seed."""
    cands = [p for p in sweep.ok if p.gate == "never" and p.env == c.env]
    if c.has_policy:
        cands = [
            p for p in cands if p.checkpoint == c.checkpoint and p.policy_seed == c.policy_seed
        ]
    cands.sort(
        key=lambda p: (
            -checkpoint_order(p.checkpoint)[0],
            p.policy_seed or 0,
            int(p.job) if p.job.isdigit() else 0,
        )
    )
    return cands[0] if cands else None


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
    if not any(c.gate == "never" for c in sweep.ok):
        return None
    groups = [
        (env_label(env), ["Δ reward", f"Δ {sweep.metric_of(env)}", "n"]) for env in sweep.envs()
    ]
    table = Table(
        "paired",
        "Paired difference vs PPO-only on the same seeds (method − PPO, mean [95% bootstrap CI])",
        index_names(lay),
        groups,
    )
    for row in rows:
        if all(c.gate == "never" for c in row.cells.values()):
            continue
        vals: list[str] = []
        for env in sweep.envs():
            c = row.cells.get(env)
            if c is None:
                vals += ["", "", ""]
                continue
            if not c.ok:
                vals += [status_mark(c), DASH, DASH]
                continue
            ref = ppo_reference(c, sweep)
            dr = paired(c, ref, "reward") if ref else None
            dm = paired(c, ref, sweep.metric_of(env)) if ref else None
            if dr is None:
                vals += ["no PPO reference" if ref is None else "no common seeds", DASH, DASH]
            else:
                vals += [fmt_diff(dr), fmt_diff(dm), str(dr["n"])]
        table.rows.append((row.index, vals))
    table.notes.append(
        "Episodes matched by seed; PPO of the same env, checkpoint and policy seed "
        "(SLM-only: PPO's strongest checkpoint). * = the CI excludes 0."
    )
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


def policy_runs(sweep: Sweep) -> list[dict]:
    """The distinct PPO checkpoint dirs the sweep's cells used, with what training wrote there."""
    runs: dict[str, dict] = {}
    for c in sweep.ok:
        if not c.checkpoint_path:
            continue
        d = Path(c.checkpoint_path).parent
        if str(d) in runs or not d.is_dir():
            continue
        metas = {}
        for f in sorted(d.glob("*.json")):
            data = _read_json(f)
            if isinstance(data, dict) and ("timesteps" in data or "eval_reward" in data):
                metas[f.stem] = data
        config = _read_json(d / "config.json") or {}
        runs[str(d)] = {
            "dir": d,
            "env": c.env,
            "metric": c.metric,
            "policy_seed": c.policy_seed,
            "metas": metas,
            "thresholds": (config.get("policy") or {}).get("thresholds"),
            "curve": d / "curve.csv" if (d / "curve.csv").exists() else None,
        }
    return sorted(
        runs.values(),
        key=lambda r: (
            sweep.envs().index(r["env"]) if r["env"] in sweep.envs() else 99,
            r["policy_seed"] or 0,
            str(r["dir"]),
        ),
    )


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


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
        reached = sorted(
            (k for k in metas if k.startswith("r") and k[1:].isdigit()), key=checkpoint_order
        )
        reached_txt = ", ".join(f"{k} ({at(metas[k])})" for k in reached) or "none"
        missing = DASH
        if r["thresholds"]:
            names = [f"r{int(round(float(t) * 100)):03d}" for t in r["thresholds"]]
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
    for c in sorted(bad, key=lambda c: (int(c.job) if c.job.isdigit() else 10**9, c.job)):
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


def details_table(sweep: Sweep, lay: Layout) -> Table | None:
    """Per cell: the threshold used and what it cost."""
    cells = sorted(
        sweep.ok,
        key=lambda c: (
            sweep.envs().index(c.env),
            method_order(c),
            checkpoint_order(c.checkpoint),
            c.policy_seed or 0,
        ),
    )
    if not cells:
        return None
    table = Table(
        "details",
        "Per cell: threshold and cost",
        ["job", "env", "method"],
        [
            (
                "",
                [
                    "checkpoint",
                    "policy seed",
                    "tau",
                    "episodes",
                    "queries",
                    "prompt tokens",
                    "generated tokens",
                    "consultant s",
                    "wall s",
                    "cache hits",
                ],
            )
        ],
    )
    for c in cells:
        s = c.summary or {}
        cache = s.get("cache") or {}
        looked = (cache.get("hits") or 0) + (cache.get("misses") or 0)
        table.rows.append(
            (
                [c.job, env_label(c.env), row_label(c, lay)],
                [
                    str(c.checkpoint_name or c.checkpoint or DASH),
                    DASH if c.policy_seed is None else str(c.policy_seed),
                    DASH if c.tau is None else f"{c.tau:.3f}" + (" (tuned)" if c.trials else ""),
                    str(s.get("n_episodes", DASH)),
                    f"{s.get('queries_total', 0):,.0f}",
                    f"{s.get('prompt_tokens_total', 0):,.0f}",
                    f"{s.get('generated_tokens_total', 0):,.0f}",
                    f"{s.get('consultant_seconds_total', 0):.1f}",
                    f"{s.get('wall_seconds', 0):.1f}",
                    f"{cache.get('hits', 0) / looked:.0%}" if looked else DASH,
                ],
            )
        )
    return table


def cells_csv(sweep: Sweep, lay: Layout) -> str:
    """Every cell as one tidy row of raw numbers (for pandas), failed and missing ones included."""
    fields = [
        "job",
        "status",
        "env",
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
    metrics = ("reward", "success", "accuracy", "length", "ir", "or", "invalid_rate")
    fields += [f"{m}_{s}" for m in metrics for s in ("mean", "ci95_low", "ci95_high")]
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
        row = {k: getattr(c, k, None) for k in fields if hasattr(c, k)}
        row.update({k: v for k, v in (c.summary or {}).items() if k in fields})
        row["method"] = row_label(c, lay) if c.gate else None
        row["overrides"] = " ".join(c.overrides)
        row["message"] = (c.error or {}).get("message") if c.error else (c.note or None)
        writer.writerow(row)
    return buf.getvalue()
