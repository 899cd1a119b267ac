"""Local result files, written atomically (temp file + rename) so a killed job never leaves a
half-written file that could be read as valid."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# the one atomic writer and file hash live with the results root's layout (benchmark.store)
from benchmark.store import (  # noqa: F401 - re-exported
    file_sha256,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)

# per-episode fields that depend on the machine or on the cache, kept out of episodes.jsonl so
# that the same config gives byte-identical episodes.jsonl (they go to episode_costs.jsonl)
RUNTIME_FIELDS = ("consultant_seconds", "wall_seconds", "cache_hits")


def write_json(path: Path, data: Any) -> None:
    write_json_atomic(path, data)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    write_text_atomic(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def read_json(path: Path) -> Any | None:
    """The parsed file, or None when it is missing or truncated/corrupt."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def read_jsonl(path: Path) -> list[dict] | None:
    try:
        lines = Path(path).read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]
    except (OSError, ValueError):
        return None


def split_runtime(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(deterministic episode rows, per-episode runtime costs)."""
    outcome = [{k: v for k, v in r.items() if k not in RUNTIME_FIELDS} for r in rows]
    costs = [{"seed": r["seed"], **{k: r[k] for k in RUNTIME_FIELDS if k in r}} for r in rows]
    return outcome, costs


def complete_cell(cell_dir: Path) -> tuple[dict, list[dict]] | None:
    """The cell's (summary, episodes) when its results are complete and consistent, else None.
    A truncated or inconsistent file is never read as valid: the cell is recomputed."""
    summary = read_json(Path(cell_dir) / "summary.json")
    episodes = read_jsonl(Path(cell_dir) / "episodes.jsonl")
    if not isinstance(summary, dict) or episodes is None:
        return None
    if summary.get("n_episodes") != len(episodes) or not summary.get("complete"):
        return None
    return summary, episodes
