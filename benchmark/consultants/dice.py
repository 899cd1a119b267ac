"""The "dice" baseline: a uniformly random valid action.

Seeded by (cfg seed, query.rng_key) alone, so an answer does not depend on batching order or on
which other episodes are running: a rerun or a lockstep vs sequential run gives the same dice."""

from __future__ import annotations

import hashlib
import json
import random

from benchmark.consultants.base import Answer, Consultant, Query


class DiceConsultant(Consultant):
    """Answers every query with a random action name, written through `query.render_answer`."""

    cacheable = False  # free to recompute; make_consultant does not wrap it in the cache
    shards_episodes = True  # no model: each worker answers its own episodes
    label = "dice"
    uses_lm = False  # a seeded draw: no LM calls to count, no decoding

    def __init__(self, seed: int = 0) -> None:
        self.seed = int(seed)

    @property
    def identity(self) -> str:
        return f"dice-s{self.seed}"

    def choose(self, query: Query) -> str:
        if not query.actions:
            raise ValueError("the dice consultant needs query.actions (the valid action names)")
        digest = hashlib.sha256(json.dumps([self.seed, list(query.rng_key)]).encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big")).choice(query.actions)

    def answer(self, queries: list[Query]) -> list[Answer]:
        return [Answer(q.render_answer(self.choose(q), "dice")) for q in queries]
