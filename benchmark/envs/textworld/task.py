"""The TextWorld task, its episodes and the policy's fixed, masked command space.

Commands: at each step the game's admissible commands, less those that never change the game
(`examine ...`, `look`, `inventory`: the observation already holds the room and the inventory),
sorted, fill the first slots of a fixed action space of `max_commands` slots; the other slots are
masked (one sends no command: a wasted turn). The episode's `action_names` are those commands,
so an action index means the same to PPO, to the consultants and to the prompts.

Observation (the policy's, no LM): hashed bags of words, all 0/1, concatenated:
  [TEXT_DIM: the game's last answer + the objective]
  (`ppo_input: player` adds [TEXT_DIM: the room's description] [TEXT_DIM: the inventory])
  [max_commands x command_dim: each slot's command (COMMAND_DIM words; PLAYER_COMMAND_DIM under
   `player`, fewer collisions for the command-scoring head, policy.head=commands)]
  [max_commands: the action mask, 1 = the slot holds an admissible command].
The mask is the observation's last `max_commands` entries (policy.network.MaskedDropoutPolicy
reads it there), so PPO never samples a masked slot and the gate's entropy counts only
admissible commands.

Reward: the game's score gained, divided by the game's maximum score (an episode's best return is
1.0); success: the game is won."""

from __future__ import annotations

import json
import logging
import re
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from benchmark.envs.base import Episode, Memory, Task
from benchmark.envs.textworld import games, planner
from benchmark.envs.textworld.facts import World
from benchmark.envs.textworld.planner import ShortestPlans
from benchmark.seeds import TRAIN_SEED_MIN

log = logging.getLogger(__name__)

TEXT_DIM, COMMAND_DIM = 256, 16
PLAYER_COMMAND_DIM = 64
# what PPO's observation holds (above): `answer` the last answer and the objective; `player` also
# the room's description and the inventory, what a player sees (TextWorld prints each with a
# hidden command per step, so `player` steps slower)
PPO_INPUTS = ("answer", "player")
SKIPPED = games.SKIPPED  # commands that never change the game (left out of the command space)
commands_of = games.commands_of  # the command set of a step (games.py checks it at generation)
_WORD = re.compile(r"[a-z0-9]+")
_TEXT_LINE = re.compile(r"[A-Za-z]{2}")


def clean(text: str) -> str:
    """Game text without TextWorld's banner (lines without a word), the `>` prompt line."""
    lines = []
    for line in (text or "").splitlines():
        s = line.strip()
        if s.startswith(">") or (s and not _TEXT_LINE.search(s)):
            continue
        lines.append(s)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def hashed_words(text: str, dim: int) -> np.ndarray:
    """A 0/1 bag of words hashed into `dim` buckets (crc32: the same on every machine)."""
    out = np.zeros(dim, dtype=np.float32)
    for word in _WORD.findall(text.lower()):
        out[zlib.crc32(word.encode()) % dim] = 1.0
    return out


@dataclass
class TextView:
    """What a TextWorld prompt may say at the current step (all of it shown to a player), and
    the true facts, which no prompt shows: Agent-BRACE's claim rules check object claims
    against them (facts.World)."""

    observation: str  # the game's answer to the last command (the intro at the start)
    description: str  # the current room's description (what `look` prints)
    inventory: str
    objective: str
    room: str
    commands: tuple[str, ...]  # the valid commands now
    score: int
    max_score: int
    moves: int
    max_steps: int
    facts: tuple[tuple[str, ...], ...] = ()  # (predicate, argument, ...), sorted


@dataclass
class TextMemory(Memory):
    """The grid families' memory plus what a text game remembers: every command with the first
    line of its answer, the rooms in the order first entered, and the exits walked."""

    transcript: list[tuple[str, str]] = field(default_factory=list)
    rooms: list[str] = field(default_factory=list)
    exits: dict[str, dict[str, str]] = field(default_factory=dict)  # room -> {command: room}
    seen: list[str] = field(default_factory=list)  # objects, in the order first seen


class TextGameEnv(gym.Env):
    """One TextWorld game per reset (the game of the reset's seed), with the fixed command space.
    `expert=True` also asks TextWorld for the winning commands and the true facts (episodes)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, task: TextWorldTask, expert: bool = False):
        import textworld

        self.task, self.expert = task, expert
        k = task.max_commands
        self.sees_room = task.ppo_input == "player"
        size = TEXT_DIM * (3 if self.sees_room else 1) + k * task.command_dim + k
        self.observation_space = gym.spaces.Box(0.0, 1.0, (size,), np.float32)
        self.action_space = gym.spaces.Discrete(k)
        self.infos = textworld.EnvInfos(
            admissible_commands=True,
            # each costs TextWorld a hidden command per step: prompts and the player input only
            description=expert or self.sees_room,
            inventory=expert or self.sees_room,
            objective=True,
            max_score=True,
            won=True,
            lost=True,
            policy_commands=expert,
            facts=expert,
            extras=["walkthrough"] if expert else [],
        )
        self.game = None
        self.state: Any = None
        self.commands: list[str] = []
        self.played: list[str] = []  # this episode's commands (pickling replays them)
        self.path: Path | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is None:
            raise ValueError("a TextWorld reset needs a seed: it names the game")
        self.close()
        self.path = self.task.game_file(self.task.game_seed(int(seed)))
        self._start()
        self.score, self.moves, self.played = 0, 0, []
        self._read()
        return self.observation(), {}

    def _start(self) -> None:
        import textworld

        with warnings.catch_warnings():  # Jericho: TextWorld, not Jericho, keeps the score
            warnings.filterwarnings("ignore", "Game .* is not fully supported")
            self.game = textworld.start(str(self.path), self.infos)
            self.state = self.game.reset()

    def __getstate__(self) -> dict[str, Any]:
        """Everything but the running game (a Z-machine: it does not pickle); unpickling
        replays this episode's commands on the same game, which is deterministic."""
        return {**self.__dict__, "game": None, "state": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.path is not None:
            self._start()
            for command in self.played:
                self.state, _, _ = self.game.step(command)

    def _read(self) -> None:
        self.commands = commands_of(self.state["admissible_commands"])
        if len(self.commands) > self.task.max_commands:
            raise RuntimeError(
                f"game {self.path} offers {len(self.commands)} commands, more than "
                f"max_commands={self.task.max_commands}: raise the task's max_commands"
            )

    def text(self) -> str:
        """What the policy reads: the game's last answer and the objective."""
        return f"{self.state.feedback or ''} {self.state['objective'] or ''}"

    def observation(self) -> np.ndarray:
        k, dim = self.task.max_commands, self.task.command_dim
        slots = np.zeros((k, dim), dtype=np.float32)
        mask = np.zeros(k, dtype=np.float32)
        for i, command in enumerate(self.commands):
            slots[i] = hashed_words(command, dim)
            mask[i] = 1.0
        texts = [self.text()]
        if self.sees_room:
            texts += [self.state["description"] or "", self.state["inventory"] or ""]
        blocks = [hashed_words(text, TEXT_DIM) for text in texts]
        return np.concatenate([*blocks, slots.ravel(), mask])

    def step(self, action: int):
        """A masked slot sends no command and wastes the turn (the masked policy never picks
        one; a gymnasium env must take every action of its space)."""
        a = int(action)
        if not 0 <= a < self.task.max_commands:
            raise ValueError(f"action {a} out of range: allowed 0..{self.task.max_commands - 1}")
        score, done = self.score, False
        if a < len(self.commands):
            self.state, score, done = self.game.step(self.commands[a])
            self.played.append(self.commands[a])
            self._read()
        reward = (score - self.score) / max(1, int(self.state["max_score"]))
        self.score, self.moves = score, self.moves + 1
        terminated = bool(done or self.state["won"] or self.state["lost"])
        truncated = not terminated and self.moves >= self.task.max_steps
        return self.observation(), float(reward), terminated, truncated, {}

    def close(self) -> None:
        if self.game is not None:
            self.game.close()
            self.game = None


class TextWorldTask(Task):
    """A TextWorld task (quest, treasure or cooking) at fixed generation parameters."""

    family = "textworld"
    metric = "success"
    max_reward = 1.0
    masks_actions = True  # the observation ends with the action mask (MaskedDropoutPolicy)

    def __init__(
        self,
        name: str,
        game: str,
        generation: dict[str, Any] | list[dict[str, Any]] | None = None,
        evaluation_generation: dict[str, Any] | list[dict[str, Any]] | None = None,
        max_steps: int = 50,
        max_commands: int = 32,
        train_games: int = 100,
        games_dir: str | None = None,
        ppo_input: str = PPO_INPUTS[0],
    ):
        """`game`: quest | treasure | cooking; `generation`: its parameters
        (games.PARAMETERS, defaults filled in), or a list of them: a mixture, cycled per game
        (the split's k-th game takes entry k mod its length, as Agent-BRACE's released
        generation scripts do); `evaluation_generation`: the validation and test games' (a
        dict: the parameters that differ from `generation`'s; a list: a mixture of its own;
        Agent-BRACE makes them harder); `train_games`: the size of the training pool;
        `games_dir`: the game cache (default: `textworld/` under the job's results root,
        use_results_root); `ppo_input`: what PPO's observation holds (PPO_INPUTS)."""
        self.mixture = [games.check_parameters(game, p) for p in _entries(generation)]
        if isinstance(evaluation_generation, (list, tuple)):
            self.eval_mixture = [
                games.check_parameters(game, p) for p in _entries(evaluation_generation)
            ]
        else:  # what differs from each training entry
            self.eval_mixture = [
                games.check_parameters(game, {**p, **(evaluation_generation or {})})
                for p in _entries(generation)
            ]
        self.params, self.eval_params = self.mixture[0], self.eval_mixture[0]
        for key, value in (("max_steps", max_steps), ("max_commands", max_commands)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key}={value!r} is invalid: allowed an integer >= 1")
        self.cut_short: set[int] = set()  # the quest lengths past max_steps already said
        for params in self.mixture + self.eval_mixture:  # a quest the step limit cuts off
            self._warn_cut_short(game, params, games.quest_steps(game, params), max_steps)
        if isinstance(train_games, bool) or not isinstance(train_games, int) or train_games < 1:
            raise ValueError(f"train_games={train_games!r} is invalid: allowed an integer >= 1")
        if ppo_input not in PPO_INPUTS:
            raise ValueError(f"ppo_input={ppo_input!r}: allowed {PPO_INPUTS}")
        self.ppo_input = ppo_input
        self.command_dim = PLAYER_COMMAND_DIM if ppo_input == "player" else COMMAND_DIM
        self.name, self.game = name, game
        self.max_steps, self.max_commands = max_steps, max_commands
        self.train_games = train_games
        self.games_dir = Path(games_dir) if games_dir else None
        self.results_root: Path | None = None
        # fixed-size names for the sizes (tau's range: log2 of the slots); episodes name the
        # slots by their commands
        self.action_names = tuple(f"slot{i}" for i in range(max_commands))

    def game_seed(self, seed: int) -> int:
        """The game a reset seed plays: evaluation seeds their own, training seeds one of the
        `train_games` training games."""
        if seed < 0:
            raise ValueError(f"seed {seed} is invalid: allowed >= 0")
        if seed < TRAIN_SEED_MIN:
            return seed
        return TRAIN_SEED_MIN + (seed - TRAIN_SEED_MIN) % self.train_games

    def use_results_root(self, root: Path) -> None:
        self.results_root = Path(root)

    def games_cache(self) -> Path:
        """Where this task's games lie: `games_dir` when set, else `<paths.root>/textworld`."""
        return self.games_dir or games.games_root(self.results_root)

    def game_params(self, seed: int) -> dict[str, Any]:
        """The generation parameters of a game seed: validation and test games at
        `evaluation_generation`; a mixture's entry cycled by the game's index in its split
        (training: seed - TRAIN_SEED_MIN, validation: the seed, test: seed - 100)."""
        if seed < 0:
            raise ValueError(f"seed {seed} is invalid: allowed >= 0")
        mixture = self.mixture if seed >= TRAIN_SEED_MIN else self.eval_mixture
        return mixture[games.split_index(seed) % len(mixture)]

    def is_made(self, seed: int) -> bool:
        """Whether the game of a game seed is in the cache already (generation skips it)."""
        return games.is_made(
            games.game_dir(self.games_cache(), self.game, self.game_params(seed), seed)
        )

    def game_file(self, seed: int) -> Path:
        """The game of a game seed, made and checked first when not cached; said once when its
        walkthrough takes more commands than the step limit (an episode may not win); refused
        when a state of it offers more commands than the `max_commands` slots of the action
        space."""
        path = games.game_file(self.games_cache(), self.game, self.game_params(seed), seed)
        data = json.loads(path.with_suffix(".json").read_text())
        walkthrough = data["metadata"].get("walkthrough") or []
        needed = sum(not SKIPPED.match(command) for command in walkthrough)
        self._warn_cut_short(self.game, f"seed {seed}", needed, self.max_steps)
        offered = games.game_meta(path)["max_commands"]
        if offered > self.max_commands:
            raise ValueError(
                f"TextWorld {self.game} game of seed {seed} ({path}) offers {offered} commands "
                f"on its walkthrough, more than max_commands={self.max_commands}: allowed "
                f"max_commands >= {offered} for these games (env.task.max_commands)"
            )
        return path

    def _warn_cut_short(self, game: str, what: Any, steps: int | None, max_steps: int) -> None:
        """Say once per quest length that episodes end before the quest can be won (success 0
        whatever the agent). A warning, not a refusal: Agent-BRACE's RL rollouts cap episodes
        below the quest on purpose (brace.rl_max_steps)."""
        if steps is None or steps <= max_steps or steps in self.cut_short:
            return
        self.cut_short.add(steps)
        log.warning(
            "max_steps=%d is shorter than TextWorld %s's quest at %s (%d commands): its episodes "
            "end before they can be won; allowed max_steps >= %d to win them",
            max_steps, game, what, steps, steps,
        )  # fmt: skip

    def content_summary(self, splits: Any) -> str | None:
        """The games per split (a mixture's size), the step limit and how many are made."""
        seeds = {
            "training": range(TRAIN_SEED_MIN, TRAIN_SEED_MIN + self.train_games),
            **{name: splits.ranges[name] for name in ("validation", "test")},
        }
        made = sum(self.is_made(s) for r in seeds.values() for s in r)
        kinds = {"training": len(self.mixture), "validation": len(self.eval_mixture)}
        kinds["test"] = kinds["validation"]
        parts = [
            f"{len(r):,} {name}" + (f" (mixture of {kinds[name]})" if kinds[name] > 1 else "")
            for name, r in seeds.items()
        ]
        total = sum(len(r) for r in seeds.values())
        return (
            f"games: {self.name} {', '.join(parts)}; {self.max_steps} steps per episode; "
            f"{made:,} of {total:,} made under {self.games_cache()}"
        )

    def make_env(self) -> TextGameEnv:
        return TextGameEnv(self)

    def episode(self, seed: int) -> TextWorldEpisode:
        return TextWorldEpisode(self, seed)

    def __repr__(self) -> str:
        return f"TextWorldTask({self.name!r}, {self.game!r}, {self.mixture})"


def _entries(generation: Any) -> list[dict[str, Any]]:
    """A generation setting as a list of parameter dicts (a dict: one entry)."""
    if generation is None or isinstance(generation, dict):
        return [dict(generation or {})]
    if isinstance(generation, (list, tuple)) and generation:
        return [dict(p) if isinstance(p, dict) else p for p in generation]
    raise ValueError(
        f"generation={generation!r} is invalid: allowed a dict of generation parameters or a "
        "non-empty list of them (a mixture)"
    )


# searches kept by this process: the cells of a sweep play the same test games from the same
# states, and one search of a Cooking game can take tens of seconds (the oldest go first)
SEARCHES_KEPT = 4096
_SEARCHED: dict[tuple, ShortestPlans | planner.SearchTooLarge] = {}


def _plans_key(path: Path | None, progression: Any) -> tuple:
    """Everything planner.shortest_plans reads: the game (its file, content-addressed in the game
    cache), the true facts, the quests' progress, and the search's size limit."""
    stamp = path.stat().st_mtime_ns if path is not None else None
    quests = tuple((q.completable, q.done) for q in progression.quest_progressions)
    return (
        str(path),
        stamp,
        planner.MAX_STATES,
        progression.tracking_quests,
        progression.done,
        quests,
        frozenset(progression.state.facts),
    )


class TextWorldEpisode(Episode):
    """One seeded game, with the expert's winning commands and the true facts."""

    def __init__(self, task: TextWorldTask, seed: int):
        self.task, self.seed = task, int(seed)
        self.env = TextGameEnv(task, expert=True)
        self.obs, _ = self.env.reset(seed=self.seed)
        self.steps, self.total_reward, self.done = 0, 0.0, False
        self.won = False
        self.memory = TextMemory()
        self.action_names = tuple(self.env.commands)
        self._plans: tuple[int, ShortestPlans] | None = None  # (step, its plans)
        self._inform7: Any = None
        self._search_too_large = False  # planner.SearchTooLarge once: TextWorld's own command
        # the walkthrough's commands still to play while the episode follows it (None after a
        # detour): the expert's commands where the search and TextWorld give none
        self._route: list[str] | None = [c for c in self.walkthrough() if not SKIPPED.match(c)]
        self._enter(self.room())

    def _enter(self, room: str) -> None:
        """Record the room as entered and the objects the player sees now as seen."""
        mem = self.memory
        if room not in mem.rooms:
            mem.rooms.append(room)
        mem.seen += [o for o in World(self.fact_tuples()).visible() if o not in mem.seen]

    def step(self, action: int) -> tuple[float, bool]:
        a = self.checked_action(action)
        command, before = self.action_names[a], self.room()
        route = self._ahead(self.action_names)
        self._route = route[1:] if route and route[0] == command else None
        self.obs, reward, terminated, truncated, _ = self.env.step(a)
        self.steps += 1
        self.total_reward += reward
        self.won = bool(self.env.state["won"])
        self.done = terminated or truncated
        self.action_names = tuple(self.env.commands)
        mem, after = self.memory, self.room()
        mem.actions.append(command)
        mem.rewards.append(reward)
        first = next((x for x in clean(self.env.state.feedback).splitlines() if x), "")
        mem.transcript.append((command, first))
        if after != before:
            mem.exits.setdefault(before, {})[command] = after
        self._enter(after)
        if self.done:
            self.env.close()
        return reward, self.done

    # -- the true state -------------------------------------------------------------------------

    def fact_tuples(self) -> tuple[tuple[str, ...], ...]:
        """TextWorld's true facts now, as (predicate, argument, ...) tuples (sorted)."""
        return tuple(
            sorted((p.name, *(str(v.name) for v in p.arguments)) for p in self.env.state["facts"])
        )

    def facts(self) -> list[str]:
        """TextWorld's true facts now, as `name(arg, ...)` strings (sorted)."""
        return sorted(f"{name}({', '.join(args)})" for name, *args in self.fact_tuples())

    def room(self) -> str:
        """The player's room, from the true facts (`at(P, room)`)."""
        for p in self.env.state["facts"]:
            if p.name == "at" and p.arguments[0].name == "P":
                return p.arguments[1].name
        return "?"

    def walkthrough(self) -> list[str]:
        """The game's own solution from its start (generation's walkthrough)."""
        return list(self.env.state["extra.walkthrough"] or [])

    # -- the suite's questions ------------------------------------------------------------------

    def view(self) -> TextView:
        s = self.env.state
        return TextView(
            observation=clean(s.feedback),
            description=clean(s["description"]),
            inventory=clean(s["inventory"]),
            objective=clean(s["objective"]),
            room=self.room(),
            commands=self.action_names,
            score=int(self.env.score),
            max_score=int(s["max_score"]),
            moves=self.steps,
            max_steps=self.task.max_steps,
            facts=self.fact_tuples(),
        )

    def shortest_plans(self) -> ShortestPlans:
        """Every command that starts a shortest winning plan from the current state, searched on
        TextWorld's world model (planner.py); computed once per step."""
        if self._plans is None or self._plans[0] != self.steps:
            from textworld.generator.inform7 import Inform7Game

            progression = self.env.state["_game_progression"]
            key = _plans_key(self.env.path, progression)
            if key not in _SEARCHED:
                if self._inform7 is None:
                    self._inform7 = Inform7Game(progression.game)
                try:
                    _SEARCHED[key] = planner.shortest_plans(progression, self._inform7)
                except planner.SearchTooLarge as err:
                    _SEARCHED[key] = err
                while len(_SEARCHED) > SEARCHES_KEPT:
                    del _SEARCHED[next(iter(_SEARCHED))]
            found = _SEARCHED[key]
            if isinstance(found, planner.SearchTooLarge):
                raise planner.SearchTooLarge(str(found))
            self._plans = (self.steps, found)
        return self._plans[1]

    def optimal_actions(self) -> set[int]:
        """Every command index that starts a shortest winning plan now (replanned from the
        current state, as the grids' planner does); empty when no plan wins or the episode is
        over. A game too large for the search (planner.SearchTooLarge, seen on Cooking games of
        the Agent-BRACE presets) falls back, for the rest of the episode, to TextWorld's own next
        winning command, the expert set before the search existed, with one warning."""
        if self.done:
            return set()
        if self._search_too_large:
            return self._policy_command()
        try:
            commands = self.shortest_plans().commands
        except planner.SearchTooLarge as err:
            log.warning(
                "game %s (seed %d): %s; the expert set is TextWorld's next winning command",
                self.env.path,
                self.seed,
                err,
            )
            self._search_too_large = True
            return self._policy_command()
        missing = sorted(commands - set(self.action_names))
        if missing:  # the world model and the game disagree: never guess
            raise RuntimeError(
                f"game {self.env.path} (seed {self.seed}) at step {self.steps}: the shortest "
                f"plans start with {missing}, not among the valid commands {list(self.action_names)}"
            )
        return {i for i, c in enumerate(self.action_names) if c in commands}

    def _policy_command(self) -> set[int]:
        """TextWorld's own next winning command (its walkthrough, or a way back after a detour);
        where it gives none (its Cooking games of many ingredients), the walkthrough's next one
        while the episode has followed the walkthrough (checked to win when the game was made).
        Commands that never change the game (`inventory`, `examine cookbook`) are passed over:
        no slot holds them."""
        policy = [c for c in self.env.state["policy_commands"] or [] if not SKIPPED.match(c)]
        if policy and policy[0] in self.action_names:
            return {self.action_names.index(policy[0])}
        route = self._ahead(self.action_names)
        return {self.action_names.index(route[0])} if route else set()

    def _ahead(self, admissible: tuple[str, ...]) -> list[str]:
        """The walkthrough's commands still to play, from the first one admissible now: one
        that is not (the walkthrough's `open` of a door already open) changes nothing, as
        TextWorld refuses it; empty after a detour from the walkthrough."""
        if self._route is None:
            return []
        route = list(self._route)
        while route and route[0] not in admissible:
            route.pop(0)
        return route

    def expert_plan(self) -> list[int]:
        """The expert's next command, one of the shortest plans' starts (only the first command of
        a plan is sure to be admissible now): TextWorld's own next winning command when it starts
        a shortest plan (from the start state, the walkthrough's), else the first in command
        order."""
        optimal = self.optimal_actions()
        if not optimal:
            raise RuntimeError(
                f"game {self.env.path} (seed {self.seed}) at step {self.steps}: no winning "
                f"command among the valid ones {list(self.action_names)}"
            )
        own = self._policy_command() & optimal
        return [min(own or optimal)]

    def expert_action(self) -> int:
        return self.expert_plan()[0]

    def step_fields(self) -> dict[str, Any]:
        """The room, the score, the valid commands and the true facts (the state TextWorld
        tracks), for the per-step records."""
        return {
            "room": self.room(),
            "score": int(self.env.score),
            "commands": list(self.action_names),
            "facts": self.facts(),
        }

    def outcome(self) -> dict[str, float]:
        return {"success": float(self.won)}
