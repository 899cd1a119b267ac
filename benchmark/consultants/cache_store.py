"""The response cache's store (ResponseStore): one directory of answers, read and written by many
processes on one or many hosts without a lock (its files: benchmark.consultants.cache_files; its
compaction: benchmark.consultants.cache_compaction). Also the cap every process sharing the
directory applies (`cache_cap`, from its `settings.json`), so no job's setting evicts another's
entries."""

from __future__ import annotations

import atexit
import json
import logging
import os
import secrets
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable
from pathlib import Path

from benchmark.consultants.base import Answer
from benchmark.consultants.cache_compaction import Compaction
from benchmark.consultants.cache_files import (
    FORMAT_VERSION,
    INDEX_FORMAT,
    INDEX_RE,
    SHARD_RE,
    CorruptFile,
    NewerFormat,
    Row,
    decode_shard,
    encode_shard,
    host_name,
    is_corrupt,
    merge_row,
    set_aside,
    sqlite_uri,
    write_file_atomic,
)

DEFAULT_MAX_ENTRIES = 100_000
SETTINGS = "settings.json"  # the cache's own configuration, shared by every process using it
DEFAULT_PUBLISH_SECONDS = 5.0
DEFAULT_MAX_SHARDS = 1024
DEFAULT_CLAIM_STALE_SECONDS = 120.0
TOUCH_PUBLISH_SECONDS = 60.0  # a process that only hits writes its hit times this often
log = logging.getLogger(__name__)


def _check_cap(value: object, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{where} max_entries={value!r} is invalid: allowed an integer >= 1")
    return value


def cache_cap(directory: str | os.PathLike) -> int:
    """The cap of the cache in `directory`: its settings.json's max_entries, else the default."""
    path = Path(directory) / SETTINGS
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return DEFAULT_MAX_ENTRIES
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"response cache {path} is corrupt ({exc}): set the cap again with `python -m "
            f"benchmark.consultants.cache {directory} --max-entries N`, or delete the file for "
            f"the default {DEFAULT_MAX_ENTRIES}"
        ) from None
    return _check_cap(data.get("max_entries") if isinstance(data, dict) else data, str(path))


def set_cache_cap(directory: str | os.PathLike, max_entries: int) -> None:
    """Give the cache in `directory` its cap (every process that opens it later uses it; one
    open now keeps the cap it read)."""
    _check_cap(max_entries, "response cache")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    data = (json.dumps({"max_entries": max_entries}) + "\n").encode()
    write_file_atomic(directory, SETTINGS, data)


class ResponseStore(Compaction):
    """The cache's files in `directory` (see the module docstring), safe for concurrent processes
    on one or many hosts. `max_entries`: None for the cache's own cap (`cache_cap`); a number
    caps what this store compacts to, evicting any process's entries (tests, tools)."""

    def __init__(
        self,
        directory: str | os.PathLike,
        max_entries: int | None = None,
        *,
        publish_seconds: float = DEFAULT_PUBLISH_SECONDS,
        max_shards: int = DEFAULT_MAX_SHARDS,
        claim_stale_seconds: float = DEFAULT_CLAIM_STALE_SECONDS,
    ) -> None:
        directory = Path(directory)
        if max_entries is None:
            max_entries = cache_cap(directory)
        _check_cap(max_entries, "response cache")
        self.directory = directory
        self.max_entries = int(max_entries)
        self.publish_seconds = float(publish_seconds)
        self.max_shards = int(max_shards)
        self.claim_stale_seconds = float(claim_stale_seconds)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._token = secrets.token_hex(4)
        self._seq = 0
        self._warned_publish = False
        # the index in use
        self._index: sqlite3.Connection | None = None
        self._index_id: tuple[int, int, int] | None = None  # (generation, st_dev, st_ino)
        self._index_rows = 0
        self._folded: frozenset[str] = frozenset()
        # published shards the index does not hold
        self._loaded: set[str] = set()
        self._foreign: set[str] = set()  # shards of a newer format: not read, never deleted
        self._newer_index = False  # the newest index is of a newer format: no compaction
        self._garbage: set[str] = set()  # shards the index holds that are still there
        self._rows: dict[str, Row] = {}
        self._seen_touches: dict[str, float] = {}
        # this process's answers and hits, not yet published
        self._pending: dict[str, Row] = {}
        self._touches: dict[str, float] = {}
        self._last_publish = time.monotonic()
        self._claim_seen: tuple[tuple[int, int, int], float] | None = None
        ref = weakref.ref(self)

        def flush_at_exit() -> None:
            store = ref()
            if store is not None:
                store.flush()

        self._at_exit = flush_at_exit
        atexit.register(flush_at_exit)
        self._claim_ino: int | None = None
        with self._lock:
            self._refresh()
            self._maybe_compact()

    # ------------------------------------------------------------------------------ reading
    def _refresh(self) -> None:
        """Catch up with the directory: the newest index, then every shard it does not hold."""
        for _ in range(20):
            try:
                names = os.listdir(self.directory)
            except FileNotFoundError:
                self.directory.mkdir(parents=True, exist_ok=True)
                names = []
            if not self._use_newest_index(names):
                continue  # the index vanished between listing and opening: list again
            self._garbage = {n for n in names if n in self._folded}
            vanished = False
            for name in sorted(n for n in names if SHARD_RE.match(n)):
                if name in self._loaded or name in self._folded or name in self._foreign:
                    continue
                try:
                    decoded = decode_shard((self.directory / name).read_bytes())
                except FileNotFoundError:
                    vanished = True  # folded into an index newer than the one listed
                    continue
                except CorruptFile as exc:
                    set_aside(self.directory / name, exc)
                    continue
                except OSError as exc:  # I/O error, permissions: tried again at the next refresh
                    log.warning("response cache shard %s unreadable (%s)", name, exc)
                    continue
                if decoded is None:
                    self._foreign.add(name)  # a newer format: not ours to read or fold
                    continue
                self._loaded.add(name)
                rows, touches = decoded
                for key, row in rows.items():
                    merge_row(self._rows, key, row)
                    self._touch(self._seen_touches, key, row.created)
                for key, t in touches.items():
                    self._touch(self._seen_touches, key, t)
            if not vanished:
                return
        log.warning("response cache %s keeps changing under this reader", self.directory)

    @staticmethod
    def _touch(touches: dict[str, float], key: str, t: float) -> None:
        if t > touches.get(key, 0.0):
            touches[key] = t

    def _use_newest_index(self, names: list[str]) -> bool:
        """Switch to the newest valid index in `names` unless already on it; False when it
        vanished before it could be opened."""
        gens = sorted(((int(m[1]), n) for n in names if (m := INDEX_RE.match(n))), reverse=True)
        self._newer_index = False
        for gen, name in gens:
            path = self.directory / name
            try:
                st = os.stat(path)
            except FileNotFoundError:
                return False
            ident = (gen, st.st_dev, st.st_ino)
            if ident == self._index_id:
                return True
            try:
                conn, meta, folded = self._open_index(path)
            except FileNotFoundError:
                return False
            except CorruptFile as exc:
                set_aside(path, exc)
                continue  # the previous generation, if kept
            except NewerFormat:
                self._newer_index = True  # read the older ones; compact no more
                continue
            except sqlite3.Error as exc:  # I/O, permissions: keep what this reader has
                log.warning("response cache index %s unreadable (%s); not used now", path, exc)
                return True
            self._drop_index()
            self._index, self._index_id, self._folded = conn, ident, folded
            self._index_rows = int(meta["rows"])
            self._loaded, self._rows, self._seen_touches = set(), {}, {}
            return True
        if self._index is not None:  # every index is gone (set aside): start from nothing
            self._drop_index()
            self._loaded, self._rows, self._seen_touches = set(), {}, {}
        return True

    @staticmethod
    def _open_index(path: Path) -> tuple[sqlite3.Connection, dict[str, str], frozenset[str]]:
        if not path.exists():
            raise FileNotFoundError(path)
        conn = sqlite3.connect(sqlite_uri(path, mode="ro", immutable="1"), uri=True,
                               check_same_thread=False)  # fmt: skip
        try:
            meta = dict(conn.execute("SELECT name, value FROM meta").fetchall())
            if meta.get("format") != INDEX_FORMAT:
                raise CorruptFile(f"not a response index (format {meta.get('format')!r})")
            if int(meta.get("version", 0)) > FORMAT_VERSION:
                raise NewerFormat(path)
            if int(meta.get("version", 0)) != FORMAT_VERSION:
                raise CorruptFile(f"index format version {meta.get('version')}")
            folded = frozenset(n for (n,) in conn.execute("SELECT name FROM folded"))
            int(meta["rows"])
        except sqlite3.Error as exc:
            conn.close()
            if not path.exists():
                raise FileNotFoundError(path) from exc
            if is_corrupt(exc) or "no such table" in str(exc):
                raise CorruptFile(str(exc)) from exc
            raise
        except NewerFormat:
            conn.close()
            raise
        except (CorruptFile, KeyError, ValueError) as exc:
            conn.close()
            raise CorruptFile(str(exc)) from exc
        return conn, meta, folded

    def _drop_index(self) -> None:
        if self._index is not None:
            try:
                self._index.close()
            except sqlite3.Error:
                pass
        self._index, self._index_id, self._index_rows = None, None, 0
        self._folded = frozenset()

    def _index_lookup(self, keys: list[str]) -> dict[str, Row]:
        """Rows of the index for `keys`. A read error (an index deleted under a reader on NFS,
        a disk fault) makes the reader move to the newest index and try once more."""
        if not keys:
            return {}
        for attempt in range(2):
            if self._index is None:
                return {}
            try:
                found: dict[str, Row] = {}
                for s in range(0, len(keys), 500):
                    part = keys[s : s + 500]
                    marks = ",".join("?" * len(part))
                    for k, *rest in self._index.execute(
                        "SELECT key, identity, text, prompt_tokens, generated_tokens, seconds,"
                        f" created FROM responses WHERE key IN ({marks})",
                        part,
                    ):
                        found[k] = Row(*rest)
                return found
            except sqlite3.Error as exc:
                path = self._index_path(self._index_id[0]) if self._index_id else None
                self._drop_index()
                if attempt == 0:
                    self._loaded, self._rows, self._seen_touches = set(), {}, {}
                    self._refresh()
                    continue
                if is_corrupt(exc) and path is not None:
                    set_aside(path, exc)
                else:
                    log.warning("response cache index %s unreadable (%s)", path, exc)
        return {}

    def _lookup(self, keys: list[str]) -> dict[str, Row]:
        """This process's unpublished answers first, then the index, then the shards."""
        found = {k: self._pending[k] for k in keys if k in self._pending}
        rest = [k for k in keys if k not in found]
        found.update(self._index_lookup(rest))
        found.update({k: self._rows[k] for k in rest if k not in found and k in self._rows})
        return found

    def get_many(self, keys: Iterable[str]) -> dict[str, Answer]:
        """Answers for the keys that are cached; their hit time is recorded (LRU). A miss makes
        the store look for what other processes published since."""
        keys = list(dict.fromkeys(keys))
        with self._lock:
            found = self._lookup(keys)
            if len(found) < len(keys):
                self._refresh()
                found.update(self._lookup([k for k in keys if k not in found]))
            now = time.time()
            for k in found:
                self._touches[k] = now
            if self._touches and time.monotonic() - self._last_publish >= TOUCH_PUBLISH_SECONDS:
                self._publish()
            return {k: row.answer() for k, row in found.items()}

    # ------------------------------------------------------------------------------ writing
    def put_many(self, identity: str, items: dict[str, Answer]) -> None:
        """Remember answers; they are published with this process's next shard, at once when
        they take what it sees over the cap (which compacts)."""
        if not items:
            return
        now = time.time()
        with self._lock:
            for k, a in items.items():
                self._pending[k] = Row(
                    identity, a.text, a.prompt_tokens, a.generated_tokens, a.seconds, now
                )
            due = time.monotonic() - self._last_publish >= self.publish_seconds
            if due or self._seen() > self.max_entries:
                self._publish()

    def flush(self) -> None:
        """Publish this process's unpublished answers and hit times now."""
        with self._lock:
            self._publish()

    def _publish(self, compact: bool = True) -> None:
        if not self._pending and not self._touches:
            return
        self._seq += 1
        name = f"shard-{host_name()}-{os.getpid()}-{self._token}-{self._seq:06d}.jsonl"
        header = {"host": socket.gethostname(), "pid": os.getpid(), "created": time.time()}
        try:
            write_file_atomic(
                self.directory, name, encode_shard(self._pending, self._touches, header)
            )
        except OSError as exc:
            if not self._warned_publish:
                self._warned_publish = True
                log.warning(
                    "response cache %s: cannot publish answers (%s); they serve this process only",
                    self.directory,
                    exc,
                )
        else:
            self._loaded.add(name)
        for key, row in self._pending.items():
            merge_row(self._rows, key, row)
            self._touch(self._seen_touches, key, row.created)
        for key, t in self._touches.items():
            self._touch(self._seen_touches, key, t)
        self._pending, self._touches = {}, {}
        self._last_publish = time.monotonic()
        if compact:
            self._maybe_compact()

    # ------------------------------------------------------------------------------ figures
    def items(self) -> dict[str, Row]:
        """Every entry a reader sees now, by key (tests, inspection: it holds them all)."""
        with self._lock:
            self._refresh()
            out: dict[str, Row] = {}
            if self._index is not None:
                for k, *rest in self._index.execute(
                    "SELECT key, identity, text, prompt_tokens, generated_tokens, seconds, created"
                    " FROM responses"
                ):
                    out[k] = Row(*rest)
            for k, row in {**self._rows, **self._pending}.items():
                out.setdefault(k, row)
            return out

    def __len__(self) -> int:
        """The number of entries a reader sees now (this process's unpublished ones included)."""
        with self._lock:
            self._refresh()
            extra = {**self._rows, **self._pending}
            in_index = self._index_lookup(list(extra))
            return self._index_rows + sum(k not in in_index for k in extra)

    def disk_bytes(self) -> int:
        """Bytes of the published index and shard files."""
        total = 0
        for name in os.listdir(self.directory):
            if INDEX_RE.match(name) or SHARD_RE.match(name):
                try:
                    total += os.stat(self.directory / name).st_size
                except FileNotFoundError:
                    pass
        return total

    def row_bytes_estimate(self) -> float:
        """Mean bytes one entry takes in an index: its columns plus the primary-key entry (the
        file size of a small cache is mostly fixed SQLite overhead)."""
        with self._lock:
            self._refresh()
            total, n = 0.0, 0
            if self._index is not None:
                s, c = self._index.execute(
                    "SELECT SUM(2 * LENGTH(key) + LENGTH(identity) + LENGTH(text) + 48 + 8 + 16),"
                    " COUNT(*) FROM responses"
                ).fetchone()
                total, n = float(s or 0.0), int(c)
            for key, row in {**self._rows, **self._pending}.items():
                total += 2 * len(key) + len(row.identity) + len(row.text) + 48 + 8 + 16
                n += 1
            return total / n if n else 0.0

    def close(self) -> None:
        """Publish what is pending and let go of the index (a later call opens it again)."""
        with self._lock:
            self._publish()
            self._drop_index()
            self._loaded, self._rows, self._seen_touches = set(), {}, {}
        atexit.unregister(self._at_exit)
