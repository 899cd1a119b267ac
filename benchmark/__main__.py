"""Hydra entry: python -m benchmark [overrides] [-m]. Compose, wrap, run, return the metric.
`-m`/`--multirun` may stand anywhere among the overrides; a multirun ends with its tally
(benchmark.tally) and exits 1 when a cell failed (unless hydra.callbacks.tally.fail_on_error=false)."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
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
    redact_hydra_files(hc)
    multirun = hc.mode == RunMode.MULTIRUN
    with one_line_errors(multirun, Path(hc.runtime.output_dir), str(cfg.paths.root)):
        summary = run_job(cfg, Path(hc.runtime.output_dir), multirun=multirun)
    if summary is None:
        return None
    return summary.get("reward_mean")


@contextmanager
def one_line_errors(multirun: bool, job_dir: Path, root: str | None = None) -> Iterator[None]:
    """A single job that fails (a refused value, a server that is down) exits 1 with one line,
    the error as error.json records it, instead of Hydra's traceback first; HYDRA_FULL_ERROR=1
    keeps Hydra's report (the traceback). A multirun's cells record theirs and carry on. A full
    disk (ENOSPC anywhere in the chain) is one line naming the results root `root`."""
    try:
        yield
    except Exception as exc:
        if multirun or os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        from benchmark.job import root_cause
        from benchmark.redact import redact

        full = disk_full(exc)
        if full is not None:
            raise SystemExit(
                f"Error: no space left on the disk of the results root {root} (writing "
                f"{full.filename or 'a file'}): free space there, or set paths.root or "
                "BENCHMARK_ROOT to a directory on another disk; rerun to resume"
            ) from None
        cause = root_cause(exc)
        where = f"error.json in {job_dir}; " if (job_dir / "error.json").is_file() else ""
        message = " ".join(str(cause["message"]).split())  # one line
        raise SystemExit(
            redact(
                f"Error: {cause['type']}: {message} ({where}HYDRA_FULL_ERROR=1 for the traceback)"
            )
        ) from None


def disk_full(exc: BaseException | None) -> OSError | None:
    """The ENOSPC error in `exc`'s chain (causes and contexts), if any."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def redact_hydra_files(hc: DictConfig) -> None:
    """Hydra has written the composed config, its own config and the overrides (.hydra/, and a
    sweep's multirun.yaml) before the job starts: rewritten without secrets (benchmark.redact),
    such as a key given by mistake as `slm.backend.api_key_env=sk-...` or a URL's user:password."""
    from benchmark.redact import redact_file, redact_logging

    redact_logging()  # the job's log file too
    files = []
    if hc.output_subdir is not None:
        out = Path(hc.runtime.output_dir) / str(hc.output_subdir)
        files += [out / name for name in ("config.yaml", "hydra.yaml", "overrides.yaml")]
    if hc.mode == RunMode.MULTIRUN:
        files.append(Path(hc.sweep.dir) / "multirun.yaml")
    for file in files:
        redact_file(file)


def refuse_secrets(args: list[str]) -> None:
    """A secret on the command line is refused before Hydra writes anything (its .hydra/ files
    and a sweep's multirun.yaml are written before any job runs, and W&B would record them): a
    URL with credentials (`user:password@`, `?api_key=...`) anywhere, a key where the NAME of its
    variable belongs (`slm.backend.api_key_env=sk-...`). One line that does not repeat it."""
    from benchmark.redact import redact, refuse_url_credentials

    for arg in args:
        key, _, value = arg.partition("=")
        key = key.lstrip("+~")
        try:
            refuse_url_credentials(key, value)
        except ValueError as exc:
            raise SystemExit(f"Error: {exc}") from None
        if key.endswith("api_key_env") and redact(value) != value:
            raise SystemExit(
                f"Error: {key} must be the NAME of an environment variable holding the key, not "
                f"the key itself (the value given is not shown): export MY_KEY=<key> and set "
                f"{key}=MY_KEY"
            )


def refuse_config_secrets(cfg: DictConfig) -> None:
    """The composed config's URLs (a preset's or the local config's `slm.backend.base_url`),
    checked as the command line's are, before Hydra writes them (`refuse_secrets`)."""
    from omegaconf import OmegaConf

    from benchmark.redact import refuse_url_credentials

    def walk(node: object, key: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{key}[{i}]")
        else:
            refuse_url_credentials(key, node)

    try:
        walk(OmegaConf.to_container(cfg, resolve=False), "")
    except ValueError as exc:
        raise SystemExit(f"Error: {exc}") from None


def check_root(args: list[str]) -> None:
    """The results root, once before any job: one that cannot be written fails here, in one
    line (Hydra would otherwise make its run or sweep dir in it first and fail with a
    traceback); one of an earlier release's layout is brought up to date here, once for the
    whole sweep (benchmark.migrate), so no job of it migrates anything; a URL with credentials
    in the composed config is refused here too (`refuse_config_secrets`). Flags (--cfg, --help)
    and overrides Hydra rejects are left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from benchmark.config import compose
    from benchmark.store import RootNotWritable, Store

    if any(a.startswith("-") for a in args):
        return
    try:
        parsed = OverridesParser.create().parse_overrides(args)
        cfg = compose([p.input_line for p in parsed if not p.is_sweep_override()])
    except Exception:  # noqa: BLE001 - Hydra reports it its own way
        return
    refuse_config_secrets(cfg)
    store = Store.of(cfg.paths)
    try:
        store.check_writable()
    except RootNotWritable as exc:
        raise SystemExit(f"Error: {exc}") from None
    swept = any(p.is_sweep_override() and p.key_or_group.startswith("paths") for p in parsed)
    if not swept and not store.layout_current():  # (roots swept over: each job migrates its own)
        from benchmark.migrate import ensure_current

        try:
            ensure_current(cfg.paths)
        except Exception as exc:  # noqa: BLE001 - one line, before any job
            raise SystemExit(
                f"Error: bringing the results root {store.root} to this release's layout failed "
                f"({type(exc).__name__}: {exc}); nothing was deleted. Rerun, or run "
                f"python -m benchmark.migrate {store.root}, to resume it"
            ) from None


def cli(argv: list[str] | None = None, app=None) -> int:
    """Move `-m` where Hydra's parser wants it, run, and exit as the sweep's tally says; `app`:
    another Hydra app on the same config (the Agent-BRACE trainer), default this one."""
    from benchmark import tally

    args, multirun = split_multirun(sys.argv[1:] if argv is None else argv)
    sys.argv = [sys.argv[0], *(["--multirun"] if multirun else []), *args]
    tally.LAST = tally.STARTED = None
    refuse_secrets(args)
    check_root(args)
    try:
        (app or main)()
    except SystemExit:  # Hydra reported an error: a multirun still says how its cells went
        tally.after_abort()
        raise
    return tally.exit_code()


if __name__ == "__main__":
    sys.exit(cli())
