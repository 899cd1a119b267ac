"""The response cache: keys, hits, dedup, LRU cap, concurrency safety (a SIGKILLed writer)."""

from __future__ import annotations

import dataclasses
import logging
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmark.consultants.base import Answer, Consultant, Decoding, Query
from benchmark.consultants.cache import CachedConsultant, ResponseStore, cache_key
from benchmark.consultants.hf import HFConsultant
from benchmark.consultants.tiny import build_tiny

REPO = Path(__file__).resolve().parents[1]


class Counting(Consultant):
    """A real (trivial) backend that records what reaches it: answers echo the last message."""

    def __init__(self, name: str = "echo") -> None:
        self.name = name
        self.seen: list[str] = []

    @property
    def identity(self) -> str:
        return self.name

    def answer(self, queries: list[Query]) -> list[Answer]:
        self.seen += [q.messages[-1]["content"] for q in queries]
        return [Answer(f"{self.name}:{q.messages[-1]['content']}", 5, 2, 0.1) for q in queries]


def q(text: str, **decoding) -> Query:
    return Query(
        messages=[{"role": "user", "content": text}],
        actions=("FORWARD",),
        render_answer=lambda a, r: a,
        decoding=Decoding(**decoding),
    )


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    import torch

    threads = torch.get_num_threads()  # 1 thread: OpenMP threads thrash on a shared 2-core CPU
    base = tmp_path_factory.getbasetemp()
    yield tuple(
        HFConsultant(path=str(build_tiny(base / f"tiny-qwen3-s{s}", s)), num_threads=1)
        for s in (0, 1)
    )
    torch.set_num_threads(threads)


def test_hit_returns_identical_text_and_counts(tmp_path, tiny_pair) -> None:
    c = CachedConsultant(tiny_pair[0], tmp_path / "r.sqlite")
    batch = [q("The wall is ahead. Action?"), q("The goal is north. Action?")]
    first = c.answer(batch)
    assert c.stats()["hits"] == 0 and c.stats()["misses"] == 2
    t0 = time.perf_counter()
    second = c.answer(batch)
    hit_ms = (time.perf_counter() - t0) * 1000
    print(f"cache hit latency: {hit_ms:.2f} ms for a batch of 2")
    assert [a.text for a in second] == [a.text for a in first]
    assert [a.generated_tokens for a in second] == [a.generated_tokens for a in first]
    assert all(a.cached for a in second) and not any(a.cached for a in first)
    assert c.stats()["hits"] == 2 and c.stats()["misses"] == 2
    # a fresh process (new wrapper, same file) sees the same entries
    again = CachedConsultant(tiny_pair[0], tmp_path / "r.sqlite")
    assert [a.text for a in again.answer(batch)] == [a.text for a in first]
    assert again.stats()["hits"] == 2


def test_two_tiny_models_never_share_entries(tmp_path, tiny_pair) -> None:
    m0, m1 = tiny_pair
    assert m0.identity != m1.identity
    c0 = CachedConsultant(m0, tmp_path / "r.sqlite")
    c1 = CachedConsultant(m1, tmp_path / "r.sqlite")
    query = q("Which way to the door?")
    c0.answer([query])
    c1.answer([query])
    assert c1.stats() == dict(hits=0, misses=1, deduplicated=0, bypassed=0)
    assert len(c0.store) == 2
    assert cache_key(m0.identity, query) != cache_key(m1.identity, query)


def test_key_covers_every_decoding_field_and_messages() -> None:
    base = cache_key("m", q("x"))
    variants = [
        q("y"),
        q("x", max_new_tokens=17),
        q("x", enable_thinking=True),
        q("x", thinking_budget=10),
        q("x", temperature=0.5),
    ]
    keys = {cache_key("m", v) for v in variants}
    assert base not in keys and len(keys) == len(variants)
    assert cache_key("m", q("x")) == base


def test_dedup_within_batch_and_sampling_bypass(tmp_path) -> None:
    inner = Counting()
    c = CachedConsultant(inner, tmp_path / "r.sqlite")
    out = c.answer([q("a"), q("b"), q("a"), q("a")])
    assert inner.seen == ["a", "b"]
    assert [a.text for a in out] == ["echo:a", "echo:b", "echo:a", "echo:a"]
    assert [a.cached for a in out] == [False, False, True, True]
    assert c.stats() == dict(hits=0, misses=4, deduplicated=2, bypassed=0)
    sampled = [q("a", temperature=0.7), q("a", temperature=0.7)]
    c.answer(sampled)
    c.answer(sampled)
    assert inner.seen[2:] == ["a"] * 4  # never served from / written to the cache
    assert c.stats()["bypassed"] == 4 and len(c.store) == 2


def test_lru_cap_evicts_least_recently_used(tmp_path) -> None:
    inner = Counting()
    c = CachedConsultant(inner, tmp_path / "r.sqlite", max_entries=3)
    for t in ["a", "b", "c"]:
        c.answer([q(t)])
        time.sleep(0.01)
    c.answer([q("a")])  # touch a: b is now the least recently used
    time.sleep(0.01)
    c.answer([q("d")])
    assert len(c.store) == 3
    inner.seen.clear()
    c.answer([q("a"), q("c"), q("d")])
    assert inner.seen == []  # all three still cached
    c.answer([q("b")])
    assert inner.seen == ["b"]  # b was evicted


_WRITER = """
import sys, time
from benchmark.consultants.base import Answer
from benchmark.consultants.cache import ResponseStore
store = ResponseStore(sys.argv[1], max_entries=10**6)
i = 0
while True:
    store.put_many("w", {f"k{i}-{j}": Answer("x" * 2000, 1, 1, 0.0) for j in range(50)})
    i += 1
"""


def test_killed_writer_leaves_readable_cache(tmp_path) -> None:
    db = tmp_path / "r.sqlite"
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(db)], cwd=REPO) for _ in range(2)
    ]
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            if db.exists():
                try:
                    with sqlite3.connect(db, timeout=5) as con:
                        if con.execute("SELECT COUNT(*) FROM responses").fetchone()[0] > 1000:
                            break
                except sqlite3.OperationalError:
                    pass  # table not created yet
            time.sleep(0.05)
        for w in writers:
            w.send_signal(signal.SIGKILL)  # mid-write, most likely inside a transaction
    finally:
        for w in writers:
            w.kill()
            w.wait()
    store = ResponseStore(db)
    n = len(store)
    assert n >= 1000 and n % 50 == 0  # only whole transactions are visible
    assert store._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store.put_many("after", {"k": Answer("fine")})
    assert store.get_many(["k"])["k"].text == "fine"


class Cutting(Counting):
    """Answers a query whose text contains "cut" with an incomplete answer (as a server whose
    reply was cut by max_tokens before any text)."""

    def answer(self, queries: list[Query]) -> list[Answer]:
        out = super().answer(queries)
        return [
            dataclasses.replace(a, text="", complete=False) if "cut" in a.text else a for a in out
        ]


def test_incomplete_answers_are_passed_on_but_never_stored(tmp_path) -> None:
    inner = Cutting()
    c = CachedConsultant(inner, tmp_path / "r.sqlite")
    out = c.answer([q("cut"), q("ok"), q("cut")])
    assert [(a.text, a.complete) for a in out] == [("", False), ("echo:ok", True), ("", False)]
    assert inner.seen == ["cut", "ok"] and len(c.store) == 1
    again = c.answer([q("cut"), q("ok")])
    assert inner.seen == ["cut", "ok", "cut"]  # the incomplete one is asked again
    assert [a.cached for a in again] == [False, True] and len(c.store) == 1


def _filled(path: Path) -> None:
    c = CachedConsultant(Counting("old"), path)
    c.answer([q(f"m{i}") for i in range(300)])
    c.close()


def _corrupt_copies(path: Path) -> list[Path]:
    """The database files set aside (each with its -wal/-shm, when it had them)."""
    found = path.parent.glob(path.name + ".corrupt-*")
    return sorted(p for p in found if not p.name.endswith(("-wal", "-shm")))


@pytest.mark.parametrize("where", ["whole-file", "pages-after-header"])
def test_corrupt_file_is_set_aside_and_an_empty_cache_starts(tmp_path, caplog, where) -> None:
    db = tmp_path / "responses.sqlite"
    _filled(db)
    size = db.stat().st_size
    garbage = random.Random(0).randbytes(size)
    with db.open("r+b") as f:  # random bytes over the file (or over all but its first page)
        offset = 0 if where == "whole-file" else 4096
        f.seek(offset)
        f.write(garbage[offset:])
    corrupt = db.read_bytes()
    inner = Counting("new")
    with caplog.at_level(logging.WARNING, logger="benchmark.consultants.cache"):
        c = CachedConsultant(inner, db)
        out = c.answer([q("m1"), q("m2")])  # a malformed page is found here at the latest
    assert [a.text for a in out] == ["new:m1", "new:m2"] and not any(a.cached for a in out)
    (copy,) = _corrupt_copies(db)
    assert copy.read_bytes() == corrupt  # kept, byte for byte, never deleted
    assert any(str(db) in r.getMessage() and str(copy) in r.getMessage() for r in caplog.records)
    assert c.answer([q("m1")])[0].cached and len(c.store) == 2  # the new cache works
    assert c.store._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    c.close()


def test_jobs_sharing_a_corrupt_cache_move_to_the_new_one(tmp_path) -> None:
    """Two jobs have the cache open when a third finds it corrupt and sets it aside: they
    follow the path to the new file on their next lookup, and closing their connections to the
    old file deletes nothing of the new one (SQLite removes `-wal`/`-shm` by name on close)."""
    db = tmp_path / "responses.sqlite"
    _filled(db)
    a, b = ResponseStore(db), ResponseStore(db)
    a.put_many("m", {"old": Answer("old")})
    db.write_bytes(b"\0garbage" * 1000)
    c = ResponseStore(db)  # a new job: sets the file aside, starts a new one
    c.put_many("m", {"k": Answer("from c")})
    assert len(_corrupt_copies(db)) == 1
    a.close()  # a connection to the old file, closed
    assert b.get_many(["k", "old"]) == {"k": Answer("from c", cached=True)}  # b follows
    assert len(_corrupt_copies(db)) == 1  # and moved nothing aside
    b.close()
    d = ResponseStore(db)  # c is still open: its writes live in the WAL, which must be intact
    assert d.get_many(["k"])["k"].text == "from c" and len(d) == 1
    assert d._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for s in (c, d):
        s.close()
