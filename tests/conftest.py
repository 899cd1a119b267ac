"""Compose the real configuration once, shrink it for CPU, and give each test its own outputs root.
A short PPO run on Empty-Random-5x5 is shared by the session: committed (tests/small_policy.py),
or trained once per run when the committed one is not the current recipe's. The tiny language
models are built once per run too (`tiny_model`).

Tests marked `slurm` need a real single-node cluster (launchers/local-slurm): where its binaries
are missing they skip with the list of what is missing, unless BENCHMARK_REQUIRE_SLURM=1 (CI,
.ci/run), where they fail instead, so that CI can never go green without running them."""

from __future__ import annotations

import copy
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"
# a PPO recipe small enough for tests (about 20 s on one core)
SMALL_POLICY = [
    "policy.recipe=suite",  # the env's recipe (4 envs on Empty-Random-5x5), `best` checkpoint
    "policy.total_timesteps=20000",
    "++policy.ppo.n_steps=128",
    "policy.eval_freq=5000",
    "policy.eval_episodes=5",
    "policy.progress_bar=false",
]
if os.environ.get("PYTEST_XDIST_WORKER"):  # one torch thread per test process: 2 processes of
    # 2 threads on 2 cores spin against each other (a tiny training ran 10x slower)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("BENCHMARK_REPO", str(REPO))
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# what launchers/local-slurm/up.sh starts and what the `slurm` tests call
SLURM_BINARIES = ("slurmctld", "slurmd", "sbatch", "srun", "sinfo", "munge", "munged")
REQUIRE_SLURM = "BENCHMARK_REQUIRE_SLURM"


@pytest.hookimpl(tryfirst=True)  # before any fixture of the test is set up
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A `slurm` test without SLURM installed: skip, or fail when BENCHMARK_REQUIRE_SLURM=1."""
    if item.get_closest_marker("slurm") is None:
        return
    missing = [b for b in SLURM_BINARIES if shutil.which(b) is None]
    if not missing:
        return
    what = f"SLURM is not installed here (missing on PATH: {', '.join(missing)})"
    if os.environ.get(REQUIRE_SLURM) == "1":
        pytest.fail(
            f"{what}, and {REQUIRE_SLURM}=1 requires the SLURM tests to run: install Debian's "
            "slurmctld slurmd slurm-client munge (as .ci/run does) or unset it",
            pytrace=False,
        )
    pytest.skip(f"{what}; `make slurm-up` installs it (root, Debian), {REQUIRE_SLURM}=1 to require")


def compose_cfg(root: Path, *overrides: str):
    """The job config exactly as `python -m benchmark <overrides>` would build it. Hydra takes
    about 0.2 s a composition and the tests ask for the same override lists again and again
    (with their own roots): each list is composed once per test process, with a placeholder
    root, and every call gets its own deep copy with `paths.root` set (tests/test_conftest.py
    checks that this equals composing with the root)."""
    if any(o.lstrip("+~").startswith("paths.root=") for o in overrides):
        return compose_fresh(root, *overrides)
    if overrides not in _COMPOSED:
        _COMPOSED[overrides] = compose_fresh(_PLACEHOLDER_ROOT, *overrides)
    cfg = copy.deepcopy(_COMPOSED[overrides])
    cfg.paths.root = str(root)
    return cfg


_COMPOSED: dict[tuple[str, ...], Any] = {}
_PLACEHOLDER_ROOT = Path("/compose-cfg-placeholder-root")


def compose_fresh(root: Path, *overrides: str):
    """compose_cfg without its cache: the app's composition (benchmark.config.session, which
    shares one Hydra composition among override lists that differ only in values)."""
    from benchmark.config import session

    with session(CONF) as composer:
        return composer([f"paths.root={root}", "tracking=none", *overrides])


def run_cli(
    root: Path,
    *args: str,
    timeout: int = 900,
    check: bool = True,
    module: str = "benchmark",
    **kw,
):
    """`python -m <module> ...` (the app by default; also benchmark.report, benchmark.bench) in a
    subprocess with its outputs under `root`."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=_cli_env(root),
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return proc


def start_cli(root: Path, *args: str, **popen_kw) -> subprocess.Popen:
    """`python -m benchmark ...` started in the background, in its own process group (so a test
    can SIGKILL the whole job), outputs under `root`, output discarded unless redirected."""
    kw = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "start_new_session": True}
    return subprocess.Popen(
        [sys.executable, "-m", "benchmark", *args],
        cwd=REPO,
        env=_cli_env(root),
        **{**kw, **popen_kw},
    )


def _cli_env(root: Path) -> dict[str, str]:
    """The environment of a CLI subprocess: this one, with every output under `root`."""
    return dict(os.environ, BENCHMARK_ROOT=str(root), PYTHONUNBUFFERED="1")


@pytest.fixture(scope="session")
def shared_root(tmp_path_factory) -> Path:
    """An outputs root shared by the tests of a session (PPO checkpoint, tiny model, cache)."""
    return tmp_path_factory.mktemp("outputs")


def run_scratch(tmp_path_factory) -> Path:
    """A folder shared by this run's test processes (pytest-xdist's workers: the parent of their
    base temps) and by nothing else; the base temp itself in a single-process run."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session", autouse=True)
def textworld_games(tmp_path_factory) -> Iterator[Path]:
    """The TextWorld game cache of this run: a task without `env.task.games_dir` finds its games
    here, in a folder the run's worker processes share (games.game_file builds each game once
    across processes), instead of ./outputs/textworld of the checkout, which outlived the run.
    A game takes seconds to generate; the test files that play the same seeds share them (also
    the tasks of jobs under their own `paths.root`: games are content-addressed). A test that
    checks generation itself gives its task a fresh `games_dir`."""
    from benchmark.envs.textworld import games

    root = run_scratch(tmp_path_factory) / "textworld-games"
    patch = pytest.MonkeyPatch()
    patch.setattr(games, "default_root", lambda: root)

    def shared(results_root=None):  # the run's cache whatever the job's root
        return root

    shared.unpatched = games.games_root  # for the test of games under paths.root
    patch.setattr(games, "games_root", shared)
    yield root
    patch.undo()


@pytest.fixture(scope="session")
def trained_root(shared_root, tmp_path_factory) -> Path:
    """`shared_root` with the small Empty-Random-5x5 PPO checkpoint: the committed one
    (tests/small_policy.py) when it is the current recipe's, else trained once per run, in a
    folder the run's worker processes share (the first to get there trains, benchmark.policy
    trains a checkpoint once across processes); then copied into this worker's root."""
    from benchmark.policy import ensure
    from tests import small_policy

    built = run_scratch(tmp_path_factory) / "trained-policy"
    small_policy.seed(built)  # the committed copy, when it is the current recipe's
    ensure(compose_cfg(built, "env=empty5x5_random", *SMALL_POLICY))
    shutil.copytree(built / "checkpoints", shared_root / "checkpoints", dirs_exist_ok=True)
    return shared_root


# the models `tiny_model` builds: the sizes of benchmark.consultants.tiny.SIZES, and the tiny
# Qwen3.5 (Gated-DeltaNet beside full attention) of benchmark.bench.qwen_shapes
TINY_KINDS = ("tiny", "small", "text", "hybrid")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Iterator[Callable[..., Path]]:
    """`tiny_model(kind="tiny", seed=0)`: the directory of a tiny model (`kind` one of
    TINY_KINDS), built by the package's own builders (build_tiny, save_tiny_hybrid: the files a
    cell loads with from_pretrained) once per run, in a folder the run's worker processes share,
    instead of once per test file. The models are shared, so a test that changes a model's files
    changes a copy (shutil.copytree); the session fails at its end, naming the model, when a
    shared one's files changed."""
    from benchmark.bench.qwen_shapes import save_tiny_hybrid
    from benchmark.consultants.tiny import build_tiny

    root = run_scratch(tmp_path_factory) / "tiny-models"
    built: dict[Path, dict[str, str]] = {}

    def get(kind: str = "tiny", seed: int = 0) -> Path:
        if kind not in TINY_KINDS:
            raise ValueError(f"tiny_model kind {kind!r} is not one of {list(TINY_KINDS)}")
        target = root / f"{kind}-s{seed}"
        if kind == "hybrid":
            path = save_tiny_hybrid(target, seed)
        else:
            path = build_tiny(target, seed, kind)
        built.setdefault(path, file_digests(path))
        return path

    yield get
    changed = sorted(str(p) for p, digests in built.items() if file_digests(p) != digests)
    if changed:
        raise AssertionError(
            f"a test changed the shared tiny model(s) {changed}: change a copy instead"
        )


def file_digests(directory: Path) -> dict[str, str]:
    """Every file under `directory` by its SHA-256."""
    return {
        str(f.relative_to(directory)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(directory.rglob("*"))
        if f.is_file()
    }


def installed_package(package: Path, tmp_path: Path) -> dict[str, str]:
    """`package` (a test plugin package: tests/family_pkg, tests/plugin_pkg) pip-installed into a
    folder of `tmp_path`, and the environment of a process that sees it (PYTHONPATH) with its
    results under `tmp_path / "root"`. pip builds in place, so a copy is installed."""
    source, site = tmp_path / "src", tmp_path / "site"
    shutil.copytree(package, source)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps"]
        + ["--no-index", "--target", str(site), str(source)],
        check=True,
        capture_output=True,
    )
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(site), str(REPO)]),
        BENCHMARK_ROOT=str(tmp_path / "root"),
    )


def untrained_ppo(task, path: Path | None = None):
    """A real dropout PPO that has not learned anything, saved where a checkpoint would be (when
    `path` is given): fast to build, and wrong often enough to give mistakes to learn from."""
    import torch
    from stable_baselines3 import PPO

    from benchmark.policy.network import DropoutActorCriticPolicy

    torch.manual_seed(0)
    model = PPO(
        DropoutActorCriticPolicy,
        task.validation_env(),
        policy_kwargs={"net_arch": [32, 32], "dropout": 0.2},
        device="cpu",
        n_steps=64,
        batch_size=64,
        seed=0,
    )
    if path is not None:
        model.save(path)
    return model


@pytest.fixture(scope="module")
def untrained(tmp_path_factory):
    """(task, PPO model, checkpoint): `untrained_ppo` on Empty-Random-5x5, built once per module
    (a second or two), so rollouts with a real policy get fast tests."""
    from benchmark.envs import make_task

    task = make_task("empty5x5_random")
    checkpoint = tmp_path_factory.mktemp("untrained") / "ppo.zip"
    return task, untrained_ppo(task, checkpoint), checkpoint
