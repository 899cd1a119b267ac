"""Compaction of the response cache (a mixin of ResponseStore): folding shards into the next index
generation and evicting down to the cap.

Compaction: a process that sees more than `max_entries` entries or more than `max_shards` shards
builds generation N+1 from index N and the shards it read, and publishes it with link(2) to
`index-<N+1>.sqlite`, which fails when another process published N+1 first: exactly one index per
generation, each built from the one before. Only after its index is visible does the winner
delete the shards it folded in (and indexes older than N, keeping N for readers that have it
open). A `compact.claim` file, created with O_EXCL, keeps processes from compacting at the same
time; it only saves work: losing the race for it, or a claim left by a killed process (broken
after `claim_stale_seconds` unchanged), can cost time, never an entry or a wrong answer.

Size: compaction evicts the least recently used entries (by last hit, else by creation) down to
`max_entries - max_entries // 10` (default cap 100,000, tens of MB for short answers); hits are
recorded in memory and written with the process's next shard. Between compactions the entries a
reader sees exceed the cap by at most what was published since the last one. The cap is the
cache's own setting, in its `settings.json` (`{"max_entries": N}`; absent: the default), set with
`python -m benchmark.consultants.cache <dir> --max-entries N`: every process sharing the cache
evicts by the same cap, so one job's setting can never evict the entries of the others (a job's
`slm.cache_max_entries` only warns when it differs)."""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import time
from pathlib import Path

from benchmark.consultants.cache_files import (
    COLUMNS,
    FORMAT_VERSION,
    INDEX_FORMAT,
    INDEX_RE,
    INDEX_SCHEMA,
    UPSERT,
    host_name,
    is_corrupt,
    merge_row,
    publish_exclusive,
    set_aside,
    sqlite_uri,
)

TMP_STALE_SECONDS = 3600.0  # a temp file this much older than a new index is a killed writer's
log = logging.getLogger(__name__)
_CLAIM = "compact.claim"


class Compaction:
    """Compaction for ResponseStore (a mixin); the host holds the store's state (`directory`,
    `max_entries`, `max_shards`, `claim_stale_seconds`, the index in use, the shards
    read and this process's unpublished answers) and provides `_refresh`, `_publish`,
    `_drop_index` and `_touch`."""

    def _seen(self) -> int:
        """At least the number of entries this process sees (keys in both the index and a shard
        count twice: compacting a little early costs nothing)."""
        return self._index_rows + len(self._rows) + len(self._pending)

    def _maybe_compact(self) -> None:
        if self._seen() > self.max_entries or len(self._loaded) > self.max_shards:
            self._compact()

    def _claim(self) -> bool:
        """Create `compact.claim` (O_EXCL); False while another process holds it. A claim that
        stays unchanged for claim_stale_seconds (measured here, so clock skew between hosts does
        not matter) is a killed compactor's: it is broken."""
        path = self.directory / _CLAIM
        for _ in range(2):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue
                ident = (st.st_ino, st.st_size, st.st_mtime_ns)
                now = time.monotonic()
                if self._claim_seen is None or self._claim_seen[0] != ident:
                    self._claim_seen = (ident, now)
                if now - self._claim_seen[1] < self.claim_stale_seconds:
                    return False
                stale = self.directory / f".tmp-stale-claim-{self._token}"
                try:
                    os.replace(path, stale)  # one process wins the rename, the others retry
                    stale.unlink(missing_ok=True)
                except FileNotFoundError:
                    pass
                log.warning("response cache %s: broke a stale compaction claim", self.directory)
                continue
            with os.fdopen(fd, "w") as f:
                f.write(f"{socket.gethostname()} {os.getpid()} {time.time()}\n")
            self._claim_ino = os.stat(path).st_ino
            return True
        return False

    def _unclaim(self) -> None:
        path = self.directory / _CLAIM
        try:
            if os.stat(path).st_ino == self._claim_ino:  # not a claim that replaced a broken one
                path.unlink()
        except FileNotFoundError:
            pass

    def _index_path(self, gen: int) -> Path:
        return self.directory / f"index-{gen:012d}.sqlite"

    def compact(self) -> bool:
        """Fold every shard into a new index, evicting down to the cap; False when another
        process is compacting or published the next generation first."""
        with self._lock:
            self._publish(compact=False)
            return self._compact()

    def _compact(self) -> bool:
        """Claim, build, publish, delete what the new index holds; never raises for a file
        problem (a compaction that fails leaves the cache as it was, with a warning)."""
        if self._newer_index:
            return False  # a newer version of the code compacts this cache
        try:
            if not self._claim():
                return False
        except OSError as exc:
            log.warning("response cache %s: cannot compact (%s)", self.directory, exc)
            return False
        tmp = self.directory / f".tmp-index-{host_name()}-{os.getpid()}-{self._token}.sqlite"
        try:
            self._refresh()
            if self._newer_index:
                return False
            gen = (self._index_id[0] if self._index_id else 0) + 1
            folded = sorted(self._loaded)
            garbage = sorted(self._garbage)
            old_gen = self._index_id[0] if self._index_id else None
            try:
                self._build_index(tmp, gen, folded)
                if not publish_exclusive(tmp, self._index_path(gen)):
                    return False  # another process published generation `gen` first
            except (sqlite3.Error, OSError) as exc:
                if old_gen is not None and not self._index_path(old_gen).exists():
                    return False  # a newer index replaced the one this read: no failure
                if isinstance(exc, sqlite3.Error) and is_corrupt(exc) and old_gen is not None:
                    self._drop_index()
                    set_aside(self._index_path(old_gen), exc)  # the index it read from
                else:
                    log.warning("response cache %s: compaction failed (%s)", self.directory, exc)
                return False
            for name in folded + garbage:
                (self.directory / name).unlink(missing_ok=True)
            self._clean(old_gen, self._index_path(gen))
            self._pending, self._touches = {}, {}  # they are in the index
            self._refresh()
            return True
        finally:
            tmp.unlink(missing_ok=True)
            self._unclaim()

    def _build_index(self, tmp: Path, gen: int, folded: list[str]) -> None:
        """Index N (if any) + the shards read + this process's unpublished answers and hits, less
        the least recently used entries over the cap, written to `tmp` and fsynced."""
        mem = sqlite3.connect("file::memory:", uri=True)
        try:
            mem.executescript(INDEX_SCHEMA)
            if self._index_id is not None:
                old = self._index_path(self._index_id[0])
                mem.execute(
                    "ATTACH DATABASE ? AS old", (sqlite_uri(old, mode="ro", immutable="1"),)
                )
                mem.execute(f"INSERT INTO responses SELECT {COLUMNS} FROM old.responses")
                mem.commit()
                mem.execute("DETACH DATABASE old")
            rows = {**self._rows}
            for key, row in self._pending.items():
                merge_row(rows, key, row)
            mem.executemany(UPSERT, ((k, *r, r.created) for k, r in rows.items()))
            touches = dict(self._seen_touches)
            for key, t in self._touches.items():
                self._touch(touches, key, t)
            mem.executemany(
                "UPDATE responses SET last_access = max(last_access, ?) WHERE key = ?",
                ((t, k) for k, t in touches.items()),
            )
            (count,) = mem.execute("SELECT COUNT(*) FROM responses").fetchone()
            if count > self.max_entries:
                keep = self.max_entries - self.max_entries // 10
                mem.execute(
                    "DELETE FROM responses WHERE key IN (SELECT key FROM responses"
                    " ORDER BY last_access ASC, key ASC LIMIT ?)",
                    (count - keep,),
                )
                count = keep
            meta = {
                "format": INDEX_FORMAT,
                "version": str(FORMAT_VERSION),
                "generation": str(gen),
                "rows": str(count),
                "created": str(time.time()),
                "writer": f"{socket.gethostname()} {os.getpid()}",
            }
            mem.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
            mem.executemany("INSERT INTO folded VALUES (?)", ((n,) for n in folded))
            mem.commit()
            mem.execute("VACUUM INTO ?", (str(tmp),))
        finally:
            mem.close()
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _clean(self, old_gen: int | None, new_index: Path) -> None:
        """Delete indexes older than the one the new one was built from, and temp files of
        killed writers (an hour older than the new index, by the filesystem's clock)."""
        try:
            newest = os.stat(new_index).st_mtime
        except FileNotFoundError:
            return
        for name in os.listdir(self.directory):
            path = self.directory / name
            m = INDEX_RE.match(name)
            try:
                if m and old_gen is not None and int(m[1]) < old_gen:
                    path.unlink()
                elif name.startswith(".tmp-"):
                    if os.stat(path).st_mtime < newest - TMP_STALE_SECONDS:
                        path.unlink()
            except FileNotFoundError:
                pass
