"""The response cache: keys, hits, dedup, LRU cap, writers killed mid-write (a reader never sees
a partial entry), the SQLite cache of the code before, corrupt files. Many processes sharing one
cache, and whole evaluations with it on, off and shared: tests/consultants/test_cache_shared.py."""

from __future__ import annotations

import dataclasses
import hashlib
import json
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
from benchmark.consultants.cache import CachedConsultant, cache_key
from benchmark.consultants.cache_files import CorruptFile, Row, decode_shard, encode_shard
from benchmark.consultants.cache_store import ResponseStore
from benchmark.consultants.hf import HFConsultant

REPO = Path(__file__).resolve().parents[2]


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
def tiny_pair(tiny_model):
    import torch

    threads = torch.get_num_threads()  # 1 thread: OpenMP threads thrash on a shared 2-core CPU
    yield tuple(HFConsultant(path=str(tiny_model(seed=s)), num_threads=1) for s in (0, 1))
    torch.set_num_threads(threads)


def test_hit_returns_identical_text_and_counts(tmp_path, tiny_pair) -> None:
    c = CachedConsultant(tiny_pair[0], tmp_path / "r")
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
    c.store.close()  # publishes what it wrote
    # a fresh process (new wrapper, same directory) sees the same entries
    again = CachedConsultant(tiny_pair[0], tmp_path / "r")
    assert [a.text for a in again.answer(batch)] == [a.text for a in first]
    assert again.stats()["hits"] == 2


def test_two_tiny_models_never_share_entries(tmp_path, tiny_pair) -> None:
    m0, m1 = tiny_pair
    assert m0.identity != m1.identity
    c0 = CachedConsultant(m0, tmp_path / "r")
    c1 = CachedConsultant(m1, tmp_path / "r")
    query = q("Which way to the door?")
    c0.answer([query])
    c0.store.flush()
    c1.answer([query])
    assert c1.stats() == dict(hits=0, misses=1, deduplicated=0, bypassed=0)
    c1.store.flush()
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
    c = CachedConsultant(inner, tmp_path / "r")
    out = c.answer([q("a"), q("b"), q("a"), q("a")])
    assert inner.seen == ["a", "b"]
    assert [a.text for a in out] == ["echo:a", "echo:b", "echo:a", "echo:a"]
    assert [a.cached for a in out] == [False, False, True, True]
    assert c.stats() == dict(hits=2, misses=2, deduplicated=2, bypassed=0)  # copies are hits
    sampled = [q("a", temperature=0.7), q("a", temperature=0.7)]
    c.answer(sampled)
    c.answer(sampled)
    assert inner.seen[2:] == ["a"] * 4  # never served from / written to the cache
    assert c.stats()["bypassed"] == 4 and len(c.store) == 2


def test_lru_cap_evicts_least_recently_used(tmp_path) -> None:
    inner = Counting()
    c = CachedConsultant(inner, tmp_path / "r", max_entries=3)
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
    c = CachedConsultant(inner, tmp_path / "r")
    out = c.answer([q("cut"), q("ok"), q("cut")])
    assert [(a.text, a.complete) for a in out] == [("", False), ("echo:ok", True), ("", False)]
    assert inner.seen == ["cut", "ok"] and len(c.store) == 1
    again = c.answer([q("cut"), q("ok")])
    assert inner.seen == ["cut", "ok", "cut"]  # the incomplete one is asked again
    assert [a.cached for a in again] == [False, True] and len(c.store) == 1


def test_lru_cap_holds_in_the_index(tmp_path) -> None:
    """Over the cap, compaction evicts the least recently used down to 90% of it."""
    inner = Counting()
    c = CachedConsultant(inner, tmp_path / "r", max_entries=20)
    for i in range(60):
        c.answer([q(f"m{i}")])
        assert len(c.store) <= 20
    store = ResponseStore(tmp_path / "r", max_entries=20)
    assert len(store) <= 20 and len(list(tmp_path.glob("r/index-*.sqlite"))) <= 2
    assert "echo:m59" in {row.text for row in store.items().values()}  # the newest stay


# ---------------------------------------------------------------------- killed writers
def key(i: int, j: int) -> str:
    return hashlib.sha256(f"k{i}-{j}".encode()).hexdigest()


def text_of(i: int, j: int) -> str:
    return f"{i}-{j}-" + "x" * 2000


def assert_whole(entries: dict) -> None:
    """Every entry is one a writer made, in full, and only whole put_many batches are there
    (a writer publishes each batch of 50 as one shard here)."""
    batches: dict[int, set[int]] = {}
    for k, row in entries.items():
        i, j = (int(x) for x in row.text.split("-")[:2])
        assert k == key(i, j) and row.text == text_of(i, j) and row.identity == "w"
        batches.setdefault(i, set()).add(j)
    assert all(js == set(range(50)) for js in batches.values()), "a partial batch is visible"


_DYING_WRITER = """
import hashlib, os, signal, sys
from benchmark.consultants.base import Answer
from benchmark.consultants.cache_store import ResponseStore

directory, die_at, cap = sys.argv[1], sys.argv[2], int(sys.argv[3])
if die_at != "never":  # SIGKILL this process at the n-th call of os.<what>: a kill mid-write
    what, n = die_at.split(":")
    real, calls = getattr(os, what), [0]

    def dying(*args, **kw):
        calls[0] += 1
        if calls[0] == int(n):
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kw)

    setattr(os, what, dying)
store = ResponseStore(directory, max_entries=cap, publish_seconds=0, claim_stale_seconds=0.3)
start = int(sys.argv[4]) if len(sys.argv) > 4 else 0
for i in range(start, start + 10**6):
    batch = {hashlib.sha256(f"k{i}-{j}".encode()).hexdigest(): Answer(f"{i}-{j}-" + "x" * 2000, 1, 1)
             for j in range(50)}
    store.put_many("w", batch)
"""


def run_dying_writer(directory: Path, die_at: str, cap: int = 10**6) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _DYING_WRITER, str(directory), die_at, str(cap)],
        cwd=REPO,
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]


def test_writer_killed_while_writing_a_shard_leaves_nothing_visible(tmp_path) -> None:
    d = tmp_path / "r"
    run_dying_writer(d, "fsync:3")  # two shards published; killed before the third's rename
    (tmp,) = d.glob(".tmp-shard-*")
    assert tmp.stat().st_size > 50 * 2000  # it had written that shard's bytes
    store = ResponseStore(d)
    entries = store.items()
    assert len(entries) == 100 == len(store)
    assert_whole(entries)
    store.put_many("after", {key(-1, 0): Answer("fine")})
    store.flush()
    assert ResponseStore(d).get_many([key(-1, 0)])[key(-1, 0)].text == "fine"


@pytest.mark.parametrize(
    "die_at, left",
    [
        ("link", "before the new index is visible"),
        ("unlink", "after the index, before the shards it folded in are deleted"),
    ],
)
def test_writer_killed_while_compacting_leaves_a_consistent_cache(tmp_path, die_at, left) -> None:
    """cap 120: the third batch takes the cache over it and the writer compacts, and is killed
    at its first link (publishing the index) or first unlink (deleting the folded shards)."""
    d = tmp_path / "r"
    run_dying_writer(d, f"{die_at}:1", cap=120)
    assert (d / "compact.claim").exists()  # the claim a killed compactor leaves
    store = ResponseStore(d, max_entries=120, claim_stale_seconds=0.3)
    entries = store.items()
    if die_at == "link":  # no index: the three shards, all there
        assert not list(d.glob("index-*")) and len(entries) == 150
    else:  # the index (108 = 90% of the cap) and the shards it folded in, ignored
        assert len(list(d.glob("index-*"))) == 1 and len(list(d.glob("shard-*"))) == 3
        assert len(entries) == 108
    if die_at == "link":
        assert_whole(entries)
    else:  # eviction dropped parts of batches: each entry is still whole
        assert_whole_batches(entries)
    assert not store.compact()  # the claim is fresh to this store: it waits ...
    time.sleep(0.4)
    assert store.compact()  # ... then breaks it as stale, and compacts
    assert not (d / "compact.claim").exists() and not list(d.glob("shard-*"))
    assert len(store) == len(ResponseStore(d, max_entries=120).items()) <= 120


_WRITER = """
import hashlib, sys
from benchmark.consultants.base import Answer
from benchmark.consultants.cache_store import ResponseStore
store = ResponseStore(sys.argv[1], max_entries=int(sys.argv[2]), publish_seconds=0,
                      max_shards=6, claim_stale_seconds=0.5)
i = int(sys.argv[3])
while True:
    store.put_many("w", {hashlib.sha256(f"k{i}-{j}".encode()).hexdigest():
                         Answer(f"{i}-{j}-" + "x" * 2000, 1, 1) for j in range(50)})
    store.get_many([hashlib.sha256(f"k{i // 2}-0".encode()).hexdigest()])
    i += 1
"""


@pytest.mark.slow
def test_killed_writers_and_compactors_never_show_a_partial_entry(tmp_path) -> None:
    """Three writers publish and compact (cap 600, at most 6 shards) while this process reads,
    and are SIGKILLed at random points, twice over: every read sees whole batches only."""
    d = tmp_path / "r"
    rng = random.Random(0)
    reads = 0
    for round_ in range(2):
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", _WRITER, str(d), "600", str(10**6 * (3 * round_ + w))],
                cwd=REPO,
            )
            for w in range(3)
        ]
        try:
            deadline = time.time() + 4 + rng.random()
            while time.time() < deadline:
                reader = ResponseStore(d, max_entries=10**6)  # reads; never compacts (cap)
                entries = reader.items()
                assert_whole_batches(entries)
                reads += bool(entries)
                reader.close()
            for w in writers:
                time.sleep(rng.random() * 0.3)
                w.send_signal(signal.SIGKILL)
        finally:
            for w in writers:
                w.kill()
                w.wait()
    assert reads > 5
    final = ResponseStore(d, max_entries=600, claim_stale_seconds=0.2)
    time.sleep(0.3)
    final.compact()  # a claim a killed compactor left is broken (stale) and the cache compacts
    entries = final.items()
    assert 0 < len(entries) <= 600
    assert_whole_batches(entries)


def assert_whole_batches(entries: dict) -> None:
    """Every entry whole and named by its key; eviction may drop part of a batch, so only the
    entries themselves are checked."""
    for k, row in entries.items():
        i, j = (int(x) for x in row.text.split("-")[:2])
        assert k == key(i, j) and row.text == text_of(i, j), (k, row.text[:40])


# ---------------------------------------------------------------------- the SQLite cache before
OLD_SCHEMA = """
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


def old_cache(path: Path, rows: dict[str, str], identity: str = "old") -> sqlite3.Connection:
    """A responses.sqlite as the code before wrote it (WAL, the same schema and key), left open
    with its last rows still in the WAL, as a running (or killed) job of that code leaves it."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.executescript(OLD_SCHEMA)
    now = time.time()
    for text, answer in rows.items():
        k = cache_key(identity, q(text))
        conn.execute(
            "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (k, identity, answer, 11, 3, 0.5, now, now),
        )
    return conn


def make_cached(cache_dir: Path, name: str = "old", **slm):
    from omegaconf import OmegaConf

    from benchmark.consultants import make_consultant

    cfg = {
        "name": "counting",
        "cache": True,
        "cache_max_entries": 1000,
        "backend": {"_target_": "tests.consultants.test_cache.Counting", "name": name},
        **slm,
    }
    return make_consultant(cfg, OmegaConf.create({"cache": str(cache_dir)}))


def test_a_sqlite_cache_of_an_earlier_layout_is_not_read_and_left_unchanged(tmp_path) -> None:
    """The SQLite cache is a retired layout (benchmark.migrate names it when it brings the
    results root to this release's layout): the store never reads, changes or sets it aside;
    its answers are asked again."""
    cache = tmp_path / "cache"
    cache.mkdir()
    old = cache / "responses.sqlite"
    conn = old_cache(old, {f"m{i}": f"old answer {i}" for i in range(3)})
    before = {p.name: p.read_bytes() for p in (old, cache / "responses.sqlite-wal")}
    c = make_cached(cache)
    out = c.answer([q(f"m{i}") for i in range(3)])
    assert [a.text for a in out] == [f"old:m{i}" for i in range(3)] and not out[0].cached
    c.close()
    assert {p.name: p.read_bytes() for p in (old, cache / "responses.sqlite-wal")} == before
    assert "responses" in {p.name for p in cache.iterdir()} and not list(cache.glob("*corrupt*"))
    conn.close()


def test_cache_false_is_the_bare_backend(tmp_path) -> None:
    plain = make_cached(tmp_path / "cache", cache=False)
    assert type(plain).__name__ == "Counting" and not (tmp_path / "cache").exists()


# ---------------------------------------------------------------------- corrupt files
def _published(d: Path, n: int = 3, **kw) -> ResponseStore:
    store = ResponseStore(d, publish_seconds=0, **kw)
    for i in range(n):
        store.put_many("w", {key(i, j): Answer(text_of(i, j)) for j in range(50)})
    return store


def _corrupt_copies(d: Path) -> list[Path]:
    return sorted(d.glob("*.corrupt-*"))


@pytest.mark.parametrize("damage", ["garbage", "truncated", "one-byte"])
def test_corrupt_shard_is_set_aside_and_the_rest_served(tmp_path, caplog, damage) -> None:
    d = tmp_path / "r"
    _published(d).close()
    shard = sorted(d.glob("shard-*"))[1]
    data = bytearray(shard.read_bytes())
    if damage == "garbage":
        data = bytearray(random.Random(0).randbytes(len(data)))
    elif damage == "truncated":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 3] ^= 1
    shard.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="benchmark.consultants.cache_files"):
        store = ResponseStore(d)
        entries = store.items()
    assert sorted({int(r.text.split("-")[0]) for r in entries.values()}) == [0, 2]
    (copy,) = _corrupt_copies(d)
    assert copy.read_bytes() == bytes(data)  # kept, byte for byte, never deleted
    assert any(str(shard) in r.getMessage() and str(copy) in r.getMessage() for r in caplog.records)
    store.put_many("w", {key(1, 0): Answer(text_of(1, 0))})  # asked again, cached again
    store.flush()
    assert ResponseStore(d).get_many([key(1, 0)])[key(1, 0)].text == text_of(1, 0)


def test_newer_shard_format_is_ignored_not_set_aside(tmp_path) -> None:
    d = tmp_path / "r"
    d.mkdir()
    body = b'{"format": "ask-response-shard", "version": 2}\n{"anything": 1}\n'
    data = body + json.dumps({"end": 2, "sha256": hashlib.sha256(body).hexdigest()}).encode()
    (d / "shard-future.jsonl").write_bytes(data + b"\n")
    assert decode_shard(data) is None
    assert len(ResponseStore(d)) == 0 and not _corrupt_copies(d)


@pytest.mark.parametrize("where", ["whole-file", "pages-after-header"])
def test_corrupt_index_is_set_aside_and_readers_move_on(tmp_path, caplog, where) -> None:
    d = tmp_path / "r"
    writer = _published(d)
    assert writer.compact()
    (index,) = d.glob("index-*.sqlite")
    a, b = ResponseStore(d), ResponseStore(d)  # jobs with the index open
    assert len(a) == len(b) == 150
    writer.put_many("w", {key(9, j): Answer(text_of(9, j)) for j in range(50)})  # a shard after it
    size = index.stat().st_size
    garbage = random.Random(0).randbytes(size)
    offset = 0 if where == "whole-file" else 4096
    with index.open("r+b") as f:  # a disk fault: random bytes over the immutable file
        f.seek(offset)
        f.write(garbage[offset:])
    corrupt = index.read_bytes()
    with caplog.at_level(logging.WARNING, logger="benchmark.consultants.cache_files"):
        c = ResponseStore(d)
        assert sorted({int(r.text.split("-")[0]) for r in c.items().values()}) == [9]
        missing = b.get_many([key(0, 0), key(9, 0)])  # b finds out at its next lookup
    assert list(missing) == [key(9, 0)]
    (copy,) = _corrupt_copies(d)
    assert copy.read_bytes() == corrupt
    assert any(str(index) in r.getMessage() and str(copy) in r.getMessage() for r in caplog.records)
    c.put_many("w", {key(0, 0): Answer(text_of(0, 0))})
    assert c.compact() and len(_corrupt_copies(d)) == 1  # a new index, nothing else set aside
    assert a.get_many([key(0, 0)])[key(0, 0)].text == text_of(0, 0)  # a follows
    for s in (a, b, c, writer):
        s.close()


def test_shard_bytes_are_checked() -> None:
    rows = {key(0, 0): Row("w", "text", 1, 2, 0.5, 10.0)}
    data = encode_shard(rows, {key(0, 0): 20.0}, {"host": "h"})
    assert decode_shard(data) == (rows, {key(0, 0): 20.0})
    for bad in (data[:-10], data.replace(b"text", b"texT"), data + b"{}\n", b"", b"\n\n"):
        with pytest.raises(CorruptFile):
            decode_shard(bad)


def test_newer_index_format_is_left_alone(tmp_path) -> None:
    d = tmp_path / "r"
    store = _published(d, n=2)
    assert store.compact()
    (index,) = d.glob("index-*.sqlite")
    newer = d / "index-000000000999.sqlite"
    conn = sqlite3.connect(newer)
    conn.executescript("CREATE TABLE meta (name TEXT, value TEXT);")
    conn.executemany(
        "INSERT INTO meta VALUES (?, ?)", [("format", "ask-response-index"), ("version", "2")]
    )
    conn.commit()
    conn.close()
    reader = ResponseStore(d)
    assert len(reader) == 100 and not reader.compact()
    assert newer.exists() and index.exists() and not _corrupt_copies(d)


# ---------------------------------------------------------------------- the cap and the counts
def test_a_capped_job_never_evicts_a_default_jobs_entries(tmp_path, caplog) -> None:
    """One job's slm.cache_max_entries=20 compacted the shared cache of the results
    root down to 18 entries, evicting every other job's. The cap is the cache's own setting
    (<cache>/responses/settings.json): a job's key never evicts others' entries."""
    cache = tmp_path / "cache"
    default = make_cached(cache, "default", cache_max_entries=100_000)
    default.answer([q(f"d{i}") for i in range(30)])
    default.close()
    with caplog.at_level(logging.WARNING, logger="benchmark.consultants"):
        capped = make_cached(cache, "capped", cache_max_entries=20)
    assert "slm.cache_max_entries=20" in caplog.text and "settings.json" in caplog.text
    for i in range(30):
        capped.answer([q(f"c{i}")])
    capped.close()
    again = make_cached(cache, "default", cache_max_entries=100_000)
    again.answer([q(f"d{i}") for i in range(30)])
    assert again.inner.seen == [] and again.stats()["hits"] == 30  # all still cached
    assert len(again.store) == 60
    again.close()


def test_the_caches_own_cap_applies_to_every_job(tmp_path) -> None:
    from benchmark.consultants.cache_store import cache_cap, set_cache_cap

    responses = tmp_path / "cache" / "responses"
    assert cache_cap(responses) == 100_000  # no settings: the default
    set_cache_cap(responses, 20)
    assert json.loads((responses / "settings.json").read_text()) == {"max_entries": 20}
    job = make_cached(tmp_path / "cache", "any")  # the job's 1000 does not matter
    assert job.store.max_entries == 20
    for i in range(40):
        job.answer([q(f"x{i}")])
    assert len(job.store) <= 20
    job.close()
    with pytest.raises(ValueError, match="max_entries=0 is invalid: allowed an integer >= 1"):
        set_cache_cap(responses, 0)
    (responses / "settings.json").write_text("{not json")
    with pytest.raises(ValueError, match="settings.json is corrupt"):
        cache_cap(responses)


def test_in_batch_duplicates_count_as_hits_like_the_episodes_do(tmp_path) -> None:
    """The result line said "cache hits 0%" while episode_costs.jsonl counted 81
    in-batch duplicates as hits. Everywhere a hit is an answer the backend did not give
    (`Answer.cached`): from the store, or a copy of the same query earlier in its batch."""
    from benchmark.metrics import cache_hit_share, summarize
    from benchmark.progress import result_block

    c = CachedConsultant(Counting(), tmp_path / "r")
    out = c.answer([q("a"), q("b"), q("a"), q("a")]) + c.answer([q("b")])
    stats = c.stats()
    assert stats == dict(hits=3, misses=2, deduplicated=2, bypassed=0)
    assert stats["hits"] == sum(a.cached for a in out)
    rows = [
        {"seed": 0, "reward": 1.0, "length": 5, "queries": 4, "cache_hits": 3},
        {"seed": 1, "reward": 1.0, "length": 5, "queries": 1, "cache_hits": 0},
    ]
    summary = {**summarize(rows), "cache": stats, "n_episodes": 2}
    assert summary["cache_hits_total"] == 3 and cache_hit_share(summary) == pytest.approx(0.6)
    assert "cache hits 60%" in result_block(summary, {})
    # a summary of the code before: its misses included the duplicates, its hits did not
    old = {"queries_total": 100.0, "cache": dict(hits=0, misses=100, deduplicated=81)}
    assert cache_hit_share(old) == pytest.approx(0.81)
