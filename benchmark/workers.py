"""A cell's test episodes across worker processes (`eval.workers`), so one cell uses every core
it may: each worker is a forked copy of the built evaluator (policy, gate, task, consultant)
that runs its shard of seeds in lockstep; the rows (and step records) are merged in seed order.

The results are those of one process: every episode draws its dropout masks, gate coins and
dice from streams seeded by its own seed, never by who shares its batch (benchmark.evaluate), so
a shard changes nothing but the wall time. Only consultants without a model or connection of their
own shard (`Consultant.shards_episodes`: the oracle, the dice): one that holds a model in this
process (hf, tiny, fine-tuned) keeps the cell in one process, so its batches stay whole on one
copy of the model; the openai backend too (its HTTP connections must not be shared by forked
processes; several feeders of one server are left for later). Prompts that carry feedback from one episode to
the next (`sequential_episodes`) run in order, in one process."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator
from typing import Any

AUTO = "auto"
MIN_EPISODES_PER_WORKER = 4  # fewer: forking costs more than the shard saves
JOB: dict[str, Any] = {}  # what a forked worker reads (set by forked_map just before the fork)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: a SLURM allocation, taskset)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def resolve(setting: Any, launcher_parallel: bool = False) -> int:
    """`eval.workers`: a positive number, or `auto` = the usable cores, 1 when the launcher
    already runs cells side by side on this machine (`launcher_parallel`)."""
    if setting is None or str(setting) == AUTO:
        return 1 if launcher_parallel else usable_cores()
    if isinstance(setting, bool) or not isinstance(setting, int) or setting < 1:
        raise ValueError(
            f"eval.workers={setting!r} is invalid: allowed a positive integer or 'auto'"
        )
    return setting


def shards(seeds: list[int], workers: int) -> list[list[int]]:
    """Seeds dealt round-robin into at most `workers` shards of at least
    MIN_EPISODES_PER_WORKER each (1 shard: run in this process)."""
    n = max(1, min(workers, len(seeds) // MIN_EPISODES_PER_WORKER))
    return [seeds[k::n] for k in range(n)]


def can_shard(evaluator: Any) -> bool:
    """Whether the evaluator's episodes may run in several processes (module docstring)."""
    if getattr(evaluator.prompt, "sequential_episodes", False):
        return False
    consultant = evaluator.consultant
    return consultant is None or bool(getattr(consultant, "shards_episodes", False))


def run(
    evaluator: Any,
    seeds: list[int],
    workers: int,
    mode: str = "lockstep",
    progress: Any = None,
    recorder: Callable | None = None,
) -> list[dict]:
    """`evaluator.run(seeds, ...)`, its seeds sharded over `workers` forked processes where
    `can_shard` allows; rows in seed order, the recorder's records as one process would
    collect them."""
    parts = shards(list(seeds), workers) if can_shard(evaluator) else [list(seeds)]
    if len(parts) == 1:
        return evaluator.run(seeds, mode=mode, progress=progress, on_step=recorder)
    rows: list[dict] = []
    job = {"evaluator": evaluator, "mode": mode, "record": recorder is not None}
    for shard_rows, records in forked_map(_run_shard, parts, job):
        rows += shard_rows
        if recorder is not None:
            recorder.extend(records)
        if progress is not None:
            for row in sorted(shard_rows, key=lambda r: r["seed"]):
                # a shard's steps are heard of when it ends: its decisions and queries with them
                progress.step(int(row["length"]), int(row["queries"]))
                progress.episode(row)
    return sorted(rows, key=lambda r: r["seed"])


def forked_map(function: Callable[[Any], Any], parts: list, job: dict[str, Any]) -> Iterator:
    """`function(part)` for every part, each in a forked process that inherits `job` (the
    objects it reads, as `JOB`, never pickled); the results as they finish."""
    JOB.update(job)
    try:
        with multiprocessing.get_context("fork").Pool(len(parts)) as pool:
            yield from pool.imap_unordered(function, parts)
    finally:
        JOB.clear()


def _run_shard(seeds: list[int]) -> tuple[list[dict], list[dict]]:
    """In a worker: its shard in lockstep, with its own step recorder when the parent has one."""
    import torch

    from benchmark.analysis.steps import step_record

    torch.set_num_threads(1)  # one core per worker
    records: list[dict] = []
    hook = (lambda event: records.append(step_record(event))) if JOB["record"] else None
    rows = JOB["evaluator"].run(seeds, mode=JOB["mode"], on_step=hook)
    return rows, records
