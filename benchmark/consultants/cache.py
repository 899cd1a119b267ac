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

Storage (benchmark.consultants.cache_files), the store (.cache_store) and its compaction
(.cache_compaction) live beside this module.

Answers served from the cache have `cached=True`, the token counts of the original generation
(what the answer cost when it was made) and `seconds` = the time the lookup took."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path

from benchmark.consultants.base import Answer, Consultant, Decoding, Query, scores_choices
from benchmark.consultants.cache_store import ResponseStore, cache_cap, set_cache_cap

# Decoding fields that only act when sampling: a greedy key leaves them out, so it is the key the
# code made before they existed (tests/consultants/test_decoding.py pins one) and no cached answer
# is lost.
SAMPLING_ONLY = ("top_p", "top_k", "seed")


def decoding_key(decoding: Decoding) -> dict:
    """The decoding fields that enter the key: all of them, less SAMPLING_ONLY when greedy."""
    data = dataclasses.asdict(decoding)
    defaults = (
        ("mode", "generate"),
        ("choice_score", "sum"),
        ("source", "config"),
        ("repetition_penalty", 1.0),
        ("answer_text", "suite"),
    )
    for name, default in defaults:
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
