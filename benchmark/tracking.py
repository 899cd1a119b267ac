"""W&B tracking: one run per job (group = experiment, job_type = gate, name = the cell), offline
by default, always finished (also when the job fails). `tracking=none` turns it off.

No secret reaches a run (benchmark.redact): its config, name and group are redacted, and W&B's
system metadata, which records the command line, is not collected (`x_disable_meta`).

The run's config is the resolved cell config plus `method`, the label the report gives the cell
(`benchmark.report.model.method_label`: PPO, SLM-only <slm>, ASK <slm>, ASK+ <slm>, ...), so a
dashboard can group by it (`benchmark.dashboard`).

Online mode never costs a result: when the W&B server cannot be reached (a TCP probe of the base
URL, at most `PROBE_SECONDS`), when the credentials are missing, or when `wandb.init` fails or
passes `tracking.init_timeout` seconds (default 30; else `WANDB_INIT_TIMEOUT`), the run falls back
to offline mode with a warning and the job goes on; `wandb sync` uploads it later. After one
failed online start, later runs of the same process go offline at once."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from benchmark.redact import redact, redact_data

log = logging.getLogger(__name__)

DEFAULT_INIT_TIMEOUT = 30.0  # seconds wandb.init may take online before the offline fallback
PROBE_SECONDS = 5.0  # at most this long to learn that the server does not answer TCP at all
OFFLINE_MODES = ("offline", "disabled")
_online_failure: str | None = None  # why online init failed in this process (then: offline)


def run_config(config: dict) -> dict:
    """The W&B run config of a cell: its config plus `method`, the report's label of the cell
    (None-safe: a config that is not a cell's, such as the report run's, is returned as it is)."""
    config = redact_data(config)  # no key or URL credentials in a run (benchmark.redact)
    if not isinstance(config, dict) or not {"env", "gate"} <= set(config) or "method" in config:
        return config
    try:
        label = method_of(config)
    except Exception as exc:  # noqa: BLE001 - a label is never worth a failed job
        log.debug("no method label for this config (%s)", exc)
        return config
    return {"method": label, **config}


def method_of(config: dict) -> str:
    """`method_label` of the cell whose resolved config (`CellSpec.config`) is `config`: the
    cell's labels come from `CellSpec.labels()` (None for what the cell does not use)."""
    from benchmark.cell import CellSpec
    from benchmark.gates import GateSettings
    from benchmark.labels import method_label, of_spec

    spec = CellSpec(config=config, gate=GateSettings.from_config(config["gate"]))
    return method_label(of_spec(spec))


def init_timeout(cfg: Any) -> float:
    """`tracking.init_timeout`, else `WANDB_INIT_TIMEOUT`, else 30 s."""
    value = cfg.get("init_timeout") if cfg is not None else None
    if value is None:
        value = os.environ.get("WANDB_INIT_TIMEOUT") or DEFAULT_INIT_TIMEOUT
    value = float(value)
    if value <= 0:
        raise ValueError(f"tracking.init_timeout={value!r} must be > 0 (seconds)")
    return value


def unreachable(base_url: str, timeout: float = PROBE_SECONDS) -> str | None:
    """Why the server at `base_url` cannot be reached (a TCP connect, name lookup included, that
    fails or takes longer than `timeout`), or None when it accepts a connection."""
    parts = urlsplit(base_url)
    host = parts.hostname
    if not host:
        return f"no host in the W&B base URL {base_url!r}"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                outcome.append(None)
        except OSError as exc:
            outcome.append(f"cannot connect to {host}:{port} ({exc})")

    worker = threading.Thread(target=connect, daemon=True)  # a stuck name lookup is left behind
    worker.start()
    worker.join(timeout + 0.5)
    if not outcome:
        return f"no answer from {host}:{port} within {timeout:g} s"
    return outcome[0]


class Tracker:
    """A context manager around one W&B run; every method is a no-op when tracking is off.
    `fallback` says why an online run went offline (None when it did not)."""

    def __init__(self, cfg: Any | None, *, name: str, group: str, job_type: str, config: dict):
        self.run = None
        self.fallback: str | None = None
        if cfg is None or not cfg.get("enabled", False):
            return
        import wandb

        os.makedirs(cfg.dir, exist_ok=True)
        mode = cfg.get("mode", "offline") or "offline"
        timeout = init_timeout(cfg)
        kwargs = dict(
            project=cfg.project,
            entity=cfg.get("entity"),
            dir=cfg.dir,
            name=redact(name),
            group=redact(group),
            job_type=job_type,
            config=run_config(config),
            reinit="create_new",
        )

        def settings() -> Any:
            # x_disable_meta: W&B's system metadata records the command line (sys.argv), where a
            # key pasted into any field stands in clear; the run config is the cell's, redacted
            return wandb.Settings(
                silent=True,
                console="off",
                x_disable_stats=True,
                x_disable_meta=True,
                init_timeout=timeout,
            )

        if mode not in OFFLINE_MODES:
            t0 = time.monotonic()
            self.fallback = _online_failure or unreachable(
                wandb.setup().settings.base_url, min(PROBE_SECONDS, timeout)
            )
            if self.fallback is None:
                try:
                    self.run = wandb.init(mode=mode, settings=settings(), **kwargs)
                except Exception as exc:  # noqa: BLE001 - any failure to start: go offline
                    self.fallback = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
            if self.fallback is not None:
                _remember_failure(self.fallback)
                _quiet_wandb_telemetry()
                log.warning(
                    "W&B online start failed after %.1f s (%s): this run is logged offline "
                    "under %s; upload it later with `wandb sync %s/wandb/offline-run-*`. Online "
                    "start waits at most tracking.init_timeout=%g s; the rest of this process "
                    "logs offline.",
                    time.monotonic() - t0,
                    self.fallback,
                    cfg.dir,
                    cfg.dir,
                    timeout,
                )
                mode = "offline"
        if self.run is None:
            self.run = wandb.init(mode=mode, settings=settings(), **kwargs)
            if self.fallback is not None:
                self.run.summary["tracking_fallback"] = self.fallback

    def log(self, data: dict, step: int | None = None) -> None:
        if self.run is not None:
            self.run.log(data, step=step)

    def summary(self, data: dict) -> None:
        """Set the run's summary; its numbers are also logged as one history row, so that line
        panels can plot them against another summary value (reward_mean against tau)."""
        if self.run is None:
            return
        numbers = {
            k: v for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        if numbers:
            self.run.log(numbers)
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


def _quiet_wandb_telemetry() -> None:
    """wandb sends its own telemetry to the base URL (one exporter per `wandb.init`) and flushes
    it at exit: against a server that accepts connections and never answers, that holds the
    process about 20 s more. Once the server is known to be unreachable, every exporter is told
    it has nothing to send to and no new one starts (best effort: wandb internals, guarded)."""
    try:
        import gc

        from wandb.analytics.opentelemetry import opentelemetry_proxy as otel

        otel.disable()
        for obj in gc.get_objects():
            if type(obj) is otel.OpenTelemetryProxy and hasattr(obj, "_server_supports_proxy"):
                obj._server_supports_proxy = False  # its exit flush then sends nothing
    except Exception as exc:  # noqa: BLE001 - telemetry is wandb's, never worth a failure
        log.debug("could not turn off wandb's telemetry (%s)", exc)


def _remember_failure(reason: str) -> None:
    global _online_failure
    _online_failure = _online_failure or f"{reason} (an earlier run of this process)"
