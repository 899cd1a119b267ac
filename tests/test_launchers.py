"""Launcher profiles in launchers/hydra/launcher compose through Hydra and hold only plugin keys.

Why: a typo'd or unknown key in a profile only shows up when a sweep is submitted on a cluster,
after the queue wait. Composing each profile and feeding it to the plugin's own config dataclass
and to submitit's sbatch writer catches it in a second, on any laptop.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra_plugins.hydra_joblib_launcher.config import JobLibLauncherConf
from hydra_plugins.hydra_submitit_launcher.config import (
    BaseQueueConf,
    LocalQueueConf,
    SlurmQueueConf,
)
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
LAUNCHERS = REPO / "launchers"
ROOT_CONFIG = REPO / "conf" / "config.yaml"

SLURM_TARGET = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
LOCAL_TARGET = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"
JOBLIB_TARGET = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"

PROFILES = {"slurm": SlurmQueueConf, "slurm_cpu": SlurmQueueConf, "local": LocalQueueConf}
PROFILES_ALL = {**PROFILES, "parallel": JobLibLauncherConf}


def _root_config_has_launchers() -> bool:
    """True once conf/config.yaml puts launchers/ on Hydra's search path."""
    if not ROOT_CONFIG.exists():
        return False
    raw = OmegaConf.load(ROOT_CONFIG)
    paths = OmegaConf.select(raw, "hydra.searchpath", default=None)
    if paths is None:
        return False
    raw_paths = OmegaConf.to_container(paths, resolve=False)
    return any(str(p).rstrip("/").endswith("/launchers") for p in raw_paths)


@pytest.fixture(scope="module", autouse=True)
def _repo_env() -> None:
    """conf/config.yaml finds launchers/ through $BENCHMARK_REPO (benchmark/__main__ sets it)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BENCHMARK_REPO", str(REPO))
        yield


@pytest.fixture(scope="module", params=["minimal", "real"])
def config_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each profile under a minimal root config (launchers/ alone) and under the real conf/."""
    if request.param == "real":
        return ROOT_CONFIG.parent
    d = tmp_path_factory.mktemp("conf")
    (d / "config.yaml").write_text(
        f"hydra:\n  searchpath:\n    - file://{LAUNCHERS}\nexperiment_name: default\n"
    )
    return d


def _compose(config_dir: Path, profile: str, *overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return compose(
            config_name="config",
            overrides=[f"hydra/launcher={profile}", *overrides],
            return_hydra_config=True,
        )


def _launcher(config_dir: Path, profile: str, *overrides: str):
    return _compose(config_dir, profile, *overrides).hydra.launcher


def _as_dataclass(node, schema: type):
    """Build the plugin's dataclass from the composed node: unknown keys raise TypeError."""
    values = OmegaConf.to_container(node, resolve=False)
    obj = schema(**values)
    # OmegaConf's typed merge also rejects wrong types (e.g. tasks_per_node: null).
    OmegaConf.merge(OmegaConf.structured(schema), values)
    return obj


@pytest.mark.parametrize("profile", sorted(PROFILES_ALL))
def test_profile_holds_only_plugin_keys(config_dir: Path, profile: str) -> None:
    node = _launcher(config_dir, profile)
    schema = PROFILES_ALL[profile]
    obj = _as_dataclass(node, schema)
    assert set(node.keys()) == {f.name for f in dataclasses.fields(schema)}
    assert obj is not None


def test_slurm_profile_values(config_dir: Path) -> None:
    cfg = _compose(config_dir, "slurm", "experiment_name=smoke")
    node = cfg.hydra.launcher
    assert node._target_ == SLURM_TARGET
    assert node.gpus_per_node == 1
    assert node.tasks_per_node == 1 and node.nodes == 1
    assert node.cpus_per_task == 8 and node.mem_gb == 64
    assert node.timeout_min == 240 and node.array_parallelism == 64
    assert node.partition is None and node.account is None and node.qos is None
    assert node.max_num_timeout == 0
    raw = OmegaConf.to_container(node, resolve=False)
    # The submitit folder (scripts, pickles, logs) lives inside the sweep dir.
    assert raw["submitit_folder"].startswith("${hydra.sweep.dir}/")
    assert any("HF_HUB_OFFLINE=1" in line for line in node.setup)
    assert any(".venv/bin/activate" in line for line in raw["setup"])
    assert node.name == "smoke"  # the job name is the experiment's


def test_slurm_cpu_profile_requests_no_gpu(config_dir: Path) -> None:
    node = _launcher(config_dir, "slurm_cpu")
    assert node._target_ == SLURM_TARGET
    assert node.gpus_per_node is None
    assert node.cpus_per_task == 2 and node.mem_gb == 8
    # a PPO training saves its state on the time-limit signal and is requeued (policy/resume.py)
    assert node.max_num_timeout == 3 and node.signal_delay_s == 120
    # Everything else is inherited from `slurm`.
    assert node.tasks_per_node == 1
    assert list(node.setup) == list(_launcher(config_dir, "slurm").setup)


def test_local_and_parallel_profiles(config_dir: Path) -> None:
    local = _launcher(config_dir, "local")
    assert local._target_ == LOCAL_TARGET
    assert local.tasks_per_node == 1 and local.gpus_per_node == 0
    par = _launcher(config_dir, "parallel")
    assert par._target_ == JOBLIB_TARGET
    assert par.n_jobs == 2 and par.prefer == "processes"


def test_profiles_are_overridable(config_dir: Path) -> None:
    node = _launcher(
        config_dir,
        "slurm",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.account=proj42",
        "hydra.launcher.qos=high",
        "hydra.launcher.gpus_per_node=2",
        "hydra.launcher.timeout_min=720",
        "+hydra.launcher.additional_parameters.mail-type=END",
        "hydra.launcher.setup=[module load cuda]",
    )
    assert (node.partition, node.account, node.qos) == ("gpu", "proj42", "high")
    assert node.gpus_per_node == 2 and node.timeout_min == 720
    assert node.additional_parameters["mail-type"] == "END"
    assert list(node.setup) == ["module load cuda"]
    _as_dataclass(node, SlurmQueueConf)


def test_unknown_key_is_rejected(config_dir: Path) -> None:
    """The plugin rejects keys it does not know (submitit's srun_args is one), early."""
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        _launcher(config_dir, "slurm", "hydra.launcher.srun_args=[--foo]")


def _render_sbatch(params: dict, folder: Path) -> str:
    """The sbatch script submitit writes for launcher `params`, with the executor built as
    BaseSubmititLauncher.launch in hydra-submitit-launcher 1.2 builds it, on any machine.

    SlurmExecutor's constructor refuses to run where `srun` is not on PATH: it asks its own
    cluster probe, `SlurmExecutor.affinity()` (AutoExecutor's way of picking a cluster), which is
    a `shutil.which("srun")`. Writing the script never runs srun, so only that probe is replaced,
    while the executor is built; parameter translation and the sbatch writer are submitit's own."""
    import submitit

    init_keys = {"submitit_folder", "max_num_timeout"}
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 2))
        executor = submitit.AutoExecutor(
            cluster="slurm", folder=folder, slurm_max_num_timeout=params["max_num_timeout"]
        )
    executor.update_parameters(
        **{(k if k in base else f"slurm_{k}"): v for k, v in params.items() if k not in init_keys}
    )
    return executor._executor._make_submission_file_text("python -c pass", "uid")


def test_slurm_profile_renders_sbatch_script(config_dir: Path, tmp_path: Path) -> None:
    """Feed the profile to submitit exactly as the launcher does and read the sbatch script
    (no SLURM needed: see _render_sbatch)."""
    node = _launcher(
        config_dir,
        "slurm",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.account=proj42",
        "hydra.launcher.qos=high",
        "+hydra.launcher.additional_parameters.mail-type=END",
    )
    raw = OmegaConf.to_container(node, resolve=False)
    params = {k: v for k, v in raw.items() if k != "_target_"}
    params["setup"] = ["export HF_HUB_OFFLINE=1"]  # the others need Hydra's runtime node
    params["name"] = "smoke"
    text = _render_sbatch(params, tmp_path)
    flags = dict(re.findall(r"^#SBATCH --([\w-]+)=?(.*)$", text, flags=re.M))
    assert flags["partition"] == "gpu"
    assert flags["account"] == "proj42"
    assert flags["qos"] == "high"
    assert flags["gpus-per-node"] == "1"
    assert flags["cpus-per-task"] == "8"
    assert flags["mem"] == "64GB"
    assert flags["time"] == "240"
    assert flags["ntasks-per-node"] == "1"
    assert flags["mail-type"] == "END"
    assert "export HF_HUB_OFFLINE=1" in text


def test_root_config_puts_launchers_on_search_path() -> None:
    """conf/config.yaml must list launchers/ in hydra.searchpath for hydra/launcher=slurm."""
    assert ROOT_CONFIG.exists(), f"missing {ROOT_CONFIG}"
    assert _root_config_has_launchers(), (
        f"{ROOT_CONFIG} has no hydra.searchpath entry ending in 'launchers'; add\n"
        "hydra:\n  searchpath:\n    - file://${oc.env:BENCHMARK_REPO}/launchers"
    )
