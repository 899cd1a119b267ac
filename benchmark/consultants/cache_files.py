"""The response cache's files and the filesystem operations they rest on: shard and index
formats, atomic and exclusive publication, and setting corrupt files aside.

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

A corrupt file (a shard whose checksum or JSON is wrong, an index or old SQLite file that is not
a database) is never deleted and never fatal: it is renamed to `<name>.corrupt-<timestamp>`, a
warning names both files, and the cache goes on without it (only cached answers are lost).
Files of a newer format version are left alone (a store that finds a newer index reads the older
ones and compacts no more)."""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import socket
import sqlite3
import time
from pathlib import Path
from typing import NamedTuple

from benchmark.consultants.base import Answer

SHARD_FORMAT, INDEX_FORMAT, FORMAT_VERSION = "ask-response-shard", "ask-response-index", 1
log = logging.getLogger(__name__)
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26
SHARD_RE = re.compile(r"^shard-[A-Za-z0-9_.-]+\.jsonl$")
INDEX_RE = re.compile(r"^index-(\d{12})\.sqlite$")
_KEY_RE = re.compile(r"^[0-9a-f]{64}$")
COLUMNS = "key, identity, text, prompt_tokens, generated_tokens, seconds, created, last_access"
INDEX_SCHEMA = """
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
UPSERT = (
    f"INSERT INTO responses ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT(key) DO UPDATE SET last_access = max(last_access, excluded.last_access)"
)


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
            merge_row(rows, key, row)
    except CorruptFile:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise CorruptFile(f"{type(exc).__name__}: {exc}") from exc
    return rows, touches


def merge_row(rows: dict[str, Row], key: str, row: Row) -> None:
    """Two answers for one key (two processes asked at once): keep the earlier, whatever order
    the shards are read in, so every reader serves the same one."""
    old = rows.get(key)
    if old is None or (row.created, row.text) < (old.created, old.text):
        rows[key] = row


def host_name() -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:64] or "host"


def sqlite_uri(path: Path, **params: str) -> str:
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


def set_aside(path: Path, why: object) -> None:
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
