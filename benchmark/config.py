"""The one owner of configuration: where conf/ is, composing a config with overrides (Hydra's
compose API, exactly what `python -m benchmark <overrides>` composes), and expanding a sweep into
its jobs with Hydra's own override parser, in the order Hydra's BasicSweeper numbers them. Every
CLI (`benchmark`, `plan`, `report`, `dashboard`, `serve`, `policy`, `bench`, `prompts`) composes
through here."""

from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
MULTIRUN_FLAGS = ("-m", "--multirun")
# conf/config.yaml puts launchers/ on Hydra's search path through this variable
os.environ.setdefault("BENCHMARK_REPO", str(REPO))

Composer = Callable[..., DictConfig]


def options(group: str) -> list[str]:
    """The option names of a config group (`conf/<group>/*.yaml`), sorted."""
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def option_file(group: str, name: str) -> Path:
    """`conf/<group>/<name>.yaml` (it may not exist: check `.is_file()`)."""
    return CONF / group / f"{name}.yaml"


def root_keys(node: str) -> frozenset[str]:
    """The keys the root config (conf/config.yaml) gives its node `node` (eval, tuning,
    splits): the keys such a node may hold (validate.py)."""
    value = load_yaml(CONF / "config.yaml").get(node) or {}
    return frozenset(str(k) for k in value)


def load_yaml(path: Path | str) -> DictConfig:
    """`OmegaConf.load(path)`, parsed once per file version: a fresh copy each call (callers edit
    what they get). Tests and `benchmark.prompts` read the same option files hundreds of times,
    and a copy costs a fifth of a YAML parse."""
    stat = Path(path).stat()
    return copy.deepcopy(_parsed_yaml(str(path), stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=256)
def _parsed_yaml(path: str, mtime_ns: int, size: int) -> DictConfig:
    return OmegaConf.load(path)


# compositions a session keeps for the jobs that share their config-group choices
SHARED_COMPOSITIONS = 32


def is_defaults_override(override: str, conf_dir: Path) -> bool:
    """Whether an override acts on the defaults list (`env=x`, `+experiment=y`, `hydra/launcher=z`,
    `~slm`) or on the hydra node, rather than on a value of the composed config (`gate.tau=0.5`,
    `++gate.tau=auto`, `seed=3`): Hydra's rule, a key that names a config group, read off
    conf_dir's folders; `/` and `@` only occur in group keys."""
    key = override.split("=", 1)[0].lstrip("+~")
    return "/" in key or "@" in key or key.startswith("hydra") or (conf_dir / key).is_dir()


@functools.lru_cache(maxsize=SHARED_COMPOSITIONS)
def _defaults_composition(conf_dir: str, overrides: tuple[str, ...]) -> DictConfig:
    """The composition of `overrides` over conf_dir, by the session initialised on it (the conf
    files are read once a process, as Hydra's own app reads them once a run)."""
    from hydra import compose as hydra_compose

    return hydra_compose("config", overrides=list(overrides))


@contextlib.contextmanager
def session(conf_dir: Path | str | None = None) -> Iterator[Composer]:
    """A compose function `(overrides, hydra=False) -> config` over `conf_dir` (default conf/),
    for composing many configs with one Hydra initialisation. Hydra's global state, if a running
    app holds it, is restored afterwards.

    A sweep's jobs mostly differ in values (`gate.tau=0.1,0.2,...`), and a Hydra composition
    costs 0.1-0.5 s: jobs with the same defaults overrides share one composition (the last
    SHARED_COMPOSITIONS kept in this process), a copy of which gets the job's value overrides applied by Hydra's
    own code, in their order, as Hydra applies them after composing the defaults list; the
    result equals a composition of the whole job (tests/test_config.py)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    conf = Path(conf_dir or CONF)
    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    parser = OverridesParser.create()

    def composer(overrides: Sequence[str] = (), hydra: bool = False) -> DictConfig:
        if hydra:
            return hydra_compose("config", overrides=list(overrides), return_hydra_config=True)
        defaults = tuple(o for o in overrides if is_defaults_override(o, conf))
        values = parser.parse_overrides([o for o in overrides if not is_defaults_override(o, conf)])
        if any(v.is_sweep_override() for v in values):  # Hydra's own error for a sweep in a job
            return hydra_compose("config", overrides=list(overrides))
        cfg = copy.deepcopy(_defaults_composition(str(conf), defaults))
        ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
        return cfg

    try:
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            yield composer
    finally:
        GlobalHydra.instance().clear()
        if backup is not None:
            restore_gh_from_backup(backup)


def compose(
    overrides: Sequence[str] = (), hydra: bool = False, conf_dir: Path | str | None = None
) -> DictConfig:
    """The root config `python -m benchmark <overrides>` runs (`hydra=True`: with its hydra node,
    the sweep included)."""
    with session(conf_dir) as composer:
        return composer(overrides, hydra=hydra)


def split_multirun(args: Sequence[str]) -> tuple[list[str], bool]:
    """(the arguments without `-m`/`--multirun`, whether one was given): users type the flag
    anywhere, Hydra's argument parser wants it before or after all overrides."""
    rest = [a for a in args if a not in MULTIRUN_FLAGS]
    return rest, len(rest) != len(args)


def expand_sweep(config: DictConfig) -> list[list[str]]:
    """The override lists of every job, in job-number order, as Hydra's BasicSweeper makes them:
    the sweeper's params then the command line's overrides (`hydra.overrides.task`), parsed by
    Hydra's public override parser; a later override of a key replaces the earlier one in its
    place; the product of the keys' values varies the last key fastest."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    target = str(OmegaConf.select(config, "hydra.sweeper._target_", default="") or "")
    if target and not target.endswith("BasicSweeper"):
        raise ValueError(f"sweeper {target} is not Hydra's basic sweeper")
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    task = OmegaConf.select(config, "hydra.overrides.task", default=None) or []
    args = [f"{k}={v}" for k, v in params.items()] + [str(t) for t in task]
    axes: dict[str, list[str]] = {}
    for override in OverridesParser.create().parse_overrides(args):
        key = override.get_key_element()
        if not override.is_sweep_override():
            axes[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            axes[key] = [f"{key}={v}" for v in override.sweep_string_iterator()]
        else:
            raise ValueError(f"the basic sweeper cannot expand {override.input_line!r}")
    return [list(job) for job in itertools.product(*axes.values())]


def sweep_jobs(overrides: Sequence[str]) -> tuple[DictConfig, list[list[str]]]:
    """(the sweep's base config with its hydra node, the override list of every job in job
    order) of `python -m benchmark <overrides> -m`. Comma lists on the command line
    (`policy.seed=0,1,2`) sweep like the preset's params; without any sweep: one job."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides, _ = split_multirun(overrides)
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    base = compose([p.input_line for p in parsed if not p.is_sweep_override()], hydra=True)
    sweep = OmegaConf.create(
        {
            "hydra": {
                "sweeper": OmegaConf.to_container(base.hydra.sweeper, resolve=False),
                "overrides": {"task": list(overrides)},
            }
        }
    )
    return base, expand_sweep(sweep)
