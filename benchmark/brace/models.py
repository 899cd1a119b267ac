"""Agent-BRACE's model folders: made once, whole, and reused only when made with the same
settings. A folder is complete only when its completion record (`complete.json`, written last)
lists every file with its SHA-256 and each file still has it; the record also keeps the settings
that made it (`trained_with`), and a complete folder made with other settings is refused before
any work (never overwritten, never measured as if these settings had made it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

COMPLETE = "complete.json"  # a model folder's completion record, written last


def model_complete(directory: Path, digests: Path | None = None) -> bool:
    """Whether a model folder is whole: its completion record lists every file with its
    SHA-256, and each one still has it (a folder a kill left half-saved has no record).
    `digests`: the results store's digest cache (None: hash every file)."""
    from benchmark.store import cached_digest, read_json

    record = read_json(Path(directory) / COMPLETE)
    if not isinstance(record, dict) or not record.get("files"):
        return False
    for name, sha in record["files"].items():
        path = Path(directory) / name
        if not path.is_file() or cached_digest(path, digests) != sha:
            return False
    return True


def made_with(directory: Path, digests: Path | None = None) -> dict[str, Any] | None:
    """The settings a complete model folder was made with (None: not complete, or no record)."""
    from benchmark.store import read_json

    record = read_json(Path(directory) / COMPLETE) or {}
    return record.get("trained_with") if model_complete(directory, digests) else None


def check_reusable(
    directory: Path, args: dict[str, Any], digests: Path | None = None, key: str = "brace.out"
) -> None:
    """Refuse, before any work, a complete model folder made with other settings, naming the
    settings that differ and the key that chooses another folder."""
    made = made_with(directory, digests)
    if made is not None and made != args:
        differ = sorted(k for k in set(made) | set(args) if made.get(k) != args.get(k))
        raise SystemExit(
            f"{directory} was trained with other settings ({', '.join(differ)}: "
            f"{ {k: made.get(k) for k in differ} } there, { {k: args.get(k) for k in differ} } "
            f"now); choose another {key} (or another brace.name) to train with these"
        )


def build_model(
    directory: Path, make: Callable[[Path], Any], args: dict[str, Any], digests: Path | None = None
) -> bool:
    """Make a model folder once, whole: built in a private work folder, its completion record
    (every file's SHA-256 and the settings) written last, then renamed into place
    (benchmark.store.build_once: a kill leaves no folder that looks complete). Returns whether
    this call made it: False when another job (a requeued copy of this one) finished it first,
    while this one waited for the lock, and `make` never ran."""
    from benchmark.store import build_once, file_sha256, write_json_atomic

    def make_whole(work: Path) -> None:
        make(work)
        files = sorted(p for p in work.rglob("*") if p.is_file())
        record = {str(p.relative_to(work)): file_sha256(p) for p in files}
        write_json_atomic(work / COMPLETE, {"files": record, "trained_with": args})

    return build_once(Path(directory), make_whole, lambda d: model_complete(d, digests))
