"""Reading a sweep directory into the report's model: one `Cell` per Hydra job, finished (summary
+ episodes), failed (error.json) or missing (killed, or never started). Every cell knows what it
is even when it produced nothing, so the report marks it in place instead of silently dropping a
row.

What a cell is comes from `benchmark.cell.CellSpec`, the one place that says it: the labels of
the job's composed config (`.hydra/config.yaml`, else the config in cell.json or error.json), then
the summary's, which win. Where a config cannot be resolved as a whole (an older sweep whose
paths used `${hydra:...}`), the spec is built from the parts that do resolve; where not even that
works, the labels are read as they stand."""

from __future__ import annotations

import csv
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

import benchmark  # noqa: F401 - registers the config resolvers (abspath, uid) CellSpec resolves
from benchmark import protocol, results
from benchmark.cell import CellSpec
from benchmark.config import compose, expand_sweep
from benchmark.gates import TAU_AUTO
from benchmark.report.model import FAILED, LABELS, MISSING, OK, Cell, Sweep, is_number

log = logging.getLogger(__name__)


def job_dirs(root: Path) -> list[Path]:
    """Job dirs of a Hydra multirun (numbered subdirs, or any holding .hydra/ or results)."""
    out = []
    for d in root.iterdir():
        if not d.is_dir() or d.name in ("report", ".hydra", ".submitit", "wandb"):
            continue
        if (
            d.name.isdigit()
            or (d / ".hydra").is_dir()
            or (d / "summary.json").exists()
            or (d / "error.json").exists()
        ):
            out.append(d)
    return sorted(out, key=lambda d: (0, int(d.name), "") if d.name.isdigit() else (1, 0, d.name))


def load_sweep(root: str | Path) -> Sweep:
    """All cells of a sweep dir (or of a single run dir). Raises FileNotFoundError / ValueError
    with the reason when `root` is not a sweep."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"sweep dir {str(root)!r} does not exist (or is not a directory)")
    config = _load_yaml(root / "multirun.yaml")
    dirs = job_dirs(root)
    single = not dirs and ((root / ".hydra").is_dir() or (root / "summary.json").exists())
    if single:
        dirs = [root]
        config = config or _load_yaml(root / ".hydra" / "config.yaml")
    if not dirs:
        listing = sorted(p.name for p in root.iterdir())[:20]
        raise ValueError(
            f"{str(root)!r} holds no job dirs (numbered subdirs with .hydra/, summary.json or "
            f"error.json); found: {listing or 'nothing'}. Pass the sweep dir of a -m run."
        )
    cells = [_load_cell(d, name="0" if single else d.name) for d in dirs]
    if config is not None and not single:
        cells += _never_started(config, {c.job for c in cells})
    cells = _unique(cells)
    for c in cells:  # the checkpoint file actually used (r030 for the alias t2)
        if c.checkpoint_path:
            c.checkpoint_name = Path(c.checkpoint_path).stem
            record = results.read_json(Path(c.checkpoint_path).with_suffix(".json"))
            if isinstance(record, dict) and is_number(record.get("eval_success")):
                c.checkpoint_success = float(record["eval_success"])
        elif c.checkpoint is not None:
            c.checkpoint_name = str(c.checkpoint)
    experiment = None
    if config is not None:
        experiment = OmegaConf.select(
            config, "experiment_name", default=None, throw_on_resolution_failure=False
        )
    if experiment is None:
        experiment = next((c.summary.get("experiment") for c in cells if c.summary), None)
    return Sweep(root=root, cells=cells, config=config, experiment=str(experiment or "default"))


def _unique(cells: list[Cell]) -> list[Cell]:
    """One row per computed cell: jobs that resolve to the same cell (e.g. PPO-only swept over
    consultants it never asks) share a cell hash and are reported once."""
    seen: set[str] = set()
    out = []
    for c in cells:
        key = (c.summary or {}).get("cell_hash") if c.ok else None
        if key is not None:
            if key in seen:
                continue
            seen.add(key)
        out.append(c)
    return out


def _load_yaml(path: Path) -> Any:
    if not path.exists():
        return None
    try:
        return OmegaConf.load(path)
    except Exception as exc:  # noqa: BLE001 - a corrupt yaml only loses labels, not the report
        log.warning("cannot read %s: %s", path, exc)
        return None


def _select(cfg: DictConfig | None, key: str) -> Any:
    if cfg is None:
        return None
    value = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=False)
    return value


def _load_cell(d: Path, name: str) -> Cell:
    overrides = _load_yaml(d / ".hydra" / "overrides.yaml")
    overrides = [str(o) for o in overrides] if isinstance(overrides, ListConfig) else []
    cell = Cell(job=name, status=MISSING, overrides=overrides)
    error = results.read_json(d / "error.json")
    record = results.read_json(d / "cell.json")
    configs = (  # what the job was asked to run; cell.json's and error.json's are CellSpec.config
        _load_yaml(d / ".hydra" / "config.yaml"),
        record.get("config") if isinstance(record, dict) else None,
        error.get("config") if isinstance(error, dict) else None,
    )
    config = next((c for c in configs if c), None)
    if config is not None:
        _label_from_config(cell, OmegaConf.create(config) if isinstance(config, dict) else config)
    done = results.complete_cell(d)
    if done is not None:
        cell.status, (cell.summary, cell.episodes) = OK, done
        _label_from_summary(cell, cell.summary)
        if (d / "trials.csv").exists():
            cell.trials = _read_trials(d / "trials.csv")
    elif isinstance(error, dict):
        cell.status, cell.error = FAILED, error
        cell.name = error.get("cell", cell.name)
    else:
        cell.note = (
            "summary.json incomplete or inconsistent with episodes.jsonl"
            if (d / "summary.json").exists()
            else "no summary.json or error.json (killed, still running or not run yet)"
        )
    return cell


# --------------------------------------------------------------------------------------------
# labels


def cell_spec(cfg: DictConfig) -> CellSpec | None:
    """The job's CellSpec; from the parts of `cfg` that resolve when the whole does not; None
    when neither makes a spec (no gate `_target_`, ...)."""
    try:
        spec = CellSpec.from_config(cfg)
        spec.labels()
        return spec
    except Exception as exc:  # noqa: BLE001 - retried on the readable parts below
        log.debug("config does not resolve as a whole (%s); trying its readable parts", exc)
    try:
        spec = CellSpec.from_config(OmegaConf.create(_readable(cfg)))
        spec.labels()
        return spec
    except Exception as exc:  # noqa: BLE001 - labels are then read as they stand
        log.info("no cell spec from the config (%s): labels read as configured", exc)
        return None


def _label_from_config(cell: Cell, cfg: DictConfig) -> None:
    """What the job was asked to run: CellSpec.labels() (None for the parts the cell does not
    use), the gate's tau and p settings; or, with no spec, the config's values as they stand."""
    spec = cell_spec(cfg)
    _protocol_from_config(cell, cfg, set(spec.config) if spec is not None else None)
    if spec is not None:
        labels, args = spec.labels(), spec.gate.args
        cell.uses_policy = spec.uses_policy
        decoding = (spec.config.get("slm") or {}).get("decoding") or {}
        if spec.uses_consultant and decoding.get("temperature") is not None:
            cell.temperature = float(decoding["temperature"])
    else:
        labels = {
            "cell": None,
            "env": _select(cfg, "env.name"),
            "metric": _select(cfg, "env.metric"),
            "gate": _select(cfg, "gate.name"),
            "slm": _select(cfg, "slm.name"),
            "prompt": _select(cfg, "prompt.name"),
            "rationale": _select(cfg, "prompt.rationale"),
            "checkpoint": _select(cfg, "policy.checkpoint"),
            "policy_seed": _select(cfg, "policy.seed"),
            "mc_samples": _select(cfg, "gate.mc_samples"),
        }
        args = {"tau": _select(cfg, "gate.tau"), "p": _select(cfg, "gate.p")}
    cell.set_labels(labels, args)
    target = _select(cfg, "policy.match_success")
    cell.match_success = float(target) if is_number(target) else None


def _protocol_from_config(cell: Cell, cfg: DictConfig, used: set[str] | None) -> None:
    """The protocol this sweep asked the job to run (its .hydra config; a cell reused from
    another sweep may have been computed under another protocol with the same values)."""
    try:
        ran = protocol.record(cfg, used)
    except Exception as exc:  # noqa: BLE001 - then the summary's record, if any
        log.debug("no protocol from the job config (%s)", exc)
        return
    if ran is not None:
        cell.protocol, cell.protocol_overrides = ran["name"], ran["overrides"]


def _label_from_summary(cell: Cell, s: dict) -> None:
    """What the job actually ran: the summary's labels win over the config's, but for the
    checkpoint, which stays as configured (t2; the job recorded the r030 it stands for and
    checkpoint_path names the file used)."""
    for key in (*LABELS, "checkpoint_path"):
        if key not in s or (key == "checkpoint" and None not in (s[key], cell.checkpoint)):
            continue
        setattr(cell, key, s[key])
    if cell.uses_policy is None and "checkpoint" in s:
        cell.uses_policy = s["checkpoint"] is not None
    cell.name = s.get("cell", cell.name)
    if cell.protocol is None and s.get("protocol"):
        cell.protocol, cell.protocol_overrides = s["protocol"], s.get("protocol_overrides") or {}
    tau = s.get("tau")
    cell.tau = float(tau) if is_number(tau) else None
    if cell.tau_setting is None and tau is not None:
        cell.tau_setting = TAU_AUTO if cell.trials else tau


def _readable(node: Any) -> Any:
    """`node` resolved, without the values that do not resolve (a list with one is dropped)."""
    if isinstance(node, DictConfig):
        out = {}
        for key in node:
            try:
                value = node[key]
            except Exception:  # noqa: BLE001 - an unresolvable value is left out
                continue
            value = _readable(value)
            if value is not _UNREADABLE:
                out[key] = value
        return out
    if isinstance(node, ListConfig):
        try:
            return OmegaConf.to_container(node, resolve=True)
        except Exception:  # noqa: BLE001
            return _UNREADABLE
    return node


_UNREADABLE = object()


def _read_trials(path: Path) -> list[dict] | None:
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        out = []
        for r in rows:
            out.append({k: _float_or(v) for k, v in r.items()})
        return out
    except (OSError, csv.Error) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None


def _float_or(v: str) -> Any:
    try:
        return float(v)
    except (TypeError, ValueError):
        return v


# --------------------------------------------------------------------------------------------
# jobs that never started


def _never_started(config: DictConfig, seen: set[str]) -> list[Cell]:
    """Jobs the basic sweeper would have launched but whose dirs do not exist."""
    try:
        expected = expand_sweep(config)
    except Exception as exc:  # noqa: BLE001 - best effort: the dirs on disk still make a report
        log.info(
            "cannot expand the sweep's overrides (%s): only existing job dirs are reported", exc
        )
        return []
    out = []
    for i, overrides in enumerate(expected):
        if str(i) in seen:
            continue
        cell = Cell(
            job=str(i),
            status=MISSING,
            overrides=overrides,
            note="no job dir (the job never started)",
        )
        cfg = _compose(config, overrides)
        if cfg is not None:
            _label_from_config(cell, cfg)
        out.append(cell)
    return out


def _compose(config: DictConfig, overrides: list[str]) -> DictConfig | None:
    """The job's config composed from the sweep's primary config dir (labels only); None inside
    a running Hydra app (a multirun's end) or when it does not compose."""
    from hydra.core.global_hydra import GlobalHydra

    sources = _select(config, "hydra.runtime.config_sources") or []
    conf_dir = next(
        (
            s.get("path")
            for s in sources
            if s.get("provider") == "main" and s.get("schema") == "file"
        ),
        None,
    )
    if not conf_dir or not Path(conf_dir).is_dir() or GlobalHydra.instance().is_initialized():
        return None
    try:
        return compose(overrides, conf_dir=conf_dir)
    except Exception as exc:  # noqa: BLE001 - labels only
        log.info("cannot compose overrides %s: %s", overrides, exc)
        return None


# --------------------------------------------------------------------------------------------
# the PPO runs behind the cells


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
            data = results.read_json(f)
            if isinstance(data, dict) and ("timesteps" in data or "eval_reward" in data):
                metas[f.stem] = data
        config = results.read_json(d / "config.json") or {}
        runs[str(d)] = {
            "dir": d,
            "env": c.env,
            "metric": c.metric,
            "policy_seed": c.policy_seed,
            "metas": metas,
            "thresholds": (config.get("policy") or {}).get("thresholds"),
            "curve": d / "curve.csv" if (d / "curve.csv").exists() else None,
        }
    envs = sweep.envs()
    return sorted(
        runs.values(),
        key=lambda r: (
            envs.index(r["env"]) if r["env"] in envs else 99,
            r["policy_seed"] or 0,
            str(r["dir"]),
        ),
    )
