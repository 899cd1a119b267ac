"""A consultant backend and a trained gate outside the suite (tests/test_plugin_discovery.py).

Each declares, on its class, what the suite asks of it (benchmark.consultants.base.Consultant,
benchmark.gates.Gate): its config keys and which of them are execution settings, its checks,
its capabilities. The suite finds the backend by `slm.backend._target_` and the gate by
`gate._target_`; the entry point `benchmark.gates` lists the gate for the report."""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmark.consultants.base import Answer, Consultant, Query
from benchmark.gates import Gate


class ToyConsultant(Consultant):
    """Answers with the valid action at `index` (modulo their number): no language model."""

    label = "toy"
    uses_lm = False  # no LM calls to count or time
    shards_episodes = True  # holds nothing: each worker answers its own episodes
    cacheable = False
    execution_keys = ("note",)  # free text: never changes an answer
    slm_keys = ("flavour",)

    def __init__(self, index: int = 0, note: str = "") -> None:
        self.index, self.note = int(index), note

    @classmethod
    def check_config(cls, slm: Any) -> None:
        index = slm.backend.get("index", 0)
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise ValueError(f"slm.backend.index={index!r} is invalid: allowed an integer >= 0")

    @property
    def identity(self) -> str:
        return f"toy-{self.index}"

    def answer(self, queries: list[Query]) -> list[Answer]:
        return [
            Answer(q.render_answer(q.actions[self.index % len(q.actions)], "toy")) for q in queries
        ]


class PeriodGate(Gate):
    """Asks at every `period`-th step (shifted by `offset`); `period` is trained by the job."""

    name = "period"
    needs_training = True
    trainer = "benchmark_toyplugins.train_period"
    report_order, marker = 5, "X"

    def __init__(self, period: int = 0, offset: int = 0) -> None:
        self.period, self.offset = int(period), int(offset)

    @classmethod
    def config_keys(cls) -> frozenset[str]:
        return super().config_keys() - {"period"}  # trained, never configured

    @classmethod
    def check_config(cls, gate: Any) -> None:
        offset = gate.get("offset", 0)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"gate.offset={offset!r} is invalid: allowed an integer >= 0")

    def mask(self, unc, seeds, step):
        if self.period < 1:
            raise RuntimeError("the period gate is not trained: build it through the job")
        return np.asarray([(t + self.offset) % self.period == 0 for t in step], dtype=bool)


def train_period(cfg: Any, task: Any, policy: Any, checkpoint: Any) -> tuple[dict, dict]:
    """The gate's trainer (PeriodGate.trainer): its period, the number of valid actions."""
    period = len(task.action_names)
    return {"period": period}, {"period": period, "checkpoint": str(checkpoint)}
