"""TextWorld games generated offline, one per seed, built once and cached.

A game is a pure function of (task kind, generation parameters, seed, textworld version): it is
made by textworld's own generators (quest: `textworld.generator.make_game`, treasure:
`textworld.challenges.tw_treasure_hunter`, cooking: `textworld.challenges.tw_cooking`), compiled
to a Z-machine file and published whole under `<games root>/<kind>-<key>/<seed>/` with
`benchmark.store.build_once`. Games are made lazily: only the seeds an episode resets with.

Seeds follow the suite's splits (benchmark.seeds): validation 0-99, test 100-199, training
>= TRAIN_SEED_MIN. Training resets fold onto a pool of `train_games` seeds (the papers train on
a fixed set of games, 1,000 per task), so training does not make a new game at every reset.

Every game is checked once, when it is made, by playing its walkthrough: a game whose walkthrough
does not win, or where a walkthrough command is answered by the parser's disambiguation question
("Which do you mean ...?": two objects whose names overlap), is not published; the next derived
generator seed is tried instead (deterministic: the same seed always ends on the same game), as
is a seed TextWorld cannot build a quest for. The most commands offered at a walkthrough state is
recorded, so a task refuses a game its command space cannot hold before any episode plays it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmark.seeds import TRAIN_SEED_MIN
from benchmark.store import build_once, write_json_atomic

# Bump when a change here makes a different game for the same key (a new cache directory).
# 2: games checked at generation (walkthrough wins, no disambiguation question), regenerated from
# the next derived seed when not
GAMES_VERSION = 2
# generator seeds tried per game seed before generation is refused
MAX_ATTEMPTS = 8
# the parser's question when a command names two objects (TextWorld's Inform 7 games)
DISAMBIGUATION = re.compile(r"which do you mean", re.IGNORECASE)
# commands that never change the game: the task's command space leaves them out (task.py)
SKIPPED = re.compile(r"^(examine\b|look$|inventory$)")
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
        # true: each game's recipe from its own seed (recipe_seed + the game seed), as the
        # released Agent-BRACE scripts draw one per game; false: every game the same recipe rng
        "recipe_per_game": False,
    },
}
KINDS = tuple(PARAMETERS)
# the integer parameters' allowed ranges (inclusive): TextWorld's own limits (treasure levels
# 1-30, cooking recipes of at most 5 ingredients), else what was measured to make a game the
# oracle wins (textworld 1.7.0, make_game + compile_game as `tw-make custom`, seed 100, 2 shared
# cores): 32 rooms, 64 objects, quest 16 made in 39 s (a 456 KB story file), won in 6 steps;
# 1 room, 0 objects, quest 1 or 32 made in 2 s / 7 s and won. Past them: the story file grows
# ~0.7 KB a room and ~0.8 KB an object (16:32 420 KB, 32:64 456 KB, 64:0 430 KB), so 64 rooms and
# 128 objects pass the Z-machine's 512 KB and fail to compile; quest 24 at 32:64 is made in
# 100 s, quest 32 in 32 rooms runs past 120 s. Cooking at recipe 5, take 5, go 12, every skill:
# made in 4 s, won in 57 commands (44 s).
RANGES: dict[str, dict[str, tuple[int, int]]] = {
    "quest": {"nb_rooms": (1, 32), "nb_objects": (0, 64), "quest_length": (1, 16)},
    "treasure": {"level": (1, 30)},
    "cooking": {"recipe": (1, 5), "take": (0, 5), "recipe_seed": (0, 2**31 - 1)},
}


def default_root() -> Path:
    """Where games are cached when no results root is known: `textworld/` under the results
    root's default (`$BENCHMARK_ROOT`, else ./outputs, as conf/paths/default.yaml)."""
    return Path(os.environ.get("BENCHMARK_ROOT", "outputs")).resolve() / "textworld"


def games_root(results_root: str | Path | None) -> Path:
    """The game cache of a results root (`<paths.root>/textworld`); default_root() without one."""
    return Path(results_root).resolve() / "textworld" if results_root else default_root()


def commands_of(admissible: list[str]) -> list[str]:
    """The command set of a step: the admissible commands that can change the game, sorted."""
    return sorted(c for c in admissible if not SKIPPED.match(c))


def check_parameters(kind: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The task's full generation parameters (defaults filled in); refuses an unknown task or a
    parameter the task does not take, before any work."""
    if kind not in PARAMETERS:
        raise ValueError(f"unknown TextWorld task {kind!r}; allowed: {list(KINDS)}")
    if params is not None and not isinstance(params, Mapping):
        raise ValueError(
            f"generation={params!r} is invalid for TextWorld task {kind!r}: allowed a mapping "
            f"of {sorted(PARAMETERS[kind])}"
        )
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
    for key, (low, high) in RANGES[kind].items():
        if not low <= out[key] <= high:
            raise ValueError(
                f"generation.{key}={out[key]!r} is invalid for TextWorld task {kind!r}: "
                f"allowed {low}..{high}"
            )
    if kind == "cooking" and out["go"] not in (1, 6, 9, 12):
        raise ValueError(f"generation.go={out['go']!r} is invalid: allowed 1, 6, 9 or 12")
    if kind == "cooking" and out["take"] > out["recipe"]:
        raise ValueError(
            f"generation.take={out['take']!r} is invalid with recipe={out['recipe']}: allowed "
            f"0..{out['recipe']} (the ingredients to find are among the recipe's)"
        )
    return out


def quest_steps(kind: str, params: Mapping[str, Any]) -> int | None:
    """The commands a game's quest takes, where known before generation (a task refuses a step
    limit below it): Quest its `quest_length`, Treasure TextWorld's length for the level
    (tw_treasure_hunter: levels 1-10 1..5, 11-20 2..10, 21-30 3..20); Cooking None (its
    walkthrough is checked against the step limit when the game is made)."""
    if kind == "quest":
        return int(params["quest_length"])
    if kind == "treasure":
        level = int(params["level"])
        first, (low, high) = ((21, (3, 20)), (11, (2, 10)), (1, (1, 5)))[
            (level < 21) + (level < 11)
        ]
        return round(low + (level - first) * (high - low) / 9)
    return None


def split_of(seed: int) -> str:
    """The suite's split a game seed belongs to (cooking's vocabulary split follows it)."""
    if seed >= TRAIN_SEED_MIN:
        return "train"
    return "valid" if seed < 100 else "test"


def split_index(seed: int) -> int:
    """A game seed's index in its split (a mixture's entry cycles with it): training
    seed - TRAIN_SEED_MIN, validation the seed, test seed - 100."""
    start = {"train": TRAIN_SEED_MIN, "valid": 0, "test": 100}[split_of(seed)]
    return int(seed) - start


def cache_key(kind: str, params: Mapping[str, Any]) -> str:
    """The cache directory name: kind and a digest of the parameters and the versions."""
    import textworld

    blob = json.dumps(
        [kind, dict(sorted(params.items())), textworld.__version__, GAMES_VERSION], sort_keys=True
    )
    return f"{kind}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def generator_seed(seed: int, attempt: int) -> int:
    """The generator seed of a game seed's `attempt`: the seed itself first (the games of
    seeds that pass keep their seed), then seeds derived from (seed, attempt) by a digest."""
    if attempt == 0:
        return int(seed)
    blob = hashlib.sha256(f"textworld-game:{int(seed)}:{attempt}".encode()).digest()
    return int.from_bytes(blob[:4], "big") % (2**31 - 1)


def make_game(kind: str, params: Mapping[str, Any], seed: int, path: Path) -> dict[str, Any]:
    """Generate, compile and check the game of `seed` at `path` (a .z8 file; its .json beside
    it), trying the next derived generator seed while a game fails its check; returns what the
    check found (meta.json's fields). Refused after MAX_ATTEMPTS generator seeds."""
    failures = []
    for attempt in range(MAX_ATTEMPTS):
        gen_seed = generator_seed(seed, attempt)
        for old in Path(path).parent.glob(Path(path).stem + ".*"):
            old.unlink()
        try:
            with warnings.catch_warnings():  # Jericho, checking walkthroughs: TextWorld scores
                warnings.filterwarnings("ignore", "Game .* is not fully supported")
                _make_game(kind, params, seed, gen_seed, path)
                problem, found = check_game(path)
        except _generation_errors() as err:  # this seed's world cannot hold the quest
            problem, found = f"generation failed: {type(err).__name__}: {err}", {}
        if problem is None:
            return {"generator_seed": gen_seed, "attempt": attempt, **found}
        failures.append(f"generator seed {gen_seed}: {problem}")
    raise RuntimeError(
        f"TextWorld {kind} game of seed {seed} with {dict(params)}: no playable game in "
        f"{MAX_ATTEMPTS} generator seeds: " + "; ".join(failures)
    )


def _generation_errors() -> tuple[type[BaseException], ...]:
    """What TextWorld's generators raise when a seed's world cannot hold the asked quest (no
    free exit, no quest of the length, too few nouns, a maker constraint)."""
    from textworld.generator.chaining import QuestGenerationError
    from textworld.generator.vtypes import NotEnoughNounsError
    from textworld.generator.world import NoFreeExitError

    return (QuestGenerationError, NoFreeExitError, NotEnoughNounsError, ValueError, IndexError)


def check_game(path: Path) -> tuple[str | None, dict[str, Any]]:
    """Play a compiled game's walkthrough: (why it is unusable or None, what was found: the
    walkthrough's length and the most commands offered at one of its states)."""
    import textworld

    infos = textworld.EnvInfos(admissible_commands=True, won=True, extras=["walkthrough"])
    env = textworld.start(str(path), infos)
    try:
        state = env.reset()
        walkthrough = list(state["extra.walkthrough"] or [])
        most = len(commands_of(state["admissible_commands"]))
        for command in walkthrough:
            state, _, _ = env.step(command)
            if DISAMBIGUATION.search(state.feedback or ""):
                return f"the walkthrough's {command!r} is answered by a disambiguation question", {}
            most = max(most, len(commands_of(state["admissible_commands"] or [])))
        if not walkthrough or not state["won"]:
            return f"its walkthrough {walkthrough} does not win", {}
        return None, {"walkthrough_steps": len(walkthrough), "max_commands": most}
    finally:
        env.close()


def _make_game(kind: str, params: Mapping[str, Any], seed: int, gen_seed: int, path: Path) -> None:
    """One generation with TextWorld's generator at `gen_seed`; cooking's vocabulary split
    follows the game seed's."""
    import textworld
    from textworld import GameOptions

    options = GameOptions()
    options.seeds = int(gen_seed)
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

        settings = {k: v for k, v in params.items() if k != "recipe_per_game"}
        if params["recipe_per_game"]:
            settings["recipe_seed"] = params["recipe_seed"] + int(seed)
        game = cooking.make({**settings, "split": split_of(seed)}, options)
    textworld.generator.compile_game(game, options)


def game_dir(root: Path, kind: str, params: Mapping[str, Any], seed: int) -> Path:
    """Where the game of `seed` at `params` lies in the cache `root` (made or not)."""
    return Path(root) / cache_key(kind, params) / str(int(seed))


def is_made(directory: Path) -> bool:
    """Whether a game directory holds a complete, checked game (what build_once publishes)."""
    return (directory / META_FILE).is_file() and (directory / GAME_FILE).is_file()


def game_file(root: Path, kind: str, params: Mapping[str, Any], seed: int) -> Path:
    """The compiled game of `seed`, generated first if no complete copy is cached."""
    target = game_dir(root, kind, params, seed)

    def make(work: Path) -> None:
        start = time.perf_counter()
        found = make_game(kind, params, seed, work / GAME_FILE)
        seconds = time.perf_counter() - start
        size = sum(p.stat().st_size for p in work.iterdir())
        meta = {"kind": kind, "params": dict(params), "seed": int(seed), "seconds": seconds}
        digest = game_digest(work / GAME_FILE)
        write_json_atomic(work / META_FILE, {**meta, **found, "bytes": size, "digest": digest})

    build_once(target, make, is_made)
    return target / GAME_FILE


# the Z-machine header's serial number (bytes 0x12-0x17): Inform writes the compile date there
Z_SERIAL = slice(0x12, 0x18)


def game_digest(game: Path) -> str:
    """The SHA-256 of a game: its TextWorld JSON (world, quest, walkthrough, texts), its Inform 7
    source and its Z-machine file with the header's serial number blanked (Inform writes the
    compile date there, the only byte that differs between two generations of one game)."""
    game = Path(game)
    digest = hashlib.sha256()
    for part in (game.with_suffix(".json"), game.with_suffix(".ni")):
        digest.update(part.read_bytes() if part.is_file() else b"")
    z = bytearray(game.read_bytes())
    z[Z_SERIAL] = bytes(Z_SERIAL.stop - Z_SERIAL.start)
    digest.update(bytes(z))
    return digest.hexdigest()


def game_meta(game: Path) -> dict[str, Any]:
    """The meta.json of a compiled game (what generation recorded and checked)."""
    return json.loads((Path(game).parent / META_FILE).read_text())
