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
- complete: summary.json and episodes.jsonl complete and consistent (`results.complete_cell`);
  in a root of an earlier release's layout, the migration at the sweep's start is surveyed
  read-only (`benchmark.migrate`): a warning says what it would do, and names what is no longer
  read;
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
import json
import logging
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

import benchmark  # noqa: F401 - registers the config resolvers
from benchmark import migrate, results
from benchmark.config import session, sweep_jobs
from benchmark.plan_data import COMPLETE, FAILED, INVALID, NOT_BUILT, PENDING, CellPlan, Plan
from benchmark.plan_estimate import Throughput, bench_throughputs, cell_work, find_reference
from benchmark.plan_format import format_plan
from benchmark.store import Store
from benchmark.store import StoredCell as Stored
from benchmark.tuning import trials_missing

log = logging.getLogger(__name__)


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
    migration = migrate.pending(base.paths)  # None: the root is of this release's layout
    if migration is not None and (migration.moved or migration.left):
        lines = migration.lines()
        log.warning(
            "%s (at the sweep's start, or by python -m benchmark.migrate %s)\n%s",
            lines[0],
            root,
            "\n".join(lines[1:]),
        )
    stored = stored_cells(root)
    measured = bench_throughputs(Path(str(base.paths.bench)), bench)
    plan = Plan(experiment=str(base.experiment_name), root=str(root), jobs=len(jobs))
    seen: dict[str, CellPlan] = {}
    studies: set[str] = set()
    warned: set[str] = set()  # each warning of a consultant's identity once per plan
    with session() as compose:
        for number, job in enumerate(jobs):
            try:
                cfg = compose(job)
            except Exception as exc:  # noqa: BLE001 - shown as the cell's status
                key, cell = f"job{number}", _invalid(number, job, str(job), exc)
            else:
                key, cell = plan_cell(cfg, number, job, stored, studies, migration, warned)
                name = str(OmegaConf.select(cfg, "protocol.name", default="none"))
                if name not in plan.protocols:
                    plan.protocols.append(name)
                _add_content(plan, cfg)
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


def _add_content(plan: Plan, cfg: DictConfig) -> None:
    """The line of what the job's task makes before its first episode (TextWorld's games),
    once per distinct line."""
    from benchmark.envs import make_task
    from benchmark.seeds import Splits

    try:
        line = make_task(cfg.env).content_summary(Splits.from_config(cfg.get("splits")))
    except Exception:  # noqa: BLE001 - the cell's row shows the error
        return
    if line and line not in plan.content:
        plan.content.append(line)


def plan_cell(
    cfg: DictConfig,
    number: int,
    job: list[str],
    stored: list[Stored],
    studies: set[str],
    migration: migrate.Migration | None = None,
    warned: set[str] | None = None,
) -> tuple[str, CellPlan]:
    """(dedup key, the cell's plan). `studies`: the tuning studies already counted (updated);
    `migration`: what migrating the root at the sweep's start would do (None: nothing);
    `warned`: the consultant identity warnings already shown (updated; None: show each)."""
    from benchmark.build import identity_warning, locate_inputs, policy_checkpoint, prepare
    from benchmark.cell import digest

    try:
        task, splits, spec = prepare(cfg)
        checkpoint = policy_checkpoint(cfg, task, splits, train=False) if spec.uses_policy else None
        located = locate_inputs(spec, cfg, checkpoint)
    except Exception as exc:  # noqa: BLE001 - a job would fail the same way, before any work
        return f"job{number}", _invalid(number, job, str(cfg.env.name), exc)
    if located is not None and spec.uses_consultant:  # a served model without weights identity
        warning = identity_warning(cfg.slm, located.inputs.get("model"))
        if warning is not None and warning not in (warned if warned is not None else ()):
            log.warning("%s", warning)
            if warned is not None:
                warned.add(warning)
    root = Path(str(cfg.paths.root))
    cell = CellPlan(
        jobs=[number],
        overrides=list(job),
        name=_row_name(located or spec),
        hash=located.hash if located is not None else None,
        status=PENDING,
        lm=spec.uses_lm,
        slm=str(cfg.slm.name) if spec.uses_consultant else None,
    )
    reference, trials_todo = None, int(cfg.tuning.n_trials) if spec.tunes_tau else 0
    if located is None:
        untrained = spec.uses_policy and checkpoint is None
        missing = None if untrained else spec.uses_consultant and _model_not_built(cfg)
        cell.note = missing or _untrained_note(cfg, splits, untrained, migration)
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


def _row_name(spec: Any) -> str:
    """The cell's name with its fixed tau: the rows of a tau grid differ only there."""
    tau = None if spec.tunes_tau else spec.gate.args.get("tau")
    return spec.name if tau is None else f"{spec.name} tau={tau}"


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


def _untrained_note(
    cfg: DictConfig, splits: Any, own: bool, migration: migrate.Migration | None = None
) -> str:
    """Why a cell has no hash yet: its own checkpoint, or the shared tuning cell's, is missing
    (or stands under an earlier release's name, which the migration renames)."""
    from benchmark.policy import names
    from benchmark.policy.checkpoints import (
        MARKER,
        CheckpointError,
        checkpoint_dir,
        manifest,
        match_options,
        resolve,
    )
    from benchmark.results import file_sha256

    if not own:
        return "policy of the shared tuning cell not trained"
    ckpt_dir = checkpoint_dir(cfg, splits)
    if not ckpt_dir.is_dir():
        old = migration.checkpoints.get(str(ckpt_dir)) if migration is not None else None
        if old is not None:
            return (
                f"policy trained under an earlier release's name {Path(old).name}, renamed "
                "when the sweep starts"
            )
        return "policy not trained"
    name = str(cfg.policy.checkpoint)
    if names.parse(name).kind == "match" and (ckpt_dir / MARKER).exists():
        try:  # trained: the pick itself is what failed (no validation record, none within tolerance)
            resolve(ckpt_dir, name, **match_options(cfg))
        except CheckpointError as error:
            return str(error).splitlines()[0]
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
    (or the code) changed since, so the job computes it anew."""
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
