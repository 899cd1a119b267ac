"""The report's model: a sweep's cells, what each one is called, in which order they come, and
the row layout the tables and the figures share. No I/O here beyond the env configs' display
names (`benchmark.report.loading` reads a sweep dir into these objects)."""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from benchmark.gates import gate_order
from benchmark.labels import is_number, method_label, number_text, prompt_label, slm_label  # noqa: F401
from benchmark.policy.names import order as checkpoint_order
from benchmark.policy.names import threshold_of
from benchmark.report.render import DASH, Table

OK, FAILED, MISSING = "ok", "failed", "missing"
ENV_ORDER = (  # the papers' order; envs not listed follow alphabetically
    "fourrooms",
    "doorkey8",
    "higherlower",
    "empty5x5_random",
    "empty16x16",
    "simplecrossing9",
)
PROMPT_ORDER = ("basic", "enriched", "stateful_min", "stateful", "belief")


# the CellSpec.labels() a Cell holds; the summary has them too (and wins)
LABELS = (
    "env",
    "metric",
    "gate",
    "slm",
    "prompt",
    "rationale",
    "checkpoint",
    "policy_seed",
    "mc_samples",
    "variant",
)


@dataclass
class Cell:
    """One job of the sweep and everything the report needs about it. The labels (env ... split)
    are `benchmark.cell.CellSpec.labels()` of the job's config, overridden by its summary: None
    for what the cell does not use (no slm or prompt for PPO-only, no checkpoint for SLM-only)."""

    job: str
    status: str
    overrides: list[str] = field(default_factory=list)
    env: str | None = None
    metric: str | None = None
    gate: str | None = None
    slm: str | None = None
    prompt: str | None = None
    rationale: bool | None = None
    checkpoint: str | None = None  # as configured (final, best, rNNN, tK)
    checkpoint_name: str | None = None  # the file actually used (r030 for t2), when known
    checkpoint_path: str | None = None
    # the validation success training recorded beside that file (<name>.json), when known
    checkpoint_success: float | None = None
    match_success: float | None = None  # policy.match_success, the target of checkpoint=match
    policy_seed: int | None = None
    uses_policy: bool | None = None  # CellSpec.uses_policy; None when the config was unreadable
    tau_setting: Any = None  # as configured: a number, "auto", or None (no threshold)
    tau: float | None = None  # as used (the tuned value for auto)
    mc_samples: int | None = None
    variant: str | None = None  # PPO's input and head where not the defaults (CellSpec.variant)
    p: Any = None  # random gate's query probability as configured (number or "match")
    name: str | None = None  # CellSpec.name
    summary: dict | None = None
    episodes: list[dict] | None = None
    error: dict | None = None
    trials: list[dict] | None = None
    note: str = ""
    protocol: str | None = None  # conf/protocol the job ran under (paper, official, suite)
    protocol_overrides: dict = field(default_factory=dict)  # protocol keys the job overrides
    # the consultant's sampling temperature (slm.decoding.temperature; 0: greedy), None where the
    # cell has no consultant or its config is unreadable
    temperature: float | None = None

    @classmethod
    def of_spec(cls, spec: Any, job: str = "", status: str = "ok") -> Cell:
        """The cell a `benchmark.cell.CellSpec` describes, before any result."""
        cell = cls(job=job, status=status)
        cell.set_labels(spec.labels(), spec.gate.args)
        cell.uses_policy = spec.uses_policy
        return cell

    def set_labels(self, labels: dict, gate_args: dict) -> None:
        """What the job was asked to run: the LABELS, its name, and the gate's tau and p."""
        for key in LABELS:
            setattr(self, key, labels.get(key))
        self.name = labels.get("cell") or self.name
        self.tau_setting, self.p = gate_args.get("tau"), gate_args.get("p")
        if is_number(self.tau_setting):
            self.tau = float(self.tau_setting)

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def has_policy(self) -> bool:
        """Whether the cell uses a PPO policy: the spec says so; without a readable config, the
        labels do (a cell without a policy has no checkpoint)."""
        if self.uses_policy is not None:
            return self.uses_policy
        return self.checkpoint is not None

    def value(self, metric: str) -> tuple[float, float, float] | None:
        """(mean, ci low, ci high) of a summary metric, or None when absent: `<metric>_mean`, or
        for a pooled rate (`ir_pooled`, `or_pooled`, `invalid_rate_pooled`) the value itself."""
        s = self.summary or {}
        mean = s.get(metric) if metric.endswith("_pooled") else s.get(f"{metric}_mean")
        if mean is None or (isinstance(mean, float) and math.isnan(mean)):
            return None
        return (
            float(mean),
            float(s.get(f"{metric}_ci95_low", mean)),
            float(s.get(f"{metric}_ci95_high", mean)),
        )


def protocol_caption(cells: list[Cell]) -> str:
    """`protocol NAME` (or the protocols of a mixed sweep) and the protocol keys cells override,
    for the table captions; empty for cells run before protocols existed."""
    from collections import Counter

    from benchmark.protocol import caption

    names = Counter(c.protocol for c in cells if c.protocol)
    overrides = Counter(f"{k}={v}" for c in cells for k, v in sorted(c.protocol_overrides.items()))
    return caption(dict(names), dict(overrides))


@dataclass
class Sweep:
    root: Path
    cells: list[Cell]
    config: DictConfig | None  # multirun.yaml (unresolved), None for a single run dir
    experiment: str

    @property
    def ok(self) -> list[Cell]:
        return [c for c in self.cells if c.ok]

    def envs(self) -> list[str]:
        """Envs in ENV_ORDER, then the others alphabetically."""
        names = {c.env for c in self.cells if c.env}
        known = [e for e in ENV_ORDER if e in names]
        return known + sorted(names - set(known))

    def cell_order(self, c: Cell) -> tuple:
        """The order of the per-cell tables: env, method, checkpoint, policy seed."""
        return (
            self.envs().index(c.env),
            method_order(c),
            checkpoint_order(c.checkpoint),
            c.policy_seed or 0,
        )

    def metric_of(self, env: str) -> str:
        for c in self.cells:
            if c.env == env and c.metric:
                return c.metric
        return "success"


# --------------------------------------------------------------------------------------------
# names


@functools.cache
def _env_conf(env: str) -> dict[str, Any]:
    from benchmark.envs import load_env_cfg

    try:
        cfg = load_env_cfg(env)
    except ValueError:  # an env this checkout has no config for: shown by its name
        return {}
    return {"label": cfg.get("label"), "kind": cfg.get("kind")}


def env_label(env: str) -> str:
    """The display name, `label` in conf/env/<env>.yaml."""
    return _env_conf(env).get("label") or env


def env_kind(env: str | None) -> str | None:
    """navigation, doorkey or card_game: `kind` in conf/env/<env>.yaml."""
    return _env_conf(env).get("kind") if env else None


# what a label adds for a Layout dimension that varies: (the cell's value, its text)
LABEL_PARTS = {
    "tau_grid": (lambda c: c.tau_setting, lambda c: f" τ={number_text(c.tau_setting)}"),
    "mc_samples": (lambda c: c.mc_samples, lambda c: f" N={c.mc_samples}"),
    "checkpoint": (lambda c: c.checkpoint, lambda c: f" @{c.checkpoint_name or c.checkpoint}"),
    "policy_seed": (lambda c: c.policy_seed, lambda c: f" s{c.policy_seed}"),
}


def varying_label(c: Cell, lay: Layout, dims: tuple[str, ...]) -> str:
    """The method, with the cell's value of each of `dims` (LABEL_PARTS) the cells vary in."""
    parts = (LABEL_PARTS[d] for d in dims if getattr(lay, d))
    return method_label(c) + "".join(text(c) for value, text in parts if value(c) is not None)


def row_label(c: Cell, lay: Layout) -> str:
    """The method, with tau and the MC sample count where the sweep varies them."""
    return varying_label(c, lay, ("tau_grid", "mc_samples"))


def cell_table(name: str, title: str, columns: list[str], notes: Iterable[str] = ()) -> Table:
    """A table of one row per cell (`add_cell_row`): job, env and the cell's label, then
    `columns`."""
    return Table(name, title, ["job", "env", "method"], [("", columns)], notes=list(notes))


def add_cell_row(table: Table, c: Cell, label: str, values: list[str]) -> None:
    table.rows.append(([c.job, env_label(c.env), label], values))


def step_numbers(
    c: Cell, records: list[dict] | None, keys: tuple[str, ...], compute: Callable[[list], dict]
) -> dict | None:
    """A cell's numbers of a step-record section: its summary when it holds them (any of
    `keys`), else `compute(records)` (summaries older than the section lack them), else None."""
    s = c.summary or {}
    if any(k in s for k in keys):
        return s
    return compute(records) if records is not None else None


def checkpoint_tick(name: str) -> str:
    """rNNN as its reward threshold (r030 -> 0.30); other names as they are."""
    threshold = threshold_of(name)
    return name if threshold is None else f"{threshold:.2f}"


# --------------------------------------------------------------------------------------------
# order


def method_order(c: Cell) -> tuple:
    order = gate_order()  # the gates' declarations (Gate.report_order)
    gate = order.index(c.gate) if c.gate in order else len(order)
    if c.gate == "always":  # SLM-only models first, then the dice and the oracle
        gate += {"random": 0.3, "oracle": 0.6}.get(c.slm or "", 0.0)
    prompt = PROMPT_ORDER.index(c.prompt) if c.prompt in PROMPT_ORDER else len(PROMPT_ORDER)
    return (gate, prompt, c.prompt or "", bool(c.rationale), c.slm or "")


def job_order(c: Cell) -> tuple:
    """Job number order (numbered jobs first)."""
    return (int(c.job) if c.job.isdigit() else 10**9, c.job)


# --------------------------------------------------------------------------------------------
# rows: which cells share a row of the paper-like tables and a line of the figures


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
        return cls.of_cells(sweep.cells)

    @classmethod
    def of_cells(cls, cells: list[Cell]) -> Layout:
        """The layout of these cells alone (a figure's panels, a table's rows)."""
        prompts = {(c.prompt, bool(c.rationale)) for c in cells if c.prompt is not None}
        return cls(
            checkpoint=len({c.checkpoint for c in cells if c.checkpoint is not None}) > 1,
            policy_seed=len({c.policy_seed for c in cells if c.policy_seed is not None}) > 1,
            tau_grid=len({c.tau_setting for c in cells if is_number(c.tau_setting)}) > 1,
            mc_samples=len({c.mc_samples for c in cells if c.mc_samples is not None}) > 1,
            invalid=len(prompts) > 1
            or any((c.summary or {}).get("queries_total", 0) > 0 for c in cells),
        )

    def index_names(self) -> list[str]:
        return (
            ["method"]
            + (["checkpoint"] if self.checkpoint else [])
            + (["policy seed"] if self.policy_seed else [])
        )


@dataclass
class Row:
    index: list[str]
    order: tuple
    cells: dict[str, Cell] = field(default_factory=dict)  # env -> cell


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


def tuned_objective(c: Cell) -> str | None:
    """The objective that chose the cell's threshold (`tuning.objective`: reward, budget, ...),
    "match" for a random gate whose p matches another cell's IR, None for a fixed tau."""
    objective = (c.summary or {}).get("tuning_objective")
    if str(c.p) == "match":
        return "match"
    if objective or c.trials or str(c.tau_setting) == "auto":
        return objective or "reward"
    return None


def unique_cells(cells: list[Cell]) -> list[Cell]:
    """The first job of each cell, in order: jobs that differ only in keys a cell does not read
    (e.g. `tuning.alpha` under another objective) are one cell (its summary's cell_hash)."""
    seen: set[str] = set()
    out = []
    for c in cells:
        key = (c.summary or {}).get("cell_hash") or c.job
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


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


def slm_reference(c: Cell, sweep: Sweep) -> Cell | None:
    """SLM-only of the same env and consultant: what a gated cell becomes when it asks at every
    step. The same prompt (and rationale) first; else the consultant's first SLM-only prompt, so
    Table 1's ASK (basic prompt) still meets the SLM-only row (stateful + rationale)."""
    cands = [p for p in sweep.ok if p.gate == "always" and p.env == c.env and p.slm == c.slm]
    cands.sort(
        key=lambda p: (
            (p.prompt, bool(p.rationale)) != (c.prompt, bool(c.rationale)),
            PROMPT_ORDER.index(p.prompt) if p.prompt in PROMPT_ORDER else len(PROMPT_ORDER),
            str(p.prompt),
            bool(p.rationale),
            int(p.job) if p.job.isdigit() else 0,
        )
    )
    return cands[0] if cands else None
