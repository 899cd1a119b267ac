"""Per-step records: what the gate, PPO and the consultant did on every step of a cell's test
episodes, judged by the environment's expert. Written as `steps.jsonl.gz` beside episodes.jsonl
when `eval.step_records=true` (an output option, not part of the cell's identity); episodes.jsonl
never changes.

One JSON object per step, in (seed, step) order:

    seed, step          the episode's seed, the step index (0-based)
    total, aleatoric, epistemic
                        MC-dropout entropies in bits of PPO's action distribution, when the gate
                        computes them (entropy, epistemic gates); None otherwise
    optimal             the SET of expert-optimal action indices, sorted (navigation: every
                        action that starts a shortest path; HigherLower: card counting, both
                        guesses when P(higher) = P(lower)); None when the expert has no answer
                        (the goal cannot be reached)
    ppo, ppo_optimal    PPO's greedy action and whether it is optimal (None without a policy)
    queried             whether the consultant was asked this step
    consultant, consultant_optimal
                        the consultant's action (None when not asked or the answer was
                        invalid) and whether it is optimal
    action, action_optimal
                        the action taken and whether it is optimal
    policy_probs        only when the gate computes the entropies: PPO's action probabilities
                        (dropout off, in action-index order), what its greedy action is the
                        argmax of (a learned gate's feature)
    consultant_probs    only when the consultant scored the choices (slm.decoding.mode=choices):
                        each valid action's probability (action name -> float, over the valid
                        actions), the consultant's own confidence beside PPO's entropy
    gate_score          only for a trained gate (gate=learned): the score its threshold applies to
                        (the classifier's probability that PPO's action is not optimal), so its
                        AUROC sits beside the entropies'
    context_tokens, belief_updated, belief_score, belief_claims
                        the context length of a queried step and, for belief-style prompts,
                        the held belief scored against the true state (benchmark.analysis.belief)
    ...                 the env family's fields (Episode.step_fields): navigation `pos`, `dir`
                        (the agent's world (x, y), direction 0 E, 1 S, 2 W, 3 N); HigherLower
                        `rank`, `decision` (the card's rank 0 = ace ... 12 = king, the 0-based
                        index of the decision)
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmark.analysis.belief import belief_fields, context_tokens
from benchmark.store import write_bytes_atomic

if TYPE_CHECKING:
    from benchmark.evaluate import StepEvent

STEPS_FILE = "steps.jsonl.gz"
# eval.step_records: false, true (a cell records them when it is evaluated) or RERUN (also a
# complete cell without them runs its evaluation again to record them: benchmark.job)
RERUN = "rerun"


def _f32(x: float | None) -> float | None:
    """A float32 entropy as its shortest round-trip decimal (about half the digits of float64's
    repr, the same value)."""
    return None if x is None else float(str(np.float32(x)))


def _judge(action: int | None, optimal: set[int] | None) -> bool | None:
    if action is None or optimal is None:
        return None
    return action in optimal


def step_record(event: StepEvent) -> dict[str, Any]:
    """The record of one step (the episode still in the state the action is taken in)."""
    ep = event.episode
    optimal = ep.optimal_actions()
    optimal = set(optimal) if optimal else None  # an empty set: the expert has no answer
    decision = event.decision
    consultant = None if decision is None or decision.action is None else int(decision.action)
    total, aleatoric, epistemic = (_f32(u) for u in event.uncertainty or (None, None, None))
    ppo = None if event.ppo_action is None else int(event.ppo_action)
    record: dict[str, Any] = {
        "seed": int(ep.seed),
        "step": int(ep.steps),
        "total": total,
        "aleatoric": aleatoric,
        "epistemic": epistemic,
        "optimal": sorted(optimal) if optimal is not None else None,
        "ppo": ppo,
        "ppo_optimal": _judge(ppo, optimal),
        "queried": bool(decision is not None and decision.queried),
        "consultant": consultant,
        "consultant_optimal": _judge(consultant, optimal),
        "action": int(event.action),
        "action_optimal": _judge(int(event.action), optimal),
    }
    if event.policy_probs is not None:
        record["policy_probs"] = [_f32(p) for p in event.policy_probs]
    scored = [a.choices for a in decision.answers if a.choices] if decision is not None else []
    if scored:
        record["consultant_probs"] = {k: _f32(v) for k, v in scored[-1].items()}
    tokens = context_tokens(decision)
    if tokens is not None:
        record["context_tokens"] = tokens
    record.update(belief_fields(ep, decision))  # belief-style prompts only
    record.update(ep.step_fields())  # the family's fields: position, card, ...
    return record


class StepRecorder:
    """The evaluator's `on_step` hook: collects one record per step; `records` is sorted by
    (seed, step) whatever order the lockstep loop produced them in. Given a trained gate, each
    record gets its `gate_score`, computed in one batch from the records' own features."""

    def __init__(self, gate: Any = None) -> None:
        self._records: list[dict[str, Any]] = []
        self._gate = gate if getattr(gate, "needs_training", False) else None

    def __call__(self, event: StepEvent) -> None:
        self._records.append(step_record(event))

    def extend(self, records: list[dict[str, Any]]) -> None:
        """Records another process collected (a worker of benchmark.workers)."""
        self._records.extend(records)

    @property
    def records(self) -> list[dict[str, Any]]:
        records = sorted(self._records, key=lambda r: (r["seed"], r["step"]))
        if self._gate is not None and records:
            for r, score in zip(records, self._gate.scores(records), strict=True):
                r["gate_score"] = _f32(score)
        return records


def _jsonl(records: list[dict[str, Any]]) -> bytes:
    return b"".join((json.dumps(r, sort_keys=True) + "\n").encode() for r in records)


def write_steps(path: Path, records: list[dict[str, Any]]) -> None:
    """Gzipped JSONL, written atomically; the same records give the same bytes (no mtime)."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as gz:
        gz.write(_jsonl(records))
    write_bytes_atomic(path, buf.getvalue())


def steps_fields(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What the cell's summary.json says of its step records: their count and the SHA-256 of
    their JSONL text (the file uncompressed), so a reader can tell the file is the one written
    with the cell (`check_steps`)."""
    return {STEPS_COUNT: len(records), STEPS_SHA256: hashlib.sha256(_jsonl(records)).hexdigest()}


STEPS_COUNT, STEPS_SHA256 = "step_records_count", "step_records_sha256"
UNCHECKED = "unchecked"  # the summary predates the count and digest (older cells)


def read_steps(path: Path) -> list[dict[str, Any]] | None:
    """The records of a steps.jsonl.gz (every gzip member), None when it is missing or corrupt.
    Unchecked: readers of a cell's records use `read_checked_steps`."""
    try:
        with gzip.open(path, "rb") as f:
            return [json.loads(line) for line in f.read().splitlines() if line.strip()]
    except (OSError, EOFError, ValueError):
        return None


def check_steps(
    records: list[dict[str, Any]], summary: dict[str, Any], episodes: list[dict[str, Any]] | None
) -> list[str]:
    """Why `records` are not the step records of the cell with this summary and these episodes
    (empty: they are): the count and digest the summary recorded (cells written before it did
    are not checked for them), one record per (seed, step), the episodes' seeds and lengths."""
    problems = []
    if STEPS_COUNT in summary and summary[STEPS_COUNT] != len(records):
        problems.append(f"{len(records)} records, its summary says {summary[STEPS_COUNT]}")
    if STEPS_SHA256 in summary and summary[STEPS_SHA256] != steps_fields(records)[STEPS_SHA256]:
        problems.append("their SHA-256 is not the one its summary recorded")
    keys = [(r.get("seed"), r.get("step")) for r in records]
    if len(set(keys)) != len(keys):
        dup = next(k for i, k in enumerate(keys) if k in keys[:i])
        problems.append(f"{len(keys) - len(set(keys))} repeated (seed, step), first {dup}")
    if episodes is not None:
        want = {int(e["seed"]): int(e["length"]) for e in episodes if "length" in e}
        got: dict[int, int] = {}
        for seed, _ in set(keys):
            got[seed] = got.get(seed, 0) + 1
        if set(got) != set(want):
            extra, missing = sorted(set(got) - set(want)), sorted(set(want) - set(got))
            problems.append(f"seeds not the episodes' (extra {extra[:5]}, missing {missing[:5]})")
        else:
            short = [s for s in want if got[s] != want[s]]
            if short:
                s = short[0]
                problems.append(
                    f"{len(short)} episodes with another number of steps (seed {s}: {got[s]} "
                    f"records, {want[s]} steps)"
                )
    return problems


def read_checked_steps(
    path: Path, summary: dict[str, Any], episodes: list[dict[str, Any]] | None
) -> tuple[list[dict[str, Any]] | None, str]:
    """The records of a cell's steps.jsonl.gz and their state: "ok", UNCHECKED (the summary
    predates the count and digest; the rest was checked), or why they are refused (records
    None): unreadable, or what `check_steps` found."""
    records = read_steps(path)
    if records is None:
        return None, f"{path} is unreadable"
    problems = check_steps(records, summary, episodes)
    if problems:
        return None, f"{path} does not match its cell: " + "; ".join(problems)
    return records, "ok" if STEPS_SHA256 in summary else UNCHECKED


def by_episode(records: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Records grouped by episode seed, each in step order."""
    out: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        out.setdefault(int(r["seed"]), []).append(r)
    for rows in out.values():
        rows.sort(key=lambda r: r["step"])
    return out
