"""Hydra entry: python -m benchmark [overrides] [-m]. Compose, wrap, run, return the metric.
`-m`/`--multirun` may stand anywhere among the overrides; a multirun ends with its tally
(benchmark.tally) and exits 1 when a cell failed (unless hydra.callbacks.tally.fail_on_error=false)."""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

import benchmark  # noqa: F401 - registers the config resolvers
from benchmark.config import CONF, split_multirun


@hydra.main(version_base="1.3", config_path=str(CONF), config_name="config")
def main(cfg: DictConfig) -> float | None:
    from benchmark.job import run_job

    hc = HydraConfig.get()
    summary = run_job(cfg, Path(hc.runtime.output_dir), multirun=hc.mode == RunMode.MULTIRUN)
    if summary is None:
        return None
    return summary.get("reward_mean")


def cli(argv: list[str] | None = None) -> int:
    """Move `-m` where Hydra's parser wants it, run, and exit as the sweep's tally says."""
    from benchmark import tally

    args, multirun = split_multirun(sys.argv[1:] if argv is None else argv)
    sys.argv = [sys.argv[0], *(["--multirun"] if multirun else []), *args]
    tally.LAST = tally.STARTED = None
    try:
        main()
    except SystemExit:  # Hydra reported an error: a multirun still says how its cells went
        tally.after_abort()
        raise
    return tally.exit_code()


if __name__ == "__main__":
    sys.exit(cli())
