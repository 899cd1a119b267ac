"""The contract between environments and everything else (policy, prompts, consultants, evaluation).

A *task* is built from `conf/env/<name>.yaml` (`env.task`, via hydra.utils.instantiate). It makes
gymnasium envs for PPO training and `Episode`s for evaluation. An Episode is one seeded episode:
the memoryless observation the policy sees, the simulator facts the prompts need (`view()`), the
episodic memory sigma (updated on every step, queried or not) and the expert (full state)."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from benchmark.settings import CELL, WITHOUT_PPO, added, identity_of


@dataclass(frozen=True)
class TaskSettings:
    """The roles of the `env.task` keys that are not plain identity (every other key of a task
    shapes its results). A key added after tasks were cached and cells computed says the value
    that builds what every task before it built: there it stays out of every hash."""

    # what PPO's observation holds (a text game's player input): read by PPO only, so a cell
    # that runs no PPO does not see it
    ppo_input: str = added("answer", old="answer", outside=(WITHOUT_PPO,))


def env_identity(env: Any, scheme: str = CELL) -> Any:
    """An env config as every hash sees it (checkpoints, cells, fine-tuned and trained models):
    its task as TaskSettings declares it in `scheme`."""
    task = env.get("task") if isinstance(env, dict) else None
    if not isinstance(task, dict):
        return env
    return {**env, "task": identity_of(TaskSettings, task, scheme)}


@dataclass
class NavView:
    """What a navigation prompt may say, read from the MiniGrid simulator at the current step.

    Egocentric grids are lists of strings, row 0 farthest ahead, the agent in the bottom row's
    middle cell facing up ("up" = the agent's facing direction). Characters:
    '#' wall, '.' floor, 'D' closed door, 'L' locked door, 'o' open door, 'k' key, 'G' goal,
    '?' unseen (occluded or outside the grid), 'A' the agent, 'b' ball/box/other object, '~' lava.
    """

    ego: list[str]  # 7x7 egocentric view as characters (agent cell = 'A')
    facing: str  # NORTH / EAST / SOUTH / WEST
    pos: tuple[int, int]  # world (x, y), MiniGrid convention: x right, y down
    carrying: str | None  # 'key' or None
    ego_to_world: dict[tuple[int, int], tuple[int, int]]  # (row, col) of `ego` -> world (x, y)
    front: str  # character of the cell directly ahead (from the simulator)
    front_pos: tuple[int, int]
    goal_pos: tuple[int, int] | None  # world pos of the goal if visible in the view, else None
    doors: list[tuple[tuple[int, int], str]]  # visible doors: (world pos, 'D'|'L'|'o')
    keys: list[tuple[int, int]]  # world positions of visible keys
    full_grid: list[str]  # the whole true grid (rows y=0..H-1), agent as one of > v < ^
    width: int
    height: int
    step: int
    max_steps: int
    doorkey: bool = False  # the env is DoorKey (its task says so): key, door and subtask text


@dataclass
class CardView:
    """What a HigherLower prompt may say, read from the POPGym game state."""

    card: int  # current rank 0..12 as POPGym encodes it (0 = ace, low ... 12 = king)
    card_name: str  # 'A','2'..'10','J','Q','K'
    seen: list[int]  # ranks seen so far this episode, in order (current card last)
    remaining: list[int]  # remaining-deck count per rank (13 entries)
    higher: int  # remaining cards strictly above the current card
    lower: int  # remaining cards strictly below
    equal: int  # remaining cards of the same rank (a push)
    decision: int  # 0-based index of the decision about to be made
    n_decisions: int


@dataclass
class Memory:
    """Episodic memory sigma, updated on every step whether or not the consultant is queried."""

    known_map: dict[tuple[int, int], str] = field(default_factory=dict)  # world (x,y) -> char
    visits: dict[tuple[int, int], int] = field(default_factory=dict)
    positions: list[tuple[int, int]] = field(default_factory=list)  # trajectory incl. start
    actions: list[str] = field(default_factory=list)  # action names taken, in order
    rewards: list[float] = field(default_factory=list)
    goal_pos: tuple[int, int] | None = None  # cached once seen
    # HigherLower: one dict per decision: {card, action, next_card, outcome: WIN|LOSS|PUSH}
    decisions: list[dict[str, Any]] = field(default_factory=list)
    win_streak: int = 0
    loss_streak: int = 0


class Episode(abc.ABC):
    """One seeded evaluation episode."""

    action_names: tuple[str, ...]  # valid action tokens, index = policy action index
    obs: np.ndarray  # current memoryless policy observation (same as the training env's)
    memory: Memory
    seed: int
    steps: int = 0
    total_reward: float = 0.0
    done: bool = False

    def __init__(self, task: Task, seed: int):
        """Reset the task's policy-facing env with `seed`; subclasses then read their simulator."""
        self.task = task
        self.action_names = task.action_names
        self.seed = int(seed)
        self.env = task.make_env()
        self.obs, _ = self.env.reset(seed=self.seed)
        self.steps = 0
        self.total_reward = 0.0
        self.done = False
        self.memory = Memory()

    @abc.abstractmethod
    def step(self, action: int) -> tuple[float, bool]:
        """Apply a policy action index; update obs, memory, counters. Returns (reward, done)."""

    def checked_action(self, action: int) -> int:
        """`action` as an int, refused when the episode is over or it is no action index."""
        if self.done:
            raise RuntimeError(f"episode seed={self.seed} is over (step {self.steps}); reset it")
        a = int(action)
        if not 0 <= a < len(self.action_names):
            raise ValueError(f"action {a} out of range: allowed 0..{len(self.action_names) - 1}")
        return a

    @abc.abstractmethod
    def view(self) -> NavView | CardView:
        """Simulator facts for the prompt at the current step."""

    @abc.abstractmethod
    def expert_action(self) -> int:
        """Best action index from the full state (shortest path / card counting)."""

    def optimal_actions(self) -> set[int] | None:
        """Every action index that is optimal now (the analysis judges actions by it); None when
        the family has no expert set."""
        return None

    def step_fields(self) -> dict[str, Any]:
        """What the per-step analysis records about the current state (benchmark.analysis.steps:
        navigation the position and direction, HigherLower the card and the decision)."""
        return {}

    def walls(self) -> np.ndarray | None:
        """A boolean [y, x] map of the walls (the report's heatmaps draw it); None without a grid."""
        return None

    def expert_plan(self) -> list[int]:
        """Whole optimal action sequence from the current state (one-shot plans)."""
        raise NotImplementedError(f"{type(self).__name__} has no open-loop plan")

    @abc.abstractmethod
    def outcome(self) -> dict[str, float]:
        """Final per-episode metrics: {'success': 0/1} (navigation) or {'accuracy': x} (cards)."""


class Task(abc.ABC):
    """An environment family member, built from `env.task` in the config."""

    name: str
    family: str  # the env family: benchmark.envs.<family>.FAMILY (benchmark.envs.family)
    metric: str  # 'success' or 'accuracy'
    action_names: tuple[str, ...]
    max_reward: float  # best achievable episode return (tuning stops early at it)
    # True: the valid actions change per step and the observation ends with their mask, one
    # entry per action (PPO then trains policy.network.MaskedDropoutPolicy)
    masks_actions: bool = False
    # with masks_actions: the features of each action's command that the observation holds, in
    # `action_space.n` blocks just before the mask (policy.head=commands scores them); None: none
    command_dim: int | None = None

    @abc.abstractmethod
    def episode(self, seed: int) -> Episode:
        """A fresh episode reset with `seed` (validation/test seeds come from benchmark.seeds)."""

    @abc.abstractmethod
    def make_env(self) -> gym.Env:
        """The policy-facing gymnasium env (memoryless observation, the configured actions)."""

    def use_results_root(self, root: Path) -> None:
        """Where this task keeps what it makes (the job's `paths.root`): nothing by default; a
        task that generates content (TextWorld's games) caches it under the root, so a results
        root holds everything its cells need and the working directory is never written."""
        return None

    def content_summary(self, splits: Any) -> str | None:
        """One line on what the task makes before its episodes (the plan shows it): TextWorld
        says its games per split and how many are made; None for tasks that make nothing."""
        return None

    def make_training_env(self, index: int) -> gym.Env:
        """The env of slot `index` of PPO's training vector: `make_env()` unless the task trains on
        a mixture (e.g. smaller DoorKey grids as a curriculum), always with the same spaces."""
        return self.make_env()

    def training_env(self, seed: int, index: int = 0, pool: Any = None) -> gym.Env:
        """A gymnasium env for PPO whose resets draw seeds only from benchmark.seeds.training_seeds
        (`pool` [lo, hi): lo, lo+1, ..., hi-1 in order, cycled; all training seeds)."""
        from benchmark.envs.wrappers import TrainingSeeds

        return TrainingSeeds(self.make_training_env(index), seed, pool)

    def validation_env(self) -> gym.Env:
        """A gymnasium env with the same observation/action spaces, reset with explicit seeds."""
        return self.make_env()
