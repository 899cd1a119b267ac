"""Response cache: a Consultant wrapper that remembers greedy answers on disk, shareable by the
array tasks of a sweep on many nodes over a network filesystem, with no server and no lock that
correctness depends on.

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

Storage: a directory (`<paths.cache>/responses/`) of immutable files. SQLite's WAL mode, which the
cache used before, needs memory shared by every process using the database and does not work on a
network filesystem, whose locks are unreliable too; so the cache rests on three operations only
(docs/cluster.md, "What the results root must support"): rename within a directory is atomic,
exclusive create (link(2), O_EXCL) fails when the name exists, and fsync makes a file's bytes durable
before its name appears.

- Shards `shard-<host>-<pid>-<token>-<n>.jsonl`: the answers (and cache hits) of one process, written
  to a hidden temp file, fsynced, then renamed into place; they end with a line count and a sha256
  of the lines. A reader sees a shard whole or not at all; a writer killed mid-write leaves only a
  `.tmp-*` file, which readers never open and compaction removes an hour later. A process
  publishes its new answers at most every `publish_seconds` (5 s), at once when it goes over the
  cap, and when it closes (or exits); until then they serve its own lookups only.
- Indexes `index-<generation>.sqlite`: compacted snapshots, opened read-only as immutable SQLite
  files (no locks, no WAL, no shared memory). A reader uses the highest generation plus the shards
  that index does not list as folded in; a shard that vanishes while it reads was folded into a
  newer index, which it then reads.
- Compaction: a process that sees more than `max_entries` entries or more than `max_shards` shards
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
`slm.cache_max_entries` only warns when it differs).

An existing SQLite cache (`<paths.cache>/responses.sqlite`, written before this layout) is
migrated on first use: the first store that sees it folds its rows into a new index, reading the
file read-only and never changing it (a downgrade still finds it), and records the file's size and
time so that it is folded again only if an old version of the code writes to it later.

A corrupt file (a shard whose checksum or JSON is wrong, an index or old SQLite file that is not
a database) is never deleted and never fatal: it is renamed to `<name>.corrupt-<timestamp>`, a
warning names both files, and the cache goes on without it (only cached answers are lost).
Files of a newer format version are left alone (a store that finds a newer index reads the older
ones and compacts no more).

Answers served from the cache have `cached=True`, the token counts of the original generation
(what the answer cost when it was made) and `seconds` = the time the lookup took."""

from __future__ import annotations

import atexit
import dataclasses
import errno
import hashlib
import json
import logging
import os
import re
import secrets
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from benchmark.consultants.base import Answer, Consultant, Decoding, Query, scores_choices

DEFAULT_MAX_ENTRIES = 100_000
SETTINGS = "settings.json"  # the cache's own configuration, shared by every process using it
DEFAULT_PUBLISH_SECONDS = 5.0
DEFAULT_MAX_SHARDS = 1024
DEFAULT_CLAIM_STALE_SECONDS = 120.0
TOUCH_PUBLISH_SECONDS = 60.0  # a process that only hits writes its hit times this often
TMP_STALE_SECONDS = 3600.0  # a temp file this much older than a new index is a killed writer's
LEGACY_NAME = "responses.sqlite"
SHARD_FORMAT, INDEX_FORMAT, FORMAT_VERSION = "ask-response-shard", "ask-response-index", 1
log = logging.getLogger(__name__)
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26
_SHARD_RE = re.compile(r"^shard-[A-Za-z0-9_.-]+\.jsonl$")
_INDEX_RE = re.compile(r"^index-(\d{12})\.sqlite$")
_KEY_RE = re.compile(r"^[0-9a-f]{64}$")
_CLAIM = "compact.claim"
_COLUMNS = "key, identity, text, prompt_tokens, generated_tokens, seconds, created, last_access"
_INDEX_SCHEMA = """
CREATE TABLE responses (
    key TEXT PRIMARY KEY,
    identity TEXT NOT NULL,
    text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    generated_tokens INTEGER NOT NULL,
    seconds REAL NOT NULL,
    created REAL NOT NULL,
    last_access REAL NOT NULL
);
CREATE TABLE folded (name TEXT PRIMARY KEY);
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_UPSERT = (
    f"INSERT INTO responses ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT(key) DO UPDATE SET last_access = max(last_access, excluded.last_access)"
)


# Decoding fields that only act when sampling: a greedy key leaves them out, so it is the key the
# code made before they existed (tests/test_decoding.py pins one) and no cached answer is lost.
SAMPLING_ONLY = ("top_p", "top_k", "seed")


def decoding_key(decoding: Decoding) -> dict:
    """The decoding fields that enter the key: all of them, less SAMPLING_ONLY when greedy."""
    data = dataclasses.asdict(decoding)
    for name, default in (("mode", "generate"), ("source", "config")):
        if data[name] == default:  # the default: keys made before the field existed still hit
            data.pop(name)
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


class Row(NamedTuple):
    """One cached answer."""

    identity: str
    text: str
    prompt_tokens: int
    generated_tokens: int
    seconds: float
    created: float

    def answer(self) -> Answer:
        return Answer(self.text, self.prompt_tokens, self.generated_tokens, self.seconds, True)


class CorruptFile(ValueError):
    """A published file whose content is not what its writer wrote."""


class NewerFormat(ValueError):
    """A file a newer version of this code wrote: left alone, never set aside or deleted."""


def encode_shard(rows: dict[str, Row], touches: dict[str, float], header: dict) -> bytes:
    """A shard's bytes: a header line, one line per entry, one line of hit times, and a trailer
    with the number of lines before it and their sha256."""
    lines = [json.dumps({"format": SHARD_FORMAT, "version": FORMAT_VERSION, **header})]
    for key, r in rows.items():
        entry = {"k": key, "i": r.identity, "t": r.text, "p": r.prompt_tokens}
        entry.update(g=r.generated_tokens, s=r.seconds, c=r.created)
        lines.append(json.dumps(entry, separators=(",", ":")))
    if touches:
        lines.append(json.dumps({"touch": touches}, separators=(",", ":")))
    body = ("\n".join(lines) + "\n").encode("utf-8")
    trailer = {"end": len(lines), "sha256": hashlib.sha256(body).hexdigest()}
    return body + (json.dumps(trailer) + "\n").encode("utf-8")


def decode_shard(data: bytes) -> tuple[dict[str, Row], dict[str, float]] | None:
    """(entries, hit times) of a shard; None for a format this code does not know (a newer
    version's); CorruptFile when the bytes are not what a writer published."""
    head, sep, last = data.rstrip(b"\n").rpartition(b"\n")
    try:
        trailer = json.loads(last)
        body = head + sep
        if hashlib.sha256(body).hexdigest() != trailer["sha256"]:
            raise CorruptFile("checksum mismatch")
        lines = body.decode("utf-8").splitlines()
        if len(lines) != trailer["end"]:
            raise CorruptFile(f"{len(lines)} lines, the trailer says {trailer['end']}")
        header = json.loads(lines[0])
        if header.get("format") != SHARD_FORMAT:
            raise CorruptFile(f"not a response shard: {lines[0][:80]!r}")
        if header.get("version") != FORMAT_VERSION:
            return None
        rows: dict[str, Row] = {}
        touches: dict[str, float] = {}
        for line in lines[1:]:
            item = json.loads(line)
            if "touch" in item:
                touches.update({str(k): float(t) for k, t in item["touch"].items()})
                continue
            key = item["k"]
            if not isinstance(key, str) or not _KEY_RE.match(key):
                raise CorruptFile(f"bad key {key!r}")
            row = Row(
                str(item["i"]),
                str(item["t"]),
                int(item["p"]),
                int(item["g"]),
                float(item["s"]),
                float(item["c"]),
            )
            _merge(rows, key, row)
    except CorruptFile:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise CorruptFile(f"{type(exc).__name__}: {exc}") from exc
    return rows, touches


def _merge(rows: dict[str, Row], key: str, row: Row) -> None:
    """Two answers for one key (two processes asked at once): keep the earlier, whatever order
    the shards are read in, so every reader serves the same one."""
    old = rows.get(key)
    if old is None or (row.created, row.text) < (old.created, old.text):
        rows[key] = row


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:64] or "host"


def _uri(path: Path, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"{path.absolute().as_uri()}?{query}"


def write_file_atomic(directory: Path, name: str, data: bytes) -> None:
    """`directory/name` with `data`, all or nothing: a hidden temp file beside it (exclusive
    create), fsync, rename."""
    tmp = directory / f".tmp-{name}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, directory / name)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def publish_exclusive(tmp: Path, final: Path) -> bool:
    """Give the complete file `tmp` the name `final` unless that name exists; True if this call
    did. link(2) is atomic and exclusive on local and network filesystems; on NFS a retransmitted
    link can report EEXIST after it succeeded, so a link count of 2 also means success (the
    method open(2)'s manual gives for lock files on NFS)."""
    try:
        os.link(tmp, final)
        return True
    except FileExistsError:
        try:
            return os.stat(tmp).st_nlink == 2
        except OSError:
            return False
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
    # no hard links on this filesystem: a rename that is not exclusive. Losing a race then loses
    # the other index's newest entries (cache misses), never an answer: each index is whole.
    log.warning("%s: no hard links here; indexes are published by rename", final.parent)
    if final.exists():
        return False
    os.replace(tmp, final)
    return True


def _set_aside(path: Path, why: object) -> None:
    """Rename a corrupt file to `<name>.corrupt-<timestamp>` (never deleted) with a warning;
    nothing if another process already did."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    try:
        os.replace(path, target)
    except FileNotFoundError:
        return
    log.warning(
        "response cache file %s is corrupt (%s); moved it aside to %s and went on without it "
        "(only cached answers are lost; the copy can be inspected or deleted)",
        path,
        why,
        target,
    )


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


class ResponseStore:
    """The cache's files in `directory` (see the module docstring), safe for concurrent processes
    on one or many hosts. `legacy`: an SQLite cache of the code before, migrated on first use.
    `max_entries`: None for the cache's own cap (`cache_cap`); a number caps what this store
    compacts to, evicting any process's entries (tests, tools).

    A path that names an existing file is taken for such a SQLite cache (`responses.sqlite`): the
    store then lives beside it, in the directory of the same name without the suffix."""

    def __init__(
        self,
        directory: str | os.PathLike,
        max_entries: int | None = None,
        *,
        legacy: str | os.PathLike | None = None,
        publish_seconds: float = DEFAULT_PUBLISH_SECONDS,
        max_shards: int = DEFAULT_MAX_SHARDS,
        claim_stale_seconds: float = DEFAULT_CLAIM_STALE_SECONDS,
    ) -> None:
        directory = Path(directory)
        if directory.is_file():  # an SQLite cache of the code before
            legacy, directory = directory, directory.with_name(directory.stem)
        if max_entries is None:
            max_entries = cache_cap(directory)
        _check_cap(max_entries, "response cache")
        self.directory = directory
        self.legacy = Path(legacy) if legacy is not None else None
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
        self._legacy_done = ""  # signature of the SQLite cache folded into the index
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
            self._migrate()
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
            for name in sorted(n for n in names if _SHARD_RE.match(n)):
                if name in self._loaded or name in self._folded or name in self._foreign:
                    continue
                try:
                    decoded = decode_shard((self.directory / name).read_bytes())
                except FileNotFoundError:
                    vanished = True  # folded into an index newer than the one listed
                    continue
                except CorruptFile as exc:
                    _set_aside(self.directory / name, exc)
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
                    _merge(self._rows, key, row)
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
        gens = sorted(((int(m[1]), n) for n in names if (m := _INDEX_RE.match(n))), reverse=True)
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
                _set_aside(path, exc)
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
            self._legacy_done = meta.get("legacy", "")
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
        conn = sqlite3.connect(_uri(path, mode="ro", immutable="1"), uri=True,
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
        self._folded, self._legacy_done = frozenset(), ""

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
                    _set_aside(path, exc)
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
        name = f"shard-{_host()}-{os.getpid()}-{self._token}-{self._seq:06d}.jsonl"
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
            _merge(self._rows, key, row)
            self._touch(self._seen_touches, key, row.created)
        for key, t in self._touches.items():
            self._touch(self._seen_touches, key, t)
        self._pending, self._touches = {}, {}
        self._last_publish = time.monotonic()
        if compact:
            self._maybe_compact()

    # ------------------------------------------------------------------------------ compaction
    def _seen(self) -> int:
        """At least the number of entries this process sees (keys in both the index and a shard
        count twice: compacting a little early costs nothing)."""
        return self._index_rows + len(self._rows) + len(self._pending)

    def _maybe_compact(self) -> None:
        over = self._seen() > self.max_entries or len(self._loaded) > self.max_shards
        if over or self._legacy_pending():
            self._compact()

    def _legacy_signature(self) -> str:
        """Identity, size and time of the SQLite cache file and its WAL ('' when there is none):
        what changes when the code before writes to it."""
        if self.legacy is None:
            return ""
        parts = []
        for path in (self.legacy, self.legacy.with_name(self.legacy.name + "-wal")):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                if path == self.legacy:
                    return ""
                continue
            parts.append(f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}")
        return "/".join(parts)

    def _legacy_pending(self) -> bool:
        sig = self._legacy_signature()
        return bool(sig) and sig != self._legacy_done

    def _read_legacy(self) -> list[tuple]:
        """Every row of the SQLite cache, read-only (its WAL included); [] when unreadable (with
        a warning; a corrupt file is set aside)."""
        assert self.legacy is not None
        for params in ({"mode": "ro"}, {"mode": "ro", "immutable": "1"}):
            try:
                conn = sqlite3.connect(_uri(self.legacy, **params), uri=True, timeout=30)
                try:
                    return conn.execute(f"SELECT {_COLUMNS} FROM responses").fetchall()
                finally:
                    conn.close()
            except sqlite3.Error as exc:
                if is_corrupt(exc):
                    for suffix in ("-wal", "-shm"):
                        side = self.legacy.with_name(self.legacy.name + suffix)
                        if side.exists():
                            _set_aside(side, "belongs to a corrupt database")
                    _set_aside(self.legacy, exc)
                    return []
                error = exc  # read-only access to a WAL database may need its -shm: try immutable
        log.warning(
            "response cache: cannot read the SQLite cache %s (%s); not migrated (tried again "
            "when it changes)",
            self.legacy,
            error,
        )
        return []

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

    def _migrate(self) -> None:
        """First use of a SQLite cache of the code before: fold it into an index before the
        first lookup, or wait while another process does (a claim older than
        claim_stale_seconds is broken, so this waits that long at most)."""
        deadline = time.monotonic() + self.claim_stale_seconds + 5.0
        while self._legacy_pending() and not self._compact():
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
            self._refresh()

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
        tmp = self.directory / f".tmp-index-{_host()}-{os.getpid()}-{self._token}.sqlite"
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
                    _set_aside(self._index_path(old_gen), exc)  # the index it read from
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
        """Index N (if any) + the shards read + this process's unpublished answers and hits (+ a
        SQLite cache not yet migrated), less the least recently used entries over the cap,
        written to `tmp` and fsynced."""
        mem = sqlite3.connect("file::memory:", uri=True)
        try:
            mem.executescript(_INDEX_SCHEMA)
            if self._index_id is not None:
                old = self._index_path(self._index_id[0])
                mem.execute("ATTACH DATABASE ? AS old", (_uri(old, mode="ro", immutable="1"),))
                mem.execute(f"INSERT INTO responses SELECT {_COLUMNS} FROM old.responses")
                mem.commit()
                mem.execute("DETACH DATABASE old")
            legacy = self._legacy_signature()
            if legacy and legacy != self._legacy_done:
                mem.executemany(_UPSERT, self._read_legacy())
                legacy = self._legacy_signature() and legacy  # set aside: nothing to record
            else:
                legacy = self._legacy_done if legacy else ""
            rows = {**self._rows}
            for key, row in self._pending.items():
                _merge(rows, key, row)
            mem.executemany(_UPSERT, ((k, *r, r.created) for k, r in rows.items()))
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
                "legacy": legacy,
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
            m = _INDEX_RE.match(name)
            try:
                if m and old_gen is not None and int(m[1]) < old_gen:
                    path.unlink()
                elif name.startswith(".tmp-"):
                    if os.stat(path).st_mtime < newest - TMP_STALE_SECONDS:
                        path.unlink()
            except FileNotFoundError:
                pass

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
            if _INDEX_RE.match(name) or _SHARD_RE.match(name):
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


class CachedConsultant(Consultant):
    """Wraps any consultant; greedy answers come from / go to a ResponseStore."""

    def __init__(
        self,
        inner: Consultant,
        path: str | os.PathLike,
        max_entries: int | None = None,
        **store_options,
    ) -> None:
        self.inner = inner
        self.store = ResponseStore(path, max_entries, **store_options)
        self.needs_expert = inner.needs_expert
        self.shards_episodes = inner.shards_episodes
        self._hits = 0
        self._misses = 0
        self._deduplicated = 0
        self._bypassed = 0

    @property
    def identity(self) -> str:
        return self.inner.identity

    def stats(self) -> dict[str, int]:
        """Greedy queries: `hits` were answered without the backend (`Answer.cached`, as the
        episodes count them): from the store, or, `deduplicated` of them, as a copy of an
        identical query earlier in the same batch; `misses` were asked of the backend.
        `bypassed` counts sampled and choice-scored (uncached) queries."""
        return dict(
            hits=self._hits,
            misses=self._misses,
            deduplicated=self._deduplicated,
            bypassed=self._bypassed,
        )

    def answer(self, queries: list[Query]) -> list[Answer]:
        identity = self.inner.identity
        # the model's own sampling in place of slm.decoding.source=model: a model whose
        # generation config is greedy has its answers cached, one that samples does not
        queries = self.inner.resolve_decoding(queries)
        # sampled answers are never cached; nor are choice-scored ones, whose per-action
        # probabilities the store has no place for (and which cost one forward pass anyway)
        keys = [
            cache_key(identity, q)
            if q.decoding.temperature == 0 and not scores_choices(q)
            else None
            for q in queries
        ]
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
                self._hits += 1
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


def main(argv: list[str] | None = None) -> int:
    """`python -m benchmark.consultants.cache <dir> [--max-entries N]`: show or set the cap of
    the response cache in <dir> (`<paths.cache>/responses`)."""
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m benchmark.consultants.cache", description=main.__doc__
    )
    p.add_argument("directory", type=Path, help="the cache directory, <paths.cache>/responses")
    p.add_argument("--max-entries", type=int, default=None, help="the cap for every job using it")
    args = p.parse_args(argv)
    try:
        if args.max_entries is not None:
            set_cache_cap(args.directory, args.max_entries)
        print(f"{args.directory}: max_entries {cache_cap(args.directory)}")
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
