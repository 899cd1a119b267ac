"""`python -m benchmark.plan +experiment=<preset> [overrides] [--json] [--queries-per-s Q]
[--tokens-per-s T] [--bench FILE]`: a sweep's cells, their status in the results root, and the
work (and time) the cells that are not complete still need. Nothing is computed, trained or
built: a model made on first use (the tiny model, a fine-tuned one) that is not there yet is
shown as "model not built yet" (the job builds it, then names the cell by its weights).

The sweep is expanded as the report expands it (`benchmark.config.sweep_jobs`: the
preset's sweeper params, then the command line's overrides, product in Hydra's job order); each
job's config is composed with Hydra's compose API, as `python -m benchmark` composes it. Jobs
that are the same cell (PPO-only swept over consultants it never asks) are listed once.

Status (`<paths.root>/cells/<hash>/`, the hash from `build.prepare` + `build.locate_inputs`):
- complete: summary.json and episodes.jsonl complete and consistent (`results.complete_cell`),
  or a complete v1 cell that a job would adopt as this one (`benchmark.migrate`);
- failed: error.json (its first line shown); a rerun computes it again;
- pending: not computed yet ("policy not trained" when its PPO checkpoint does not exist yet,
  "model not built yet" when its consultant's model does not: its hash is not known yet); a
  cell stored under the same config but another hash is flagged
  "inputs changed since <old hash>" (the checkpoint or model weights were replaced, or the code
  versions changed), because the old results will not be reused;
- invalid: the config fails validation (the job would fail before any work).

Work of every cell that is not complete (failed or pending):
- episodes = eval.n_episodes; tuning trials still missing from its Optuna study when
  gate.tau=auto (a study shared by several cells is counted once) x tuning.n_episodes;
- max steps = the env's evaluation step limit x all those episodes;
- LM calls and tokens of a cell with a policy (ASK, ASK+): measured from the same cell computed
  with `slm=tiny` (preferred: it has token counts) or `slm=oracle` when one is complete in the
  root (same identity but for the consultant: the interaction rate and episode lengths follow the
  policy and tau; the tuning part is estimated from its trials' IR and its mean episode length).
  Otherwise, and always for SLM-only cells (there the consultant alone decides how long an
  episode lasts), bounded above: every step queried (IR 1), every decoding round at its token
  cap. Prompt tokens are known only from a tiny-model reference (its own tokenizer: an estimate
  of a real model's).

Projected time (LM cells only; the oracle and dice cost nothing to speak of): LM calls /
queries-per-s and generated tokens / tokens-per-s (the larger, when both are known), from the
flags or else from the newest `make bench-gpu` JSON under paths.bench that measured the cell's
model (its largest batch), or `make bench`'s lockstep figure for the tiny model. PPO training
for cells whose policy is not trained is not included."""

from __future__ import annotations

import argparse
import csv
import json
import logging
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

import benchmark  # noqa: F401 - registers the config resolvers
from benchmark import results
from benchmark.config import session, sweep_jobs
from benchmark.store import Store
from benchmark.store import StoredCell as Stored
from benchmark.tuning import trials_missing

log = logging.getLogger(__name__)
REFERENCE_SLMS = ("tiny", "oracle")  # preferred first: the tiny model reports token counts
NON_LM_BACKENDS = (
    "benchmark.consultants.oracle.OracleConsultant",
    "benchmark.consultants.dice.DiceConsultant",
)
THINK_CLOSE_BYTES = len(b"</think>\n\n")  # closing an open thinking block: at most one token a byte
COMPLETE, FAILED, PENDING, INVALID = "complete", "failed", "pending", "invalid"
NOT_BUILT = "model not built yet"


# ----------------------------------------------------------------------------- data
@dataclass
class Work:
    """What a cell that is not complete still needs. `calls` is LM calls (a consultation of the
    belief prompt makes two); `*_max` are the bounds at IR 1 with every round at its token cap."""

    episodes: int
    tuning_trials: int
    tuning_episodes: int
    max_steps: int
    calls: int
    calls_max: int
    prompt_tokens: int | None  # None: not measured (no tiny-model reference)
    generated_tokens: int
    generated_tokens_max: int
    basis: str  # "measured: ..." | "bound: ..." | "no consultant"


@dataclass
class Throughput:
    queries_per_s: float | None = None  # LM calls per second
    tokens_per_s: float | None = None  # generated tokens per second
    source: str = ""

    def seconds(self, work: Work) -> float | None:
        parts = []
        if self.queries_per_s:
            parts.append(work.calls / self.queries_per_s)
        if self.tokens_per_s:
            parts.append(work.generated_tokens / self.tokens_per_s)
        return max(parts) if parts else None


@dataclass
class CellPlan:
    jobs: list[int]  # the sweep's job numbers that are this cell
    overrides: list[str]  # the first job's
    name: str
    hash: str | None  # None: not known yet (policy not trained) or invalid
    status: str
    note: str = ""  # policy not trained / the error's first line / inputs changed since ...
    changed_from: str | None = None  # the hash of the old cell of the same config
    lm: bool = False  # asks a language model (not the oracle or the dice)
    slm: str | None = None
    work: Work | None = None  # None for complete and invalid cells
    throughput: Throughput | None = None
    projected_s: float | None = None


@dataclass
class Plan:
    experiment: str
    root: str
    jobs: int
    cells: list[CellPlan] = field(default_factory=list)
    protocols: list[str] = field(default_factory=list)  # conf/protocol names the jobs use

    def count(self, status: str) -> int:
        return sum(c.status == status for c in self.cells)

    def totals(self) -> dict[str, Any]:
        todo = [c for c in self.cells if c.work is not None]
        works = [c.work for c in todo]

        def total(key: str) -> int:
            return sum(getattr(w, key) for w in works)

        measured = [w.prompt_tokens for w in works if w.calls and w.prompt_tokens is not None]
        projected = [c.projected_s for c in todo if c.projected_s is not None]
        return {
            **{s: self.count(s) for s in (COMPLETE, FAILED, PENDING, INVALID)},
            "policy_not_trained": sum(
                c.hash is None and c.status == PENDING and not c.note.startswith(NOT_BUILT)
                for c in self.cells
            ),
            "model_not_built": sum(c.note.startswith(NOT_BUILT) for c in self.cells),
            "inputs_changed": sum(c.changed_from is not None for c in self.cells),
            **{
                k: total(k)
                for k in (
                    "episodes",
                    "tuning_trials",
                    "tuning_episodes",
                    "max_steps",
                    "calls",
                    "calls_max",
                    "generated_tokens",
                    "generated_tokens_max",
                )
            },
            "prompt_tokens_measured": sum(measured),
            "cells_with_prompt_tokens": len(measured),
            "projected_s": sum(projected) if projected else None,
            "lm_cells_without_throughput": sum(
                c.lm and c.projected_s is None and c.work.calls > 0 for c in todo
            ),
        }

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "totals": self.totals()}


# ----------------------------------------------------------------------------- the sweep
def plan_sweep(
    overrides: list[str],
    throughput: Throughput | None = None,
    bench: Path | None = None,
) -> Plan:
    """The plan of the sweep `overrides` describe (as given to `python -m benchmark ... -m`).
    `throughput` applies to every LM cell; else each cell's model is looked up in the newest
    bench JSON (`bench`: that file instead)."""
    base, jobs = sweep_jobs(overrides)
    root = Path(str(base.paths.root))
    stored = stored_cells(root)
    measured = bench_throughputs(Path(str(base.paths.bench)), bench)
    plan = Plan(experiment=str(base.experiment_name), root=str(root), jobs=len(jobs))
    seen: dict[str, CellPlan] = {}
    studies: set[str] = set()
    with session() as compose:
        for number, job in enumerate(jobs):
            try:
                cfg = compose(job)
            except Exception as exc:  # noqa: BLE001 - shown as the cell's status
                key, cell = f"job{number}", _invalid(number, job, str(job), exc)
            else:
                key, cell = plan_cell(cfg, number, job, stored, studies)
                name = str(OmegaConf.select(cfg, "protocol.name", default="none"))
                if name not in plan.protocols:
                    plan.protocols.append(name)
            if key in seen:
                seen[key].jobs.append(number)
                continue
            seen[key] = cell
            if cell.work is not None and cell.lm:
                cell.throughput = throughput or measured.get(str(cell.slm))
                if cell.throughput is not None:
                    cell.projected_s = cell.throughput.seconds(cell.work)
            plan.cells.append(cell)
    return plan


def plan_cell(
    cfg: DictConfig, number: int, job: list[str], stored: list[Stored], studies: set[str]
) -> tuple[str, CellPlan]:
    """(dedup key, the cell's plan). `studies`: the tuning studies already counted (updated)."""
    from benchmark.build import locate_inputs, policy_checkpoint, prepare
    from benchmark.cell import digest

    try:
        task, splits, spec = prepare(cfg)
        checkpoint = policy_checkpoint(cfg, task, splits, train=False) if spec.uses_policy else None
        located = locate_inputs(spec, cfg, checkpoint)
    except Exception as exc:  # noqa: BLE001 - a job would fail the same way, before any work
        return f"job{number}", _invalid(number, job, str(cfg.env.name), exc)
    root = Path(str(cfg.paths.root))
    backend = str(cfg.slm.backend.get("_target_", "")) if spec.uses_consultant else ""
    cell = CellPlan(
        jobs=[number],
        overrides=list(job),
        name=(located or spec).name,
        hash=located.hash if located is not None else None,
        status=PENDING,
        lm=spec.uses_consultant and backend not in NON_LM_BACKENDS,
        slm=str(cfg.slm.name) if spec.uses_consultant else None,
    )
    reference, trials_todo = None, int(cfg.tuning.n_trials) if spec.tunes_tau else 0
    if located is None:
        untrained = spec.uses_policy and checkpoint is None
        missing = None if untrained else spec.uses_consultant and _model_not_built(cfg)
        cell.note = missing or _untrained_note(cfg, splits, untrained)
        key = "config:" + digest(spec.config)
        # a cell known but for its model's content is measured like the others (its hash
        # waits for the job to build the model)
        provisional = locate_inputs(spec, cfg, checkpoint, unbuilt="not built") if missing else None
        if provisional is not None:
            reference = find_reference(provisional, stored) if spec.uses_policy else None
            if spec.tunes_tau:
                trials_todo = _trials_todo(cfg, task, provisional, studies)
        elif spec.tunes_tau:  # a study named by configs alone: nothing of it can exist yet
            study = _study_of_config(cfg, spec)
            trials_todo = 0 if study in studies else trials_todo
            studies.add(study)
    else:
        key = located.hash
        cell_dir = located.dir(root)
        error = results.read_json(cell_dir / "error.json")
        if results.complete_cell(cell_dir) is not None:
            cell.status = COMPLETE
        elif (legacy := _legacy(located, cfg, checkpoint)) is not None:
            cell.status, cell.note = COMPLETE, legacy
        elif isinstance(error, dict):
            cell.status, cell.note = FAILED, _first_line(error)
        else:
            changed = changed_since(located, stored)
            if changed is not None:
                cell.changed_from, cell.note = changed
            elif (cell_dir / "cell.json").exists():
                cell.note = "started, no results (killed, or running now)"
        if cell.status == COMPLETE:
            return key, cell
        # with a policy, IR and episode lengths follow the policy and tau; without one (SLM-only)
        # the consultant alone decides how long an episode lasts: no reference, the bound
        reference = find_reference(located, stored) if spec.uses_policy else None
        if spec.tunes_tau:
            trials_todo = _trials_todo(cfg, task, located, studies)
    cell.work = cell_work(cfg, task, spec, trials_todo, reference)
    return key, cell


def _trials_todo(cfg: DictConfig, task: Any, located: Any, studies: set[str]) -> int:
    """The trials the cell's study still needs; 0 when another cell of the plan counted them."""
    study = str(located.inputs["tau_study"])
    if study in studies:
        return 0  # counted with the first cell that needs it
    studies.add(study)
    study_dir = Store.of(cfg.paths).study_dir(study)
    return trials_missing(study_dir, int(cfg.tuning.n_trials), task.max_reward)


def _study_of_config(cfg: DictConfig, spec: Any) -> str:
    """The study a cell without known inputs will tune in, named by the config of the cell that
    tunes it (tuning.scope=shared: the shared one), so that cells sharing it count it once."""
    from benchmark.build import prepare, shared_tuning_config
    from benchmark.cell import tuning_key

    source = shared_tuning_config(cfg)
    if source is not None:
        spec = prepare(source)[2]
    return "config:" + tuning_key(spec.config)


def _invalid(number: int, job: list[str], name: str, exc: BaseException) -> CellPlan:
    line = (str(exc).strip().splitlines() or [""])[0]
    return CellPlan(
        jobs=[number],
        overrides=list(job),
        name=name,
        hash=None,
        status=INVALID,
        note=f"{type(exc).__name__}: {line}",
    )


def _first_line(error: dict) -> str:
    lines = str(error.get("message", "")).strip().splitlines()
    return f"{error.get('type', 'error')}: {lines[0] if lines else ''}".rstrip(": ")


def _untrained_note(cfg: DictConfig, splits: Any, own: bool) -> str:
    """Why a cell has no hash yet: its own checkpoint, or the shared tuning cell's, is missing."""
    from benchmark.policy.checkpoints import MARKER, checkpoint_dir, manifest
    from benchmark.results import file_sha256

    if not own:
        return "policy of the shared tuning cell not trained"
    ckpt_dir = checkpoint_dir(cfg, splits)
    if not ckpt_dir.is_dir():
        return "policy not trained"
    name = str(cfg.policy.checkpoint)
    recorded = manifest(ckpt_dir)
    redo = "a job sets the directory aside and trains again"
    if recorded is None and (ckpt_dir / MARKER).exists():
        return f"checkpoint changed or corrupt ({ckpt_dir.name}/{MARKER} unreadable): {redo}"
    sha = (recorded or {}).get("checkpoints", {}).get(name)
    zip_path = ckpt_dir / f"{name}.zip"
    if sha is not None and (not zip_path.is_file() or file_sha256(zip_path) != sha):
        return (
            f"checkpoint changed or corrupt ({name}.zip in {ckpt_dir.name} no longer matches "
            f"its {MARKER} manifest): {redo}"
        )
    return f"policy not trained (no checkpoint {name} in {ckpt_dir.name})"


def _model_not_built(cfg: DictConfig) -> str | None:
    """'model not built yet (...)' when the cell's consultant is made on first use (the tiny
    model, a fine-tuned one) and is not there: its identity waits for the job to build it."""
    from benchmark.build import model_identity
    from benchmark.consultants.errors import ModelNotBuilt

    try:
        model_identity(cfg.slm)
    except ModelNotBuilt as exc:
        return f"{NOT_BUILT}: {exc}"
    return None


def _legacy(spec: Any, cfg: DictConfig, checkpoint: Path | None) -> str | None:
    """A complete cell of an older identity a job would adopt (benchmark.migrate), read-only."""
    from benchmark.build import locate_inputs
    from benchmark.cell import digest
    from benchmark.migrate import _changed_inputs, _model_changed, v1_cell_config

    store = Store.of(cfg.paths)
    if spec.dir(cfg.paths.root).exists():
        return None
    try:
        v2 = locate_inputs(spec, cfg, checkpoint, legacy=True)
    except Exception:  # noqa: BLE001 - no old identity: nothing to adopt
        v2 = None
    if v2 is not None and v2.hash != spec.hash:
        old_dir = store.cell_dir(v2.hash)
        if results.complete_cell(old_dir) is not None and not _model_changed(cfg, old_dir):
            return f"v2 cell {old_dir.name}, adopted as this one when the sweep runs"
    old_dir = store.cell_dir(digest(v1_cell_config(cfg)))
    done = results.complete_cell(old_dir)
    if done is None or _changed_inputs(spec, cfg, old_dir, done[0]):
        return None
    return f"v1 cell {old_dir.name}, adopted as this one when the sweep runs"


# ----------------------------------------------------------------------------- stored cells
def stored_cells(root: Path) -> list[Stored]:
    return Store(root).cells()


IDENTITY_PARTS = {
    "policy": "policy checkpoint",
    "slm": "model weights",
    "code": "code versions",
    "identity_version": "identity version",
    "tuning": "tuning study",
}


def changed_since(spec: Any, stored: list[Stored]) -> tuple[str, str] | None:
    """(old hash, note) when a cell of the same config is stored under another hash: its inputs
    (or the code) changed since, so the job computes it anew (issue 12, item 9)."""
    same = [s for s in stored if s.hash != spec.hash and s.config == spec.config]
    if not same:
        return None
    old = max(same, key=lambda s: s.mtime)
    what = ""
    if old.identity is not None:
        new = spec.identity
        keys = sorted(k for k in set(new) | set(old.identity) if new.get(k) != old.identity.get(k))
        what = ", ".join(IDENTITY_PARTS.get(k, k) for k in keys)
    return old.hash, f"inputs changed since {old.hash}" + (f" ({what})" if what else "")


def _sans_slm(identity: dict) -> dict:
    """An identity without its consultant: the slm, and what the slm puts elsewhere (its
    sampling settings in the prompt's decoding, its name in the tuning study's key)."""
    out = {k: v for k, v in identity.items() if k != "slm"}
    for part, key in (("prompt", "sampling"), ("tuning", "study")):
        if isinstance(out.get(part), dict):
            out[part] = {k: v for k, v in out[part].items() if k != key}
    return out


@dataclass
class Reference:
    """A complete cell of the same identity but for the consultant (tiny or oracle)."""

    hash: str
    slm: str
    summary: dict
    episodes: list[dict]
    trial_irs: list[float]


def find_reference(spec: Any, stored: list[Stored]) -> Reference | None:
    if not spec.uses_consultant:
        return None
    want = _sans_slm(spec.identity)
    found: dict[str, Stored] = {}
    for s in stored:
        slm = ((s.identity or {}).get("slm") or {}).get("name")
        if s.complete and s.hash != spec.hash and slm in REFERENCE_SLMS:
            if _sans_slm(s.identity) == want:
                found.setdefault(slm, s)
    for slm in REFERENCE_SLMS:
        if slm in found:
            done = results.complete_cell(found[slm].dir)
            if done is None:
                continue
            return Reference(found[slm].hash, slm, *done, _trial_irs(found[slm].dir))
    return None


def _trial_irs(cell_dir: Path) -> list[float]:
    try:
        with open(cell_dir / "trials.csv", newline="") as f:
            return [float(r["ir"]) for r in csv.DictReader(f) if r.get("ir") not in (None, "")]
    except (OSError, ValueError, KeyError, csv.Error):
        return []


# ----------------------------------------------------------------------------- work
def step_limit(task: Any) -> int:
    """The most steps an evaluation episode can take."""
    return int(getattr(task, "episode_limit", None) or task.max_steps)


def decoding_caps(prompt: Any) -> tuple[int, int]:
    """(LM calls per consultation, generated-token cap of one consultation): one call per
    decoding the prompt holds (the belief prompt: update, then act), each at most its
    max_new_tokens plus, in thinking mode, the thinking budget and the closing tag."""
    from benchmark.consultants.base import Decoding

    decodings = [v for v in vars(prompt).values() if isinstance(v, Decoding)]
    cap = sum(
        d.max_new_tokens + (d.thinking_budget + THINK_CLOSE_BYTES if d.enable_thinking else 0)
        for d in decodings
    )
    return max(len(decodings), 1), cap


def cell_work(
    cfg: DictConfig, task: Any, spec: Any, trials_todo: int, reference: Reference | None
) -> Work:
    from benchmark.build import build_prompt, shared_tuning_config

    episodes = int(cfg.eval.n_episodes)
    tuning_episodes = trials_todo * int(cfg.tuning.n_episodes)
    max_steps = step_limit(task) * (episodes + tuning_episodes)
    if not spec.uses_consultant:
        return Work(
            episodes, trials_todo, tuning_episodes, max_steps, 0, 0, 0, 0, 0, "no consultant"
        )
    rounds, cap = decoding_caps(build_prompt(cfg, task))
    # a shared study tunes with its own prompt (ASK+'s for ASK): its caps bound the trials
    source = shared_tuning_config(cfg) if trials_todo else None
    tuning_rounds, tuning_cap = (
        decoding_caps(build_prompt(source, task)) if source is not None else (rounds, cap)
    )
    limit, tuning_steps = step_limit(task), step_limit(task) * tuning_episodes
    calls_max = limit * episodes * rounds + tuning_steps * tuning_rounds
    generated_max = limit * episodes * cap + tuning_steps * tuning_cap
    if reference is None:
        return Work(
            episodes,
            trials_todo,
            tuning_episodes,
            max_steps,
            calls_max,
            calls_max,
            None,
            generated_max,
            generated_max,
            "bound: every step queried (IR 1)",
        )
    rows = reference.episodes
    steps = sum(int(r["length"]) for r in rows)
    queries = sum(int(r["queries"]) for r in rows)
    measured_calls = sum(int(r.get("calls", r["queries"])) for r in rows)  # its evaluation
    per_query = measured_calls / queries if queries else rounds
    irs = reference.trial_irs
    tuning_ir = statistics.fmean(irs) if irs else queries / max(steps, 1)
    tuning_calls = round(tuning_episodes * steps / len(rows) * tuning_ir * per_query)
    calls = min(measured_calls + tuning_calls, calls_max)
    prompt_total = float(reference.summary.get("prompt_tokens_total") or 0.0)
    generated_total = float(reference.summary.get("generated_tokens_total") or 0.0)
    prompt_tokens = (
        round(calls * prompt_total / measured_calls) if prompt_total and measured_calls else None
    )
    if generated_total and measured_calls:
        generated = round(calls * generated_total / measured_calls)
    else:
        generated = round(calls * cap / rounds)  # measured calls, each at its token cap
    return Work(
        episodes,
        trials_todo,
        tuning_episodes,
        max_steps,
        calls,
        calls_max,
        prompt_tokens,
        min(generated, generated_max),
        generated_max,
        f"measured: {reference.slm} cell {reference.hash}",
    )


# ----------------------------------------------------------------------------- throughput
def bench_throughputs(bench_dir: Path, only: Path | None = None) -> dict[str, Throughput]:
    """{slm name: throughput} from bench JSONs, newest first (`only`: that file): `make
    bench-gpu`'s per-model figures at its largest batch (dry runs skipped), `make bench`'s
    lockstep LM calls/s for the tiny model."""
    files = [Path(only)] if only else sorted(Path(bench_dir).glob("*.json"), key=_mtime)[::-1]
    out: dict[str, Throughput] = {}
    for path in files:
        data = results.read_json(path)
        if not isinstance(data, dict):
            if only:
                raise ValueError(f"--bench {path}: not a readable bench JSON")
            continue
        if data.get("kind") == "gpu" and not data.get("dry_run"):
            for name, entry in (data.get("models") or {}).items():
                tp = entry.get("throughput") or {}
                if name in out or not tp:
                    continue
                batch = max(tp, key=int)
                out[name] = Throughput(
                    tp[batch].get("queries_per_s"),
                    tp[batch].get("generated_tokens_per_s"),
                    f"{path.name}: {name} at batch {batch} on {data.get('device')}",
                )
        elif data.get("kind") == "cpu" and "tiny" not in out:
            lock = ((data.get("sections") or {}).get("evaluation") or {}).get("median", {})
            qps = (lock.get("lockstep") or {}).get("queries_per_s")
            if qps:
                out["tiny"] = Throughput(qps, None, f"{path.name}: tiny, lockstep evaluation")
    return out


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmark.plan",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("overrides", nargs="*", help="Hydra overrides, as for python -m benchmark -m")
    p.add_argument("--json", action="store_true", help="machine output (one JSON object)")
    p.add_argument("--queries-per-s", type=float, default=None, help="LM calls per second")
    p.add_argument("--tokens-per-s", type=float, default=None, help="generated tokens per second")
    p.add_argument("--bench", type=Path, default=None, help="a bench JSON (default: the newest)")
    args = p.parse_args(argv)
    for flag in ("queries_per_s", "tokens_per_s"):
        value = getattr(args, flag)
        if value is not None and not value > 0:
            p.error(f"--{flag.replace('_', '-')}={value} must be > 0")
    given = None
    if args.queries_per_s or args.tokens_per_s:
        figures = [
            f"{v:g} {unit}, given"
            for v, unit in ((args.queries_per_s, "LM calls/s"), (args.tokens_per_s, "tokens/s"))
            if v
        ]
        given = Throughput(args.queries_per_s, args.tokens_per_s, ", ".join(figures))
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    plan = plan_sweep(args.overrides, throughput=given, bench=args.bench)
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2, default=str))
    else:
        print(format_plan(plan))
    return 0


if __name__ == "__main__":
    sys.exit(main())
