"""Make a TextWorld task's games ahead of time, on every core or as a SLURM array:

    python -m benchmark.envs.textworld.make env=tw_quest [--workers N] [--splits train,test]
    python -m benchmark.envs.textworld.make +experiment=brace_tw protocol=paper -m
    sbatch --array=0-7 --wrap "python -m benchmark.envs.textworld.make env=tw_quest"

Overrides compose the job config as `python -m benchmark` does (`-m`: every env of the sweep);
the games are those its episodes would make on first reset (the training pool, the validation
and the test seeds), in the same content-addressed cache (`<paths.root>/textworld`), by the same
function (games.game_file): a game is the same whatever the worker count, the shard or the
order, and a game already made is skipped, so a killed generation resumes where it stopped. A
SLURM array task makes its share (every N-th game; `--shard I/N`, by default from
SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT). docs/families.md."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmark.envs.textworld import games
from benchmark.seeds import TRAIN_SEED_MIN, Splits

SPLITS = ("train", "validation", "test")
PROGRESS_INTERVAL_S = 5.0


def seeds_of(task: Any, splits: Splits, which: Sequence[str]) -> list[int]:
    """The game seeds of `which` splits: the training pool (TRAIN_SEED_MIN + i, i below
    `train_games`: what training resets fold onto) and the evaluation splits' seeds."""
    out: list[int] = []
    for split in which:
        if split == "train":
            out += range(TRAIN_SEED_MIN, TRAIN_SEED_MIN + task.train_games)
        else:
            out += splits.ranges[split]
    return out


def plan(tasks: Iterable[tuple[Any, Splits]], which: Sequence[str]) -> list[tuple[Any, int]]:
    """(task, seed) of every distinct game, in a fixed order (the order sharding cuts)."""
    seen, out = set(), []
    for task, splits in tasks:
        for seed in seeds_of(task, splits, which):
            where = games.game_dir(task.games_cache(), task.game, task.game_params(seed), seed)
            if where not in seen:
                seen.add(where)
                out.append((task, seed))
    return out


def shard_of(text: str | None) -> tuple[int, int]:
    """(index, count) from `I/N`, else from a SLURM array's environment, else (0, 1)."""
    if text is None:
        index, count = (
            os.environ.get("SLURM_ARRAY_TASK_ID"),
            os.environ.get("SLURM_ARRAY_TASK_COUNT"),
        )
        if index is None or count is None:
            return 0, 1
        minimum = int(os.environ.get("SLURM_ARRAY_TASK_MIN", "0"))
        return int(index) - minimum, int(count)
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise SystemExit(f"--shard {text!r} is invalid: allowed I/N with 0 <= I < N") from None
    if not 0 <= index < count:
        raise SystemExit(f"--shard {text!r} is invalid: allowed I/N with 0 <= I < N")
    return index, count


def _make(item: tuple[Any, int]) -> dict[str, Any]:
    """Make (or find) one game; never raises, so one refused seed does not stop the others."""
    task, seed = item
    made = not task.is_made(seed)
    try:
        path = task.game_file(seed)
    except (RuntimeError, ValueError) as err:
        return {"env": task.name, "seed": seed, "error": str(err)}
    meta = games.game_meta(path)
    return {
        "env": task.name,
        "seed": seed,
        "made": made,
        "digest": meta["digest"],
        "seconds": meta["seconds"] if made else 0.0,
        "path": str(path.parent),
    }


def generate(
    items: Sequence[tuple[Any, int]], workers: int = 1, stream: Any = sys.stderr
) -> list[dict[str, Any]]:
    """Make the games of `items` on `workers` processes (forked: they start with textworld
    imported), with a progress line every few seconds; the results in the items' order."""
    start = last = time.monotonic()
    results: list[dict[str, Any]] = []

    def report(force: bool = False) -> None:
        nonlocal last
        now = time.monotonic()
        if not force and now - last < PROGRESS_INTERVAL_S:
            return
        last, elapsed = now, now - start
        made = sum(1 for r in results if r.get("made"))
        rate = made / elapsed * 60 if elapsed > 0 else 0.0
        left = len(items) - len(results)
        eta = f" | ETA {left / made * elapsed:.0f} s" if made and left else ""
        print(
            f"games: {len(results)}/{len(items)} | {made} made, "
            f"{len(results) - made - _failed(results)} cached, {_failed(results)} refused | "
            f"{rate:.1f} games/min on {workers} worker{'s' * (workers > 1)}{eta}",
            file=stream,
            flush=True,
        )

    _import_generators()
    if workers <= 1 or len(items) <= 1:
        for item in items:
            results.append(_make(item))
            report()
    else:
        context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
        with context.Pool(workers) as pool:
            for result in pool.imap(_make, items, chunksize=1):
                results.append(result)
                report()
    report(force=True)
    return results


def _import_generators() -> None:
    """Import TextWorld's generators, compiler and player once, before the workers fork: each
    would otherwise import them again (seconds of a short generation)."""
    import jericho  # noqa: F401
    import textworld.challenges.tw_cooking.cooking  # noqa: F401
    import textworld.challenges.tw_treasure_hunter.treasure_hunter  # noqa: F401
    import textworld.generator  # noqa: F401
    import textworld.generator.inform7  # noqa: F401


def _failed(results: Sequence[dict[str, Any]]) -> int:
    return sum(1 for r in results if "error" in r)


def tasks_of(overrides: Sequence[str], multirun: bool) -> list[tuple[Any, Splits]]:
    """The TextWorld task and the seed splits of the job (or of every job of the sweep) the
    overrides compose; refused when an env is not a TextWorld one."""
    from omegaconf import OmegaConf

    from benchmark.config import compose, sweep_jobs
    from benchmark.envs import make_task

    jobs = sweep_jobs(overrides)[1] if multirun else [list(overrides)]
    out, seen = [], set()
    for job in jobs:
        cfg = compose(job)
        key = json.dumps(
            [OmegaConf.to_container(cfg.env, resolve=True), cfg.paths.root,
             OmegaConf.to_container(cfg.splits, resolve=True)],
            sort_keys=True, default=str,
        )  # fmt: skip
        if key in seen:
            continue
        seen.add(key)
        task = make_task(cfg.env)
        if getattr(task, "family", None) != "textworld":
            raise SystemExit(f"env={cfg.env.name} is not a TextWorld env: no games to make")
        out.append((task, Splits.from_config(cfg.splits)))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from benchmark.config import split_multirun

    parser = argparse.ArgumentParser(
        prog="python -m benchmark.envs.textworld.make",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,  # its command lines as written
    )
    parser.add_argument("--workers", default="1", help="processes: an integer or 'auto'")
    parser.add_argument("--splits", default=",".join(SPLITS), help="which games (comma list)")
    parser.add_argument("--shard", default=None, help="I/N: this array task's share")
    parser.add_argument("--report", type=Path, default=None, help="a JSON file of every game")
    args, overrides = parser.parse_known_args(argv)
    overrides, multirun = split_multirun(overrides)
    workers = (os.cpu_count() or 1) if args.workers == "auto" else _positive(args.workers)
    which = [s for s in args.splits.split(",") if s]
    unknown = sorted(set(which) - set(SPLITS))
    if unknown or not which:
        raise SystemExit(f"--splits {args.splits!r} is invalid: allowed a comma list of {SPLITS}")
    index, count = shard_of(args.shard)
    items = plan(tasks_of(overrides, multirun), which)[index::count]
    start = time.monotonic()
    results = generate(items, workers)
    seconds = time.monotonic() - start
    made = sum(1 for r in results if r.get("made"))
    print(
        f"{len(results)} games ({made} made, {_failed(results)} refused) in {seconds:.1f} s: "
        f"{made / seconds * 60 if seconds else 0:.1f} games/min on {workers} worker(s), "
        f"shard {index}/{count}"
    )
    if args.report:
        args.report.write_text(json.dumps({"seconds": seconds, "workers": workers,
                                           "games": results}, indent=1))  # fmt: skip
    for r in results:
        if "error" in r:
            print(f"refused: {r['env']} seed {r['seed']}: {r['error']}", file=sys.stderr)
    return 1 if _failed(results) else 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise SystemExit(f"--workers {text!r} is invalid: allowed a positive integer or 'auto'")
    return value


if __name__ == "__main__":
    sys.exit(main())
