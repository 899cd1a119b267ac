"""TextWorld games generated offline, one per seed, built once and cached.

A game is a pure function of (task kind, generation parameters, seed, textworld version): it is
made by textworld's own generators (quest: `textworld.generator.make_game`, treasure:
`textworld.challenges.tw_treasure_hunter`, cooking: `textworld.challenges.tw_cooking`), compiled
to a Z-machine file and published whole under `<games root>/<kind>-<key>/<seed>/` with
`benchmark.store.build_once`. Games are made lazily: only the seeds an episode resets with.

Seeds follow the suite's splits (benchmark.seeds): validation 0-99, test 100-199, training
>= TRAIN_SEED_MIN. Training resets fold onto a pool of `train_games` seeds (the papers train on
a fixed set of games, 1,000 per task), so training does not make a new game at every reset."""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmark.seeds import TRAIN_SEED_MIN
from benchmark.store import build_once, write_json_atomic

# Bump when a change here makes a different game for the same key (a new cache directory).
GAMES_VERSION = 1
GAME_FILE, META_FILE = "game.z8", "meta.json"
# The generation parameters each task takes, with the defaults (the toy size of the suite).
# cooking's `split` (its vocabulary split) is not a parameter: the seed's split sets it.
PARAMETERS: dict[str, dict[str, Any]] = {
    "quest": {"nb_rooms": 3, "nb_objects": 4, "quest_length": 3},
    "treasure": {"level": 5},
    "cooking": {
        "recipe": 1,
        "take": 1,
        "go": 1,
        "open": False,
        "cook": False,
        "cut": False,
        "drop": False,
        "recipe_seed": 0,
    },
}
KINDS = tuple(PARAMETERS)


def default_root() -> Path:
    """Where games are cached: `textworld/` under the results root's default
    (`$BENCHMARK_ROOT`, else ./outputs, as conf/paths/default.yaml)."""
    return Path(os.environ.get("BENCHMARK_ROOT", "outputs")).resolve() / "textworld"


def check_parameters(kind: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The task's full generation parameters (defaults filled in); refuses an unknown task or a
    parameter the task does not take, before any work."""
    if kind not in PARAMETERS:
        raise ValueError(f"unknown TextWorld task {kind!r}; allowed: {list(KINDS)}")
    given = dict(params or {})
    unknown = sorted(set(given) - set(PARAMETERS[kind]))
    if unknown:
        raise ValueError(
            f"TextWorld task {kind!r} takes no generation parameter {unknown}; "
            f"allowed: {sorted(PARAMETERS[kind])}"
        )
    out = {**PARAMETERS[kind], **given}
    for key, value in out.items():
        default = PARAMETERS[kind][key]
        if isinstance(default, bool) != isinstance(value, bool) or not isinstance(
            value, type(default)
        ):
            raise ValueError(
                f"generation.{key}={value!r} is invalid for TextWorld task {kind!r}: allowed "
                f"a {type(default).__name__}"
            )
    if kind == "treasure" and not 1 <= out["level"] <= 30:
        raise ValueError(f"generation.level={out['level']!r} is invalid: allowed 1..30")
    if kind == "cooking" and out["go"] not in (1, 6, 9, 12):
        raise ValueError(f"generation.go={out['go']!r} is invalid: allowed 1, 6, 9 or 12")
    return out


def split_of(seed: int) -> str:
    """The suite's split a game seed belongs to (cooking's vocabulary split follows it)."""
    if seed >= TRAIN_SEED_MIN:
        return "train"
    return "valid" if seed < 100 else "test"


def cache_key(kind: str, params: Mapping[str, Any]) -> str:
    """The cache directory name: kind and a digest of the parameters and the versions."""
    import textworld

    blob = json.dumps(
        [kind, dict(sorted(params.items())), textworld.__version__, GAMES_VERSION], sort_keys=True
    )
    return f"{kind}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def make_game(kind: str, params: Mapping[str, Any], seed: int, path: Path) -> None:
    """Generate and compile the game of `seed` to `path` (a .z8 file; its .json beside it)."""
    with warnings.catch_warnings():  # Jericho, checking walkthroughs: TextWorld keeps the score
        warnings.filterwarnings("ignore", "Game .* is not fully supported")
        _make_game(kind, params, seed, path)


def _make_game(kind: str, params: Mapping[str, Any], seed: int, path: Path) -> None:
    import textworld
    from textworld import GameOptions

    options = GameOptions()
    options.seeds = int(seed)
    options.path = str(path)
    options.force_recompile = True
    if kind == "quest":
        options.nb_rooms = params["nb_rooms"]
        options.nb_objects = params["nb_objects"]
        options.quest_length = params["quest_length"]
        game = textworld.generator.make_game(options)
    elif kind == "treasure":
        from textworld.challenges.tw_treasure_hunter import treasure_hunter

        game = treasure_hunter.make({"level": params["level"]}, options)
    else:
        from textworld.challenges.tw_cooking import cooking

        game = cooking.make({**params, "split": split_of(seed)}, options)
    textworld.generator.compile_game(game, options)


def game_file(root: Path, kind: str, params: Mapping[str, Any], seed: int) -> Path:
    """The compiled game of `seed`, generated first if no complete copy is cached."""
    target = Path(root) / cache_key(kind, params) / str(int(seed))

    def make(work: Path) -> None:
        start = time.perf_counter()
        make_game(kind, params, seed, work / GAME_FILE)
        seconds = time.perf_counter() - start
        size = sum(p.stat().st_size for p in work.iterdir())
        meta = {"kind": kind, "params": dict(params), "seed": int(seed), "seconds": seconds}
        write_json_atomic(work / META_FILE, {**meta, "bytes": size})

    build_once(target, make, lambda d: (d / META_FILE).is_file() and (d / GAME_FILE).is_file())
    return target / GAME_FILE
