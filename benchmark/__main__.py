"""Hydra entry: python -m benchmark [overrides] [-m]. Compose, wrap, run, return the metric."""

from __future__ import annotations

import os
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

import benchmark  # noqa: F401 - registers the config resolvers

REPO = Path(__file__).resolve().parent.parent
CONF = str(REPO / "conf")
os.environ.setdefault(
    "BENCHMARK_REPO", str(REPO)
)  # conf/config.yaml puts launchers/ on the search path


@hydra.main(version_base="1.3", config_path=CONF, config_name="config")
def main(cfg: DictConfig) -> float | None:
    from benchmark.job import run_job

    hc = HydraConfig.get()
    summary = run_job(cfg, Path(hc.runtime.output_dir), multirun=hc.mode == RunMode.MULTIRUN)
    if summary is None:
        return None
    return summary.get("reward_mean")


if __name__ == "__main__":
    main()
