"""W&B tracking: one run per job (group = experiment, job_type = gate, name = the cell), offline
by default, always finished (also when the job fails). `tracking=none` turns it off."""

from __future__ import annotations

import os
from typing import Any


class Tracker:
    """A context manager around one W&B run; every method is a no-op when tracking is off."""

    def __init__(self, cfg: Any | None, *, name: str, group: str, job_type: str, config: dict):
        self.run = None
        if cfg is None or not cfg.get("enabled", False):
            return
        import wandb

        os.makedirs(cfg.dir, exist_ok=True)
        self.run = wandb.init(
            project=cfg.project,
            entity=cfg.get("entity"),
            mode=cfg.get("mode", "offline"),
            dir=cfg.dir,
            name=name,
            group=group,
            job_type=job_type,
            config=config,
            reinit="create_new",
            settings=wandb.Settings(silent=True, console="off", x_disable_stats=True),
        )

    def log(self, data: dict, step: int | None = None) -> None:
        if self.run is not None:
            self.run.log(data, step=step)

    def summary(self, data: dict) -> None:
        if self.run is not None:
            for key, value in data.items():
                self.run.summary[key] = value

    def table(self, key: str, rows: list[dict]) -> None:
        if self.run is None or not rows:
            return
        import wandb

        columns = sorted({k for r in rows for k in r})
        self.run.log(
            {key: wandb.Table(columns=columns, data=[[r.get(c) for c in columns] for r in rows])}
        )

    def image(self, key: str, path: str) -> None:
        if self.run is not None:
            import wandb

            self.run.log({key: wandb.Image(path)})

    def finish(self, exit_code: int = 0) -> None:
        if self.run is not None:
            self.run.finish(exit_code=exit_code)
            self.run = None

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.finish(exit_code=0 if exc_type is None else 1)
