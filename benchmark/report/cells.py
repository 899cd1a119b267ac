"""Reading a sweep directory into cells: one per Hydra job, finished (summary + episodes), failed
(error.json) or missing (killed, or never started). Every cell knows what it is (env, gate, slm,
prompt, checkpoint, policy seed, ...) even when it produced nothing, so the report can mark it in
place instead of silently dropping a row."""

from __future__ import annotations

import csv
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from benchmark import results

log = logging.getLogger(__name__)

OK, FAILED, MISSING = "ok", "failed", "missing"
ENV_NAMES = {
    "fourrooms": "FourRooms",
    "doorkey8": "DoorKey-8x8",
    "higherlower": "HigherLower",
    "empty5x5_random": "Empty-Random-5x5",
    "empty16x16": "Empty-16x16",
    "simplecrossing9": "SimpleCrossingS9N1",
}
PROMPT_ORDER = ("basic", "enriched", "stateful_min", "stateful", "belief")
GATE_ORDER = ("never", "always", "entropy", "epistemic", "random")
SLM_NAMES = {"random": "dice", "oracle": "oracle"}


@dataclass
class Cell:
    """One job of the sweep and everything the report needs about it."""

    job: str
    status: str
    overrides: list[str] = field(default_factory=list)
    env: str | None = None
    metric: str | None = None
    gate: str | None = None
    slm: str | None = None
    prompt: str | None = None
    rationale: bool | None = None
    checkpoint: str | None = None  # as configured (final, best, rNNN, tN)
    checkpoint_name: str | None = None  # the file actually used (r030 for t2), when known
    checkpoint_path: str | None = None
    policy_seed: int | None = None
    tau_setting: Any = None  # as configured: a number, "auto", or None (no threshold)
    tau: float | None = None  # as used (the tuned value for auto)
    mc_samples: int | None = None
    p: Any = None  # random gate's query probability (number or "match")
    name: str | None = None  # job.cell_name
    summary: dict | None = None
    episodes: list[dict] | None = None
    error: dict | None = None
    trials: list[dict] | None = None
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def has_policy(self) -> bool:
        return self.gate != "always" and self.gate is not None

    def value(self, metric: str) -> tuple[float, float, float] | None:
        """(mean, ci low, ci high) of a summary metric, or None when absent."""
        s = self.summary or {}
        mean = s.get(f"{metric}_mean")
        if mean is None or (isinstance(mean, float) and math.isnan(mean)):
            return None
        return (
            float(mean),
            float(s.get(f"{metric}_ci95_low", mean)),
            float(s.get(f"{metric}_ci95_high", mean)),
        )


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
        """Envs in the papers' order, then the others alphabetically."""
        names = {c.env for c in self.cells if c.env}
        known = [e for e in ENV_NAMES if e in names]
        return known + sorted(names - set(known))

    def metric_of(self, env: str) -> str:
        for c in self.cells:
            if c.env == env and c.metric:
                return c.metric
        return "success"


def env_label(env: str) -> str:
    return ENV_NAMES.get(env, env)


def slm_label(slm: str | None) -> str:
    return SLM_NAMES.get(slm or "", slm or "?")


def prompt_label(prompt: str | None, rationale: bool | None) -> str:
    return f"{prompt or '?'}{'+rationale' if rationale else ''}"


def method_label(c: Cell) -> str:
    """The papers' names: PPO, SLM-only <slm>, ASK <slm>, ASK+ <slm>; other prompts by name."""
    if c.gate == "never":
        return "PPO"
    if c.gate == "always":
        if c.slm == "random":
            return "Dice (random actions)"
        if c.slm == "oracle":
            return "Oracle"
        base = f"SLM-only {slm_label(c.slm)}"
        if (c.prompt, bool(c.rationale)) != ("stateful", True):
            base += f" ({prompt_label(c.prompt, c.rationale)})"
        return base
    if (c.prompt, bool(c.rationale)) == ("basic", False):
        base = f"ASK {slm_label(c.slm)}"
    elif (c.prompt, bool(c.rationale)) == ("stateful", True):
        base = f"ASK+ {slm_label(c.slm)}"
    else:
        base = f"{prompt_label(c.prompt, c.rationale)} {slm_label(c.slm)}"
    if c.gate == "random":
        p = f" p={_num(c.p)}" if isinstance(c.p, (int, float)) else ""
        base += f" (random gate{p})"
    elif c.gate not in (None, "entropy"):
        base += f" ({c.gate} gate)"
    return base


def method_order(c: Cell) -> tuple:
    gate = GATE_ORDER.index(c.gate) if c.gate in GATE_ORDER else len(GATE_ORDER)
    if c.gate == "always":  # SLM-only models first, then the dice and the oracle
        gate += {"random": 0.3, "oracle": 0.6}.get(c.slm or "", 0.0)
    prompt = PROMPT_ORDER.index(c.prompt) if c.prompt in PROMPT_ORDER else len(PROMPT_ORDER)
    return (gate, prompt, c.prompt or "", bool(c.rationale), c.slm or "")


def checkpoint_order(name: str | None) -> tuple:
    """Weakest first: rNNN by threshold (or tN by index), then best, then final."""
    if name is None:
        return (-1, 0.0, "")
    m = re.fullmatch(r"r(\d+)", name)
    if m:
        return (0, int(m.group(1)) / 100, name)
    m = re.fullmatch(r"t(\d+)", name)
    if m:
        return (0, float(m.group(1)), name)
    return ({"best": 1, "final": 2}.get(name, 3), 0.0, name)


def _num(x: Any) -> str:
    return f"{x:g}" if isinstance(x, (int, float)) else str(x)


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# --------------------------------------------------------------------------------------------
# loading


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
    _resolve_checkpoint_aliases(cells)
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
    cfg = _load_yaml(d / ".hydra" / "config.yaml")
    cell = Cell(job=name, status=MISSING, overrides=overrides)
    _identity_from_config(cell, cfg)
    done = results.complete_cell(d)
    error = results.read_json(d / "error.json")
    if done is not None:
        cell.status, (cell.summary, cell.episodes) = OK, done
        _identity_from_summary(cell, cell.summary)
        if (d / "trials.csv").exists():
            cell.trials = _read_trials(d / "trials.csv")
    elif isinstance(error, dict):
        cell.status, cell.error = FAILED, error
        cell.name = error.get("cell", cell.name)
        if cfg is None and isinstance(error.get("config"), dict):
            _identity_from_config(cell, OmegaConf.create(error["config"]))
    else:
        cell.note = (
            "summary.json incomplete or inconsistent with episodes.jsonl"
            if (d / "summary.json").exists()
            else "no summary.json or error.json (killed, still running or not run yet)"
        )
    return cell


def _identity_from_config(cell: Cell, cfg: DictConfig | None) -> None:
    """What the job was asked to run, from its composed (unresolved) config."""
    if cfg is None:
        return
    cell.env = _select(cfg, "env.name")
    cell.metric = _select(cfg, "env.metric")
    cell.gate = _select(cfg, "gate.name")
    cell.tau_setting = _select(cfg, "gate.tau")
    cell.mc_samples = _select(cfg, "gate.mc_samples")
    cell.p = _select(cfg, "gate.p")
    asks = cell.gate != "never"
    cell.slm = _select(cfg, "slm.name") if asks else None
    cell.prompt = _select(cfg, "prompt.name") if asks else None
    cell.rationale = bool(_select(cfg, "prompt.rationale")) if asks else None
    needs_policy = _select(cfg, "gate.needs_policy")
    if needs_policy is None or bool(needs_policy):
        cell.checkpoint = _select(cfg, "policy.checkpoint")
        seed = _select(cfg, "policy.seed")
        cell.policy_seed = int(seed) if is_number(seed) else None
    if is_number(cell.tau_setting):
        cell.tau = float(cell.tau_setting)


def _identity_from_summary(cell: Cell, s: dict) -> None:
    """What the job actually ran (the summary wins over the config)."""
    for key in (
        "env",
        "metric",
        "gate",
        "slm",
        "prompt",
        "rationale",
        "checkpoint",
        "checkpoint_path",
        "policy_seed",
        "mc_samples",
    ):
        if key in s:
            setattr(cell, key, s[key])
    cell.name = s.get("cell", cell.name)
    tau = s.get("tau")
    cell.tau = float(tau) if is_number(tau) else None
    if cell.tau_setting is None and tau is not None:
        cell.tau_setting = "auto" if cell.trials else tau


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


def _resolve_checkpoint_aliases(cells: list[Cell]) -> None:
    """`checkpoint_name` = the checkpoint file actually used (r030 for the alias t2)."""
    for c in cells:
        if c.checkpoint_path:
            c.checkpoint_name = Path(c.checkpoint_path).stem
        elif c.checkpoint is not None:
            c.checkpoint_name = str(c.checkpoint)


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
        _identity_from_config(cell, _compose(config, overrides))
        out.append(cell)
    return out


def expand_sweep(config: DictConfig) -> list[list[str]]:
    """The override lists of every job, in job-number order, as Hydra's BasicSweeper makes them."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    target = str(_select(config, "hydra.sweeper._target_") or "")
    if target and not target.endswith("BasicSweeper"):
        raise ValueError(f"sweeper {target} is not Hydra's basic sweeper")
    params = _select(config, "hydra.sweeper.params") or {}
    task = _select(config, "hydra.overrides.task") or []
    args = [f"{k}={v}" for k, v in params.items()] + [str(t) for t in task]
    parsed = OverridesParser.create().parse_overrides(args)
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def _compose(config: DictConfig, overrides: list[str]) -> DictConfig | None:
    """The job's config composed from the sweep's primary config dir (labels only)."""
    import os

    from hydra import compose, initialize_config_dir
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
    name = _select(config, "hydra.job.config_name") or "config"
    if not conf_dir or not Path(conf_dir).is_dir() or GlobalHydra.instance().is_initialized():
        return None
    os.environ.setdefault("BENCHMARK_REPO", str(Path(__file__).resolve().parents[2]))
    try:
        with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
            return compose(config_name=name, overrides=list(overrides))
    except Exception as exc:  # noqa: BLE001 - labels only
        log.info("cannot compose overrides %s: %s", overrides, exc)
        return None
