"""What a preset's W&B dashboard shows, as its sweep decides it (`design`; benchmark.dashboard):
the question it answers, the views (one per env), the grouping and the x axis."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from benchmark.metrics import RATES

METHOD_GROUPS = ("method", "gate", "slm", "prompt")  # what the `method` label is made of
OWN_GROUP_KEYS = ("prompt.planner_hint",)  # swept keys the `method` label does not show
AXES = {"gate.tau": "tau", "gate.mc_samples": "mc_samples"}  # config key -> its summary key
AXIS_TITLES = {"gate.tau": "τ (entropy threshold, bits)", "gate.mc_samples": "N (MC passes)"}
# a swept index into a per-env grid -> the config key it sets (+experiment=released_tau_grid)
INDEX_AXES = {"tau_point": "gate.tau"}


@dataclass(frozen=True)
class Question:
    """What a preset's dashboard answers (`title`, `text`: docs/dashboards.md lists them) and what it
    shows: `metrics` among reward, metric (the env family's success or accuracy), ir, or,
    invalid_rate; `report`: also a W&B report (the paper's tables and figures); `curves`: the
    PPO learning curves."""

    title: str
    text: str
    metrics: tuple[str, ...] = ("reward", "metric", *RATES)
    report: bool = False
    curves: bool = False


def dashboard_entry(preset: str) -> dict:
    """The `dashboard:` entry of conf/experiment/<preset>.yaml: what the preset's dashboard
    answers and shows (the fields of Question), or `why_none`, why it needs none; DashboardError
    for an unknown preset or one without the entry."""
    from benchmark.config import option_file

    path = option_file("experiment", preset)
    if not path.is_file():
        raise DashboardError(f"no preset {preset!r} (conf/experiment/{preset}.yaml)")
    entry = OmegaConf.load(path).get("dashboard")
    if entry is None:
        raise DashboardError(
            f"no dashboard defined for preset {preset!r}: add what it answers to the `dashboard:` "
            f"entry of {path} (`why_none:` if it needs none)"
        )
    return OmegaConf.to_container(entry)


def question_of(preset: str) -> Question | None:
    """What `preset`'s dashboard answers (`dashboard_entry`); None for a preset that needs none."""
    entry = dashboard_entry(preset)
    if "why_none" in entry:
        return None
    if "metrics" in entry:
        entry["metrics"] = tuple(entry["metrics"])
    return Question(**entry)


@dataclass
class Design:
    """A preset's dashboard, as its sweep decides it (see the module docstring)."""

    preset: str
    experiment: str
    question: Question
    envs: list[str]
    axes: dict[str, list[str]]  # the swept keys (Hydra override keys) -> their values
    grouping: list[str]  # W&B config keys, outermost first
    x: str | None  # a config key the metrics are plotted against (gate.tau, gate.mc_samples)
    project: str
    entity: str | None
    root: Path
    metrics_of: dict[str, dict[str, str]] = field(default_factory=dict)  # env -> title -> key

    @property
    def n_runs(self) -> int:
        """How many runs one env's view holds (the grid without the env axis)."""
        n = 1
        for key, values in self.axes.items():
            if key != "env":
                n *= len(values)
        return n

    def publish_command(self) -> str:
        entity = f" tracking.entity={self.entity}" if self.entity else " tracking.entity=<you>"
        return (
            f"python -m benchmark.dashboard +experiment={self.preset}{entity} "
            f"tracking.project={self.project} --publish"
        )


class DashboardError(RuntimeError):
    """A preset without a dashboard definition, or a publish that could not happen."""


def compose_preset(preset: str, overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """The root config of `+experiment=<preset> <overrides>` with its hydra node (the sweep)."""
    from benchmark.config import compose

    return compose([f"+experiment={preset}", *overrides], hydra=True)


def group_key(override_key: str) -> str:
    """The W&B config key a swept override key is grouped by."""
    key = override_key.lstrip("+~")
    if key.split(".")[0] in METHOD_GROUPS and key not in AXES and key not in OWN_GROUP_KEYS:
        return "method"
    return key if "." in key else f"{key}.name"


def sweep_axes(cfg: DictConfig) -> dict[str, list[str]]:
    """Swept key -> values, in the preset's order: the keys of `hydra.sweeper.params` and any key
    the command line gives several values, expanded as Hydra's basic sweeper does."""
    from benchmark.config import expand_sweep

    params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    values: dict[str, list[str]] = {}
    for job in expand_sweep(cfg):
        for override in job:
            key, value = override.split("=", 1)
            seen = values.setdefault(key, [])
            if value not in seen:
                seen.append(value)
    return {k: v for k, v in values.items() if k in params or len(v) > 1}


def family_metrics(env: str, names: tuple[str, ...]) -> dict[str, str]:
    """Panel title -> summary key of the env family's metrics (`benchmark.metrics.MAIN_FIGURE`:
    IR and OR as per-episode means, the invalid rate pooled over queries)."""
    from benchmark.metrics import BY_NAME

    metric = env_metric(env)
    out = {}
    for name in names:
        if name == "reward":
            out["reward"] = "reward_mean"
        elif name == "metric":
            out[metric] = f"{metric}_mean"
        else:
            m = BY_NAME[name]
            out[f"{m.label} ({m.definition})"] = m.summary_key()
    return out


def design(preset: str, overrides: list[str] | tuple[str, ...] = ()) -> Design | None:
    """The dashboard of `preset` (None for a preset that needs none); DashboardError for a
    preset without a `dashboard:` entry (`question_of`)."""
    question = question_of(preset)
    cfg = compose_preset(preset, overrides)
    if question is None:
        return None
    axes = sweep_axes(cfg)
    envs = axes.get("env") or [str(cfg.env.name)]
    swept_x = next((k for k in axes if k in AXES or k in INDEX_AXES), None)
    x = INDEX_AXES.get(swept_x, swept_x)
    grouping: list[str] = []
    for key in axes:
        if key == "env" or key == swept_x:
            continue
        g = group_key(key)
        if g not in grouping:
            grouping.append(g)
    if x is not None and not grouping:
        grouping = ["method"]  # one group per view: its runs make one line against x
    return Design(
        preset=preset,
        experiment=str(cfg.experiment_name),
        question=question,
        envs=list(envs),
        axes=axes,
        grouping=grouping,
        x=x,
        project=str(OmegaConf.select(cfg, "tracking.project", default=None) or "ask-benchmark"),
        entity=OmegaConf.select(cfg, "tracking.entity", default=None),
        root=Path(str(cfg.paths.root)),
        metrics_of={env: family_metrics(env, question.metrics) for env in envs},
    )


def env_metric(env: str) -> str:
    """The env family's metric: success (MiniGrid) or accuracy (HigherLower)."""
    from benchmark.envs import load_env_cfg

    return str(load_env_cfg(env).get("metric") or "success")
