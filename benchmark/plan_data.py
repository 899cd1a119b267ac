"""What a plan holds (benchmark.plan): each cell's status, the work it still needs and its projected
time, and the totals over the sweep."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from benchmark.plan_estimate import Throughput, Work

COMPLETE, FAILED, PENDING, INVALID = "complete", "failed", "pending", "invalid"
NOT_BUILT = "model not built yet"


@dataclass
class CellPlan:
    jobs: list[int]  # the sweep's job numbers that are this cell
    overrides: list[str]  # the first job's
    name: str
    hash: str | None  # None: not known yet (policy not trained) or invalid
    status: str
    note: str = ""  # policy not trained / the error's first line / inputs changed since ...
    changed_from: str | None = None  # the hash of the old cell of the same config
    lm: bool = False  # asks a language model (not the oracle or the dice)
    slm: str | None = None
    work: Work | None = None  # None for complete and invalid cells
    throughput: Throughput | None = None
    projected_s: float | None = None


@dataclass
class Plan:
    experiment: str
    root: str
    jobs: int
    cells: list[CellPlan] = field(default_factory=list)
    protocols: list[str] = field(default_factory=list)  # conf/protocol names the jobs use
    # what the jobs' tasks make before their first episode (Task.content_summary), one line each
    content: list[str] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(c.status == status for c in self.cells)

    def totals(self) -> dict[str, Any]:
        todo = [c for c in self.cells if c.work is not None]
        works = [c.work for c in todo]

        def total(key: str) -> int:
            return sum(getattr(w, key) for w in works)

        measured = [w.prompt_tokens for w in works if w.calls and w.prompt_tokens is not None]
        projected = [c.projected_s for c in todo if c.projected_s is not None]
        return {
            **{s: self.count(s) for s in (COMPLETE, FAILED, PENDING, INVALID)},
            "policy_not_trained": sum(
                c.hash is None and c.status == PENDING and not c.note.startswith(NOT_BUILT)
                for c in self.cells
            ),
            "model_not_built": sum(c.note.startswith(NOT_BUILT) for c in self.cells),
            "inputs_changed": sum(c.changed_from is not None for c in self.cells),
            **{
                k: total(k)
                for k in (
                    "episodes",
                    "tuning_trials",
                    "tuning_episodes",
                    "max_steps",
                    "calls",
                    "calls_max",
                    "generated_tokens",
                    "generated_tokens_max",
                )
            },
            "prompt_tokens_measured": sum(measured),
            "cells_with_prompt_tokens": len(measured),
            "projected_s": sum(projected) if projected else None,
            "lm_cells_without_throughput": sum(
                c.lm and c.projected_s is None and c.work.calls > 0 for c in todo
            ),
        }

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "totals": self.totals()}
