"""The results root: the one module that knows its layout, and the two ways anything is put into
it (an atomic publish, a build once under a lock). Everything else asks here.

    <paths.root>/layout.json             the layout version of the root (LAYOUT_VERSION), written
                                         once its artifacts of earlier releases are brought up to
                                         date (benchmark.migrate, under .layout.json.lock)
    <paths.root>/cells/<hash>/           one cell: cell.json, summary.json (written last: the
                                         cell is complete), episodes.jsonl, ... (benchmark.job)
    <paths.root>/tuning/<key>/           one Optuna study (study.journal; benchmark.tuning)
    <paths.root>/digests/<id>.json       content digests of local files, by (path, inode,
                                         size, mtime_ns, ctime_ns): a multi-GB model is
                                         hashed once
    <paths.checkpoints>/<env>-<hash>/    PPO checkpoints (benchmark.policy.checkpoints)
    <paths.models>/finetuned/<name>/     fine-tuned consultants (benchmark.finetune.store)
    <paths.cache>/responses/             the shared response cache (benchmark.consultants.cache)

Rename within a directory is atomic on local and network filesystems (docs/cluster.md), so a
file or a directory is made under a private temporary name and renamed into place: no reader
ever sees half of it. A file lock beside a directory that is built once only saves duplicate
work (on some network filesystems it does not reach other hosts; the rename decides)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

log = logging.getLogger(__name__)

CELLS, TUNING, DIGESTS, GATES = "cells", "tuning", "digests", "gates"
CHECKPOINTS, MODELS, CACHE = "checkpoints", "models", "cache"  # the defaults under the root
BUNDLES, DASHBOARDS, BRACE = "bundles", "dashboards", "brace"  # what the tools write there
RESPONSES = "responses"
LAYOUT_FILE = "layout.json"
# The layout of a results root (cells, checkpoint directory names, model markers), numbered like
# the cell identity it holds: 1 the suite's first day, 2 identity v2, 3 this release's. A root whose
# layout.json holds an older number, or none, is brought up to this one once (benchmark.migrate).
LAYOUT_VERSION = 3
WORK_TAG = ".work-"  # `.<target>.work-<host>-<pid>`: a directory being built
_UMASK = os.umask(0)
os.umask(_UMASK)


# ----------------------------------------------------------------------------- atomic publish
def write_atomic(path: str | os.PathLike, write: Callable[[BinaryIO], Any]) -> None:
    """The one atomic writer: `write(f)` fills a private temp file beside `path` (fsynced, then
    renamed): a killed process never leaves a half-written file that could be read as valid.
    Streams (an SB3 zip, a pickled training state) write straight into it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp creates 0600; results are ordinary files
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    write_atomic(path, lambda f: f.write(data))


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    write_bytes_atomic(path, text.encode())


def write_json_atomic(path: str | os.PathLike, data: Any, *, sort_keys: bool = True) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=sort_keys, default=str) + "\n")


# ----------------------------------------------------------------------------- build once
def work_dir(target: Path) -> Path:
    """The private directory this process builds `target` in (hidden, beside it)."""
    return target.with_name(f".{target.name}{WORK_TAG}{socket.gethostname()}-{os.getpid()}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def clean_stale_work(target: Path) -> list[Path]:
    """Remove the work directories of `target` left by killed processes of this host (their pid
    is gone), and the temp directories older code named `<target>.tmp-*` (they can only be
    leftovers: the caller holds the build lock). Work directories of other hosts are left alone:
    their process may be alive. Returns what was removed."""
    removed = []
    prefix = f".{target.name}{WORK_TAG}"
    host = socket.gethostname()
    for path in target.parent.glob(f".{target.name}{WORK_TAG}*"):
        owner = path.name[len(prefix) :]
        owner_host, _, pid = owner.rpartition("-")
        if owner_host != host or not pid.isdigit():
            continue
        if int(pid) != os.getpid() and _pid_alive(int(pid)):
            continue
        removed.append(path)
    removed += [p for p in target.parent.glob(f"{target.name}.tmp-*") if p.is_dir()]
    removed += [p for p in target.parent.glob(f".{target.name}.train-{host}-*") if p.is_dir()]
    for path in removed:
        log.warning("removing %s, left by a killed build of %s", path, target.name)
        shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(Path(str(path) + ".trainer"), ignore_errors=True)  # fine-tuning's
    return removed


def set_aside(target: Path, tag: str = "corrupt") -> Path:
    """Move an unusable `target` out of the way (never deleted: it may hold someone's work)."""
    aside = target.with_name(f".{target.name}.{tag}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    os.rename(target, aside)
    return aside


def target_lock(target: Path) -> Any:
    """The file lock `<target>.lock` under which `target` is built once (`build_once`), or an
    artifact of an earlier release is moved into its place (benchmark.migrate)."""
    from filelock import FileLock

    return FileLock(str(target) + ".lock")


def build_once(
    target: Path,
    make: Callable[[Path], None],
    complete: Callable[[Path], bool],
    *,
    aside: str = "corrupt",
    finish: Callable[[Path], None] | None = None,
) -> bool:
    """Make the directory `target` once across processes: `make(work)` fills a private work
    directory, which is renamed into place whole; `complete(dir)` says whether a directory is
    usable. Under the lock (`target_lock`), an unusable `target` is set aside
    (`.<name>.<aside>-<time>`), never deleted. The work directory is removed when `make` fails,
    and those of killed processes are removed by the next build of the same target. `finish(target)` runs after the rename, still under the lock (a marker
    written last). Returns whether this call built it."""
    target = Path(target)
    if complete(target):
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    with target_lock(target):
        if complete(target):
            return False
        clean_stale_work(target)
        if target.exists():
            moved = set_aside(target, aside)
            log.warning("%s is incomplete or changed since it was made: moved to %s", target, moved)
        work = work_dir(target)
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        try:
            make(work)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(Path(str(work) + ".trainer"), ignore_errors=True)  # fine-tuning's
        try:
            os.rename(work, target)
        except OSError:
            shutil.rmtree(work, ignore_errors=True)
            if not complete(target):
                raise
            return False  # another host published the same build first
        if finish is not None:
            finish(target)
    return True


def replace_dir(target: Path, make: Callable[[Path], None]) -> None:
    """Make `target` anew (an export the user asked for again): `make(work)` fills a private
    work directory, removed if it fails; the old `target` is replaced only once it succeeded."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    work = work_dir(target)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        make(work)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    shutil.rmtree(target, ignore_errors=True)
    os.rename(work, target)


# ----------------------------------------------------------------------------- content digests
def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def cached_digest(
    path: str | os.PathLike,
    digests: str | os.PathLike | None,
    compute: Callable[[Path], str] = file_sha256,
    kind: str = "sha256",
) -> str:
    """`compute(path)` (by default the SHA-256 of the whole file), cached in the directory
    `digests` (a results root's digests/) by (path, inode, size, mtime_ns, ctime_ns): a
    multi-GB weight file is read once, and again only when any of them changes (a rewrite, a
    copy, a replacement moved into place). The ctime catches a same-size rewrite whose mtime
    was set back (os.utime): no program can set it. `kind` names what is computed (one cache,
    several digests)."""
    path = Path(path).resolve()
    st = path.stat()
    key = {"kind": kind, "path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    key.update(inode=st.st_ino, ctime_ns=st.st_ctime_ns)
    if digests is None:
        return compute(path)
    entry = Path(digests) / (hashlib.sha256(f"{kind}:{path}".encode()).hexdigest()[:24] + ".json")
    try:
        stored = json.loads(entry.read_text())
        if {k: stored.get(k) for k in key} == key and isinstance(stored.get("digest"), str):
            return stored["digest"]
    except (OSError, ValueError):
        pass
    value = compute(path)
    after = path.stat()  # not rewritten while it was read:
    if (after.st_mtime_ns, after.st_ctime_ns) == (st.st_mtime_ns, st.st_ctime_ns):
        try:
            write_json_atomic(entry, {**key, "digest": value})
        except OSError as exc:  # a read-only root still answers, only slower
            log.warning("cannot cache the digest of %s in %s: %s", path, digests, exc)
    return value


# ----------------------------------------------------------------------------- the root
def read_json(path: str | os.PathLike) -> Any | None:
    """The parsed file, or None when it is missing or truncated/corrupt."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def read_jsonl(path: str | os.PathLike) -> list[dict] | None:
    try:
        lines = Path(path).read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]
    except (OSError, ValueError):
        return None


def complete_cell(cell_dir: Path) -> tuple[dict, list[dict]] | None:
    """The cell's (summary, episodes) when its results are complete and consistent, else None.
    A truncated or inconsistent file is never read as valid: the cell is recomputed."""
    summary = read_json(Path(cell_dir) / "summary.json")
    episodes = read_jsonl(Path(cell_dir) / "episodes.jsonl")
    if not isinstance(summary, dict) or episodes is None:
        return None
    if summary.get("n_episodes") != len(episodes) or not summary.get("complete"):
        return None
    return summary, episodes


@dataclass
class StoredCell:
    """A directory under <root>/cells: its record (cell.json, else error.json's config)."""

    hash: str
    dir: Path
    identity: dict | None
    config: dict | None
    mtime: float
    inputs: dict | None = None  # the inputs found (cell.json of identity v3 on)

    @functools.cached_property
    def complete(self) -> bool:
        return self.read() is not None

    @property
    def gate_class(self) -> type | None:
        """The gate's class (benchmark.gates), None when the record names none it knows."""
        from hydra.utils import get_class

        gate = (self.identity or {}).get("gate") or (self.config or {}).get("gate") or {}
        try:
            return get_class(str(gate["_target_"]))
        except Exception:  # noqa: BLE001 - a record of another version: not a gate we know
            return None

    @property
    def checkpoint_sha256(self) -> str | None:
        """The SHA-256 of the checkpoint file it evaluated (a cell of an earlier release's
        identity has it once a job adopted it: benchmark.migrate)."""
        return (self.inputs or {}).get("checkpoint_sha256")

    def read(self) -> tuple[dict, list[dict]] | None:
        return complete_cell(self.dir)


class RootNotWritable(OSError):
    """The results root cannot be written: nothing can be computed."""


class Store:
    """One results root (`paths`: the config's `paths` node, or a root alone, whose defaults
    are the layout above)."""

    def __init__(
        self,
        root: str | os.PathLike | None,
        checkpoints: str | os.PathLike | None = None,
        models: str | os.PathLike | None = None,
        cache: str | os.PathLike | None = None,
    ) -> None:
        """`root` None: only the locations given (a response cache alone, in tests)."""
        self.root = Path(str(root)) if root is not None else None
        self.checkpoints = self._at(checkpoints, CHECKPOINTS)
        self.models = self._at(models, MODELS)
        self.cache = self._at(cache, CACHE)

    def _at(self, given: Any, default: str) -> Path | None:
        if given:
            return Path(str(given))
        return self.root / default if self.root is not None else None

    @classmethod
    def of(cls, paths: Any) -> Store:
        """The store of a config's `paths` node (or of a cfg that has one)."""
        if hasattr(paths, "get") and paths.get("paths") is not None:
            paths = paths.get("paths")
        return cls(
            paths.get("root"), paths.get("checkpoints"), paths.get("models"), paths.get("cache")
        )

    # ------------------------------------------------------------------------- locations
    def cell_dir(self, cell_hash: str) -> Path:
        return self.root / CELLS / cell_hash

    @contextlib.contextmanager
    def computing(self, cell_hash: str, name: str = "") -> Iterator[None]:
        """Held while one job computes a cell: an identical job started meanwhile waits here,
        then finds the cell complete and reuses it instead of running it again. A killed
        holder's lock is released by the system (flock)."""
        from filelock import FileLock, Timeout

        lock = FileLock(str(self.root / CELLS / f".{cell_hash}.computing.lock"))
        (self.root / CELLS).mkdir(parents=True, exist_ok=True)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            log.info("cell %s (%s) is being computed by another job: waiting", name, cell_hash)
            lock.acquire()
        try:
            yield
        finally:
            lock.release()

    def study_dir(self, key: str) -> Path:
        return self.root / TUNING / key

    def checkpoint_dir(self, env_name: str, recipe_hash: str) -> Path:
        return self.checkpoints / f"{env_name}-{recipe_hash}"

    def models_dir(self, kind: str) -> Path:
        return self.models / kind

    def responses_dir(self) -> Path:
        return self.cache / RESPONSES

    def gate_dir(self, key: str) -> Path:
        """A learned gate's classifier (benchmark.learned), by the digest of its key."""
        return self.root / GATES / key

    def bundle_dir(self, experiment: str) -> Path:
        """An exported policy bundle (`python -m benchmark.policy export`)."""
        return self.root / BUNDLES / experiment

    def dashboard_dir(self, experiment: str) -> Path:
        """A preset's W&B dashboard spec (`python -m benchmark.dashboard`)."""
        return self.root / DASHBOARDS / experiment

    def digests_dir(self) -> Path | None:
        """Where `cached_digest` keeps the digests of local weight files (None: no root)."""
        return self.root / DIGESTS if self.root is not None else None

    def check_writable(self) -> None:
        """Fail in one line, before any work, when the root cannot be written (read-only, not a
        directory): by writing a probe file, which also holds where permission bits do not (root)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(dir=self.root, prefix=".write-probe-")
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise RootNotWritable(
                f"results root {self.root} is not writable ({exc.strerror or exc}): set paths.root "
                "or BENCHMARK_ROOT to a directory you can write"
            ) from None

    @staticmethod
    def root_of(path: str | os.PathLike) -> Path | None:
        """The results root above `path` (a sweep dir): its first ancestor with cells/ or
        checkpoints/."""
        for parent in Path(path).resolve().parents:
            if (parent / CELLS).is_dir() or (parent / CHECKPOINTS).is_dir():
                return parent
        return None

    # ------------------------------------------------------------------------- layout
    def layout_version(self) -> int | None:
        """The layout version layout.json records (None: no layout.json, a root of a release
        before it or a new one)."""
        data = read_json(self.root / LAYOUT_FILE)
        version = data.get("layout_version") if isinstance(data, dict) else None
        return version if isinstance(version, int) else None

    def layout_current(self) -> bool:
        """Whether the root is of this release's layout: nothing of an earlier one to migrate,
        so a job reads it as it is (one small file read)."""
        return self.layout_version() == LAYOUT_VERSION

    def write_layout(self, record: dict[str, Any]) -> None:
        """Record that the root is of this release's layout (`record`: what bringing it there
        did), written last."""
        write_json_atomic(
            self.root / LAYOUT_FILE, {"layout_version": LAYOUT_VERSION, **record}, sort_keys=False
        )

    def layout_lock(self) -> Any:
        """Held while the root is brought up to this release's layout: one process does it."""
        from filelock import FileLock

        self.root.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.root / f".{LAYOUT_FILE}.lock"))

    # ------------------------------------------------------------------------- cells
    def complete_cell(self, cell_hash: str) -> tuple[dict, list[dict]] | None:
        return complete_cell(self.cell_dir(cell_hash))

    def cells(self) -> list[StoredCell]:
        """Every cell directory with a record, in hash order."""
        out = []
        for d in sorted((self.root / CELLS).glob("*/")):
            record = read_json(d / "cell.json")
            error = read_json(d / "error.json")
            record = record if isinstance(record, dict) else {}
            error = error if isinstance(error, dict) else {}
            config = record.get("config") or error.get("config")
            if config is None and not record:
                continue
            src = d / "cell.json" if (d / "cell.json").exists() else d / "error.json"
            out.append(
                StoredCell(
                    hash=d.name,
                    dir=d,
                    identity=record.get("identity"),
                    config=config,
                    mtime=src.stat().st_mtime if src.exists() else 0.0,
                    inputs=record.get("inputs"),
                )
            )
        return out
