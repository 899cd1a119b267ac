"""The work a plan's cells still need and the time it will take (benchmark.plan): episodes, steps,
LM calls and tokens, measured from a complete reference cell of the same identity but for the
consultant (tiny or oracle) or bounded at IR 1; and LM throughput figures from bench JSONs."""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from benchmark import results
from benchmark.store import StoredCell as Stored

REFERENCE_SLMS = ("tiny", "oracle")  # preferred first: the tiny model reports token counts
THINK_CLOSE_BYTES = len(b"</think>\n\n")  # closing an open thinking block: at most one token a byte


@dataclass
class Work:
    """What a cell that is not complete still needs. `calls` is LM calls (a consultation of the
    belief prompt makes two); `*_max` are the bounds at IR 1 with every round at its token cap."""

    episodes: int
    tuning_trials: int
    tuning_episodes: int
    max_steps: int
    calls: int
    calls_max: int
    prompt_tokens: int | None  # None: not measured (no tiny-model reference)
    generated_tokens: int
    generated_tokens_max: int
    basis: str  # "measured: ..." | "bound: ..." | "no consultant"


@dataclass
class Throughput:
    queries_per_s: float | None = None  # LM calls per second
    tokens_per_s: float | None = None  # generated tokens per second
    source: str = ""

    def seconds(self, work: Work) -> float | None:
        parts = []
        if self.queries_per_s:
            parts.append(work.calls / self.queries_per_s)
        if self.tokens_per_s:
            parts.append(work.generated_tokens / self.tokens_per_s)
        return max(parts) if parts else None


def _sans_slm(identity: dict) -> dict:
    """An identity without its consultant: the slm, and what the slm puts elsewhere (its
    sampling settings in the prompt's decoding, its name in the tuning study's key)."""
    out = {k: v for k, v in identity.items() if k != "slm"}
    for part, key in (("prompt", "sampling"), ("tuning", "study")):
        if isinstance(out.get(part), dict):
            out[part] = {k: v for k, v in out[part].items() if k != key}
    return out


@dataclass
class Reference:
    """A complete cell of the same identity but for the consultant (tiny or oracle)."""

    hash: str
    slm: str
    summary: dict
    episodes: list[dict]
    trial_irs: list[float]


def find_reference(spec: Any, stored: list[Stored]) -> Reference | None:
    if not spec.uses_consultant:
        return None
    want = _sans_slm(spec.identity)
    found: dict[str, Stored] = {}
    for s in stored:
        slm = ((s.identity or {}).get("slm") or {}).get("name")
        if s.complete and s.hash != spec.hash and slm in REFERENCE_SLMS:
            if _sans_slm(s.identity) == want:
                found.setdefault(slm, s)
    for slm in REFERENCE_SLMS:
        if slm in found:
            done = results.complete_cell(found[slm].dir)
            if done is None:
                continue
            return Reference(found[slm].hash, slm, *done, _trial_irs(found[slm].dir))
    return None


def _trial_irs(cell_dir: Path) -> list[float]:
    try:
        with open(cell_dir / "trials.csv", newline="") as f:
            return [float(r["ir"]) for r in csv.DictReader(f) if r.get("ir") not in (None, "")]
    except (OSError, ValueError, KeyError, csv.Error):
        return []


# ----------------------------------------------------------------------------- work
def step_limit(task: Any) -> int:
    """The most steps an evaluation episode can take."""
    return int(getattr(task, "episode_limit", None) or task.max_steps)


def decoding_caps(prompt: Any) -> tuple[int, int]:
    """(LM calls per consultation, generated-token cap of one consultation): one call per
    decoding the prompt holds (the belief prompt: update, then act), each at most its
    max_new_tokens plus, in thinking mode, the thinking budget and the closing tag."""
    from benchmark.consultants.base import Decoding

    decodings = [v for v in vars(prompt).values() if isinstance(v, Decoding)]
    cap = sum(
        d.max_new_tokens + (d.thinking_budget + THINK_CLOSE_BYTES if d.enable_thinking else 0)
        for d in decodings
    )
    return max(len(decodings), 1), cap


def cell_work(
    cfg: DictConfig, task: Any, spec: Any, trials_todo: int, reference: Reference | None
) -> Work:
    from benchmark.build import build_prompt, shared_tuning_config

    episodes = int(cfg.eval.n_episodes)
    tuning_episodes = trials_todo * int(cfg.tuning.n_episodes)
    max_steps = step_limit(task) * (episodes + tuning_episodes)
    if not spec.uses_consultant:
        return Work(
            episodes, trials_todo, tuning_episodes, max_steps, 0, 0, 0, 0, 0, "no consultant"
        )
    rounds, cap = decoding_caps(build_prompt(cfg, task))
    # a shared study tunes with its own prompt (ASK+'s for ASK): its caps bound the trials
    source = shared_tuning_config(cfg) if trials_todo else None
    tuning_rounds, tuning_cap = (
        decoding_caps(build_prompt(source, task)) if source is not None else (rounds, cap)
    )
    limit, tuning_steps = step_limit(task), step_limit(task) * tuning_episodes
    calls_max = limit * episodes * rounds + tuning_steps * tuning_rounds
    generated_max = limit * episodes * cap + tuning_steps * tuning_cap
    if reference is None:
        return Work(
            episodes,
            trials_todo,
            tuning_episodes,
            max_steps,
            calls_max,
            calls_max,
            None,
            generated_max,
            generated_max,
            "bound: every step queried (IR 1)",
        )
    rows = reference.episodes
    steps = sum(int(r["length"]) for r in rows)
    queries = sum(int(r["queries"]) for r in rows)
    measured_calls = sum(int(r.get("calls", r["queries"])) for r in rows)  # its evaluation
    per_query = measured_calls / queries if queries else rounds
    irs = reference.trial_irs
    tuning_ir = statistics.fmean(irs) if irs else queries / max(steps, 1)
    tuning_calls = round(tuning_episodes * steps / len(rows) * tuning_ir * per_query)
    calls = min(measured_calls + tuning_calls, calls_max)
    prompt_total = float(reference.summary.get("prompt_tokens_total") or 0.0)
    generated_total = float(reference.summary.get("generated_tokens_total") or 0.0)
    prompt_tokens = (
        round(calls * prompt_total / measured_calls) if prompt_total and measured_calls else None
    )
    if generated_total and measured_calls:
        generated = round(calls * generated_total / measured_calls)
    else:
        generated = round(calls * cap / rounds)  # measured calls, each at its token cap
    return Work(
        episodes,
        trials_todo,
        tuning_episodes,
        max_steps,
        calls,
        calls_max,
        prompt_tokens,
        min(generated, generated_max),
        generated_max,
        f"measured: {reference.slm} cell {reference.hash}",
    )


# ----------------------------------------------------------------------------- throughput
def bench_throughputs(bench_dir: Path, only: Path | None = None) -> dict[str, Throughput]:
    """{slm name: throughput} from bench JSONs, newest first (`only`: that file): `make
    bench-gpu`'s per-model figures at its largest batch (dry runs skipped), `make bench`'s
    lockstep LM calls/s for the tiny model."""
    files = [Path(only)] if only else sorted(Path(bench_dir).glob("*.json"), key=_mtime)[::-1]
    out: dict[str, Throughput] = {}
    for path in files:
        data = results.read_json(path)
        if not isinstance(data, dict):
            if only:
                raise ValueError(f"--bench {path}: not a readable bench JSON")
            continue
        if data.get("kind") == "gpu" and not data.get("dry_run"):
            for name, entry in (data.get("models") or {}).items():
                tp = entry.get("throughput") or {}
                if name in out or not tp:
                    continue
                batch = max(tp, key=int)
                out[name] = Throughput(
                    tp[batch].get("queries_per_s"),
                    tp[batch].get("generated_tokens_per_s"),
                    f"{path.name}: {name} at batch {batch} on {data.get('device')}",
                )
        elif data.get("kind") == "cpu" and "tiny" not in out:
            lock = ((data.get("sections") or {}).get("evaluation") or {}).get("median", {})
            qps = (lock.get("lockstep") or {}).get("queries_per_s")
            if qps:
                out["tiny"] = Throughput(qps, None, f"{path.name}: tiny, lockstep evaluation")
    return out


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
