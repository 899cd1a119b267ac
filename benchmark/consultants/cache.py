"""Response cache: a Consultant wrapper that remembers greedy answers on disk.

Why from outside: every backend gets the same cache, and the key is built in one place. The key is
the sha256 of (backend identity, every Decoding field that acts, the full messages JSON), so one
model's answers are never served for another's and a changed prompt or decoding setting misses.
A greedy key leaves out the sampling-only fields (top_p, top_k, seed): they change no greedy answer,
and keys made before they existed stay valid.

Only greedy answers (temperature == 0) are cached; sampled queries bypass the cache entirely.
Only answers the backend marks complete (`Answer.complete`, true by default) are written: a reply
a backend does not stand behind (e.g. a server's reply cut by max_tokens before any text) is
passed on but asked again next time, so a fixed server is never answered from a broken one's
replies. Identical greedy queries within one batch reach the backend once (the copies come back
with `cached=True`, `seconds=0`).

Storage: one SQLite file (`<paths.cache>/responses.sqlite`) in WAL mode with a busy timeout and
retries on lock errors, so the processes of a multirun can share it, and a writer killed
mid-write leaves a readable database (a transaction either committed or never happened). The
file is bounded by `max_entries` rows (default 100,000, i.e. tens of MB for short answers);
beyond it the least recently used rows (by last access time) are evicted.

A corrupt file (not a database, or a malformed page found at open or in any later lookup or write)
is never deleted and never fatal: it is moved aside to `responses.sqlite.corrupt-<timestamp>`
(with its -wal/-shm files), a warning names both files, and an empty cache starts in its place;
the lookup or write that found it is then run against the new file. Other processes sharing the
file notice that the path now names a new file and reopen it.

Answers served from the cache have `cached=True`, the token counts of the original generation
(what the answer cost when it was made) and `seconds` = the time the lookup took."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from benchmark.consultants.base import Answer, Consultant, Decoding, Query

DEFAULT_MAX_ENTRIES = 100_000
T = TypeVar("T")
log = logging.getLogger(__name__)
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    identity TEXT NOT NULL,
    text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    generated_tokens INTEGER NOT NULL,
    seconds REAL NOT NULL,
    created REAL NOT NULL,
    last_access REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_last_access ON responses(last_access);
"""


# Decoding fields that only act when sampling: a greedy key leaves them out, so it is the key the
# code made before they existed (tests/test_decoding.py pins one) and no cached answer is lost.
SAMPLING_ONLY = ("top_p", "top_k", "seed")


def decoding_key(decoding: Decoding) -> dict:
    """The decoding fields that enter the key: all of them, less SAMPLING_ONLY when greedy."""
    data = dataclasses.asdict(decoding)
    if decoding.temperature == 0:
        for name in SAMPLING_ONLY:
            data.pop(name)
    return data


def cache_key(identity: str, query: Query) -> str:
    """sha256 over the backend identity, the decoding fields that act (`decoding_key`) and the
    full messages."""
    payload = {
        "identity": identity,
        "decoding": decoding_key(query.decoding),
        "messages": query.messages,
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def is_corrupt(exc: BaseException) -> bool:
    """True for SQLite's "file is not a database" and "database disk image is malformed" (plain
    DatabaseError); lock, I/O and permission errors (OperationalError) are not corruption."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python >= 3.11 for errors SQLite raised
    if code is not None:
        return code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    return type(exc) is sqlite3.DatabaseError


class ResponseStore:
    """The SQLite table behind the cache, safe for concurrent processes."""

    def __init__(self, path: str | os.PathLike, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"cache max_entries={max_entries} must be >= 1")
        self.path = Path(path)
        self.max_entries = int(max_entries)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._file: tuple[int, int] | None = None  # (st_dev, st_ino) the connection opened
        self._locked_retry(lambda: None)  # opens (or sets aside a corrupt file and starts anew)

    def _open(self) -> None:
        """Connect and create the schema; remember which file (inode) the connection is on."""
        self._conn = sqlite3.connect(
            str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False
        )
        self._file = self._path_file()  # before any read: a corrupt file must be known
        self._conn.execute("PRAGMA busy_timeout = 30000")
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = NORMAL")  # WAL-safe against killed processes
        self._conn.executescript(_SCHEMA)

    def _path_file(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_dev, st.st_ino

    def _disconnect(self) -> None:
        """Close the connection. When its file was moved aside, SQLite sees that and neither
        checkpoints into it nor deletes `<path>-wal`/`-shm`, which now belong to the new file."""
        if self._conn is None:
            return
        try:
            self._conn.close()
        except sqlite3.Error:
            pass
        self._conn = None

    def _ensure_open(self) -> None:
        """(Re)connect when there is no connection, or when another process set the file this
        one uses aside and a new file now lies at the path."""
        if self._conn is not None and self._path_file() == self._file:
            return
        self._disconnect()
        self._open()

    def _set_aside(self, exc: BaseException) -> None:
        """Move a corrupt database (and its -wal/-shm) aside under a timestamped name, never
        deleting it, unless another process already did (the path names another file)."""
        from filelock import FileLock

        with FileLock(str(self.path) + ".lock"):  # one process moves it; the others see that
            if self._file is None or self._path_file() != self._file:
                self._disconnect()
                return  # already moved aside (and maybe replaced) by another process
            stamp = time.strftime("%Y%m%d-%H%M%S")
            target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
            n = 1
            while target.exists():
                n += 1
                target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
            os.replace(self.path, target)
            for suffix in ("-wal", "-shm"):
                side = self.path.with_name(self.path.name + suffix)
                if side.exists():
                    os.replace(side, target.with_name(target.name + suffix))
            self._disconnect()  # after the move: the copy keeps its WAL as it was
        log.warning(
            "response cache %s is corrupt (%s); moved it aside to %s and started an empty cache "
            "(only cached answers are lost; the copy can be inspected or deleted)",
            self.path,
            exc,
            target,
        )

    def _locked_retry(self, fn: Callable[[], T], attempts: int = 8) -> T:
        """SQLite's busy timeout covers most contention; this covers the rest (e.g. a lock
        upgrade deadlock, where SQLite gives up at once instead of waiting). A corrupt file is
        set aside once and `fn` runs again on a fresh one."""
        with self._lock:
            recovered = False
            for attempt in range(attempts):
                try:
                    self._ensure_open()
                    return fn()
                except sqlite3.DatabaseError as exc:
                    if self._conn is not None and self._conn.in_transaction:
                        try:
                            self._conn.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
                    if is_corrupt(exc):
                        if not recovered:
                            recovered = True
                            self._set_aside(exc)
                            continue
                        raise sqlite3.DatabaseError(
                            f"response cache {self.path}: {exc}, again after the corrupt file "
                            "was set aside; check the disk, or set slm.cache=false"
                        ) from exc
                    msg = str(exc).lower()
                    retry = isinstance(exc, sqlite3.OperationalError) and (
                        "locked" in msg or "busy" in msg
                    )
                    if not retry or attempt == attempts - 1:
                        raise
                    time.sleep(min(2.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.5))
        raise AssertionError("unreachable")

    def get_many(self, keys: Iterable[str]) -> dict[str, Answer]:
        """Rows for the keys that are present; touches their last access time (LRU)."""
        keys = list(dict.fromkeys(keys))

        def run() -> dict[str, Answer]:
            found: dict[str, Answer] = {}
            for s in range(0, len(keys), 500):
                part = keys[s : s + 500]
                marks = ",".join("?" * len(part))
                rows = self._conn.execute(
                    "SELECT key, text, prompt_tokens, generated_tokens, seconds FROM responses"
                    f" WHERE key IN ({marks})",
                    part,
                ).fetchall()
                for k, text, pt, gt, sec in rows:
                    found[k] = Answer(text, pt, gt, sec, cached=True)
            if found:
                now = time.time()
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.executemany(
                    "UPDATE responses SET last_access = ? WHERE key = ?",
                    [(now, k) for k in found],
                )
                self._conn.execute("COMMIT")
            return found

        return self._locked_retry(run)

    def put_many(self, identity: str, items: dict[str, Answer]) -> None:
        """Insert (or replace) answers, then evict the least recently used rows over the cap."""
        if not items:
            return
        now = time.time()
        rows = [
            (k, identity, a.text, a.prompt_tokens, a.generated_tokens, a.seconds, now, now)
            for k, a in items.items()
        ]

        def run() -> None:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.executemany(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows
            )
            (count,) = self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()
            if count > self.max_entries:
                self._conn.execute(
                    "DELETE FROM responses WHERE key IN"
                    " (SELECT key FROM responses ORDER BY last_access ASC LIMIT ?)",
                    (count - self.max_entries,),
                )
            self._conn.execute("COMMIT")

        self._locked_retry(run)

    def __len__(self) -> int:
        return self._locked_retry(
            lambda: self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        )

    def close(self) -> None:
        with self._lock:
            self._disconnect()


class CachedConsultant(Consultant):
    """Wraps any consultant; greedy answers come from / go to a ResponseStore."""

    def __init__(
        self,
        inner: Consultant,
        path: str | os.PathLike,
        max_entries: int = DEFAULT_MAX_ENTRIES,
    ) -> None:
        self.inner = inner
        self.store = ResponseStore(path, max_entries)
        self.needs_expert = inner.needs_expert
        self._hits = 0
        self._misses = 0
        self._deduplicated = 0
        self._bypassed = 0

    @property
    def identity(self) -> str:
        return self.inner.identity

    def stats(self) -> dict[str, int]:
        """hits / misses count greedy queries; `deduplicated` counts misses answered by an
        identical query of the same batch; `bypassed` counts sampled (uncached) queries."""
        return dict(
            hits=self._hits,
            misses=self._misses,
            deduplicated=self._deduplicated,
            bypassed=self._bypassed,
        )

    def answer(self, queries: list[Query]) -> list[Answer]:
        identity = self.inner.identity
        keys = [cache_key(identity, q) if q.decoding.temperature == 0 else None for q in queries]
        t0 = time.perf_counter()
        found = self.store.get_many(k for k in keys if k is not None)
        n_hits = sum(k in found for k in keys if k is not None)
        lookup = (time.perf_counter() - t0) / max(1, n_hits)

        to_ask: list[int] = []  # indices sent to the backend
        first_of: dict[str, int] = {}  # key -> index of its first query in to_ask
        for i, k in enumerate(keys):
            if k is None:
                to_ask.append(i)
                self._bypassed += 1
            elif k in found:
                self._hits += 1
            elif k in first_of:
                self._misses += 1
                self._deduplicated += 1
            else:
                self._misses += 1
                first_of[k] = len(to_ask)
                to_ask.append(i)

        fresh = self.inner.answer([queries[i] for i in to_ask]) if to_ask else []
        if len(fresh) != len(to_ask):
            raise RuntimeError(
                f"{identity}: backend returned {len(fresh)} answers for {len(to_ask)} queries"
            )
        self.store.put_many(
            identity, {k: fresh[j] for k, j in first_of.items() if fresh[j].complete}
        )

        out: list[Answer] = []
        asked = dict(zip(to_ask, fresh, strict=True))
        for i, k in enumerate(keys):
            if i in asked:
                out.append(asked[i])
            elif k in found:
                out.append(dataclasses.replace(found[k], seconds=lookup))
            else:  # a duplicate of an earlier query in this batch
                out.append(dataclasses.replace(fresh[first_of[k]], seconds=0.0, cached=True))
        return out

    def close(self) -> None:
        self.store.close()
        self.inner.close()
