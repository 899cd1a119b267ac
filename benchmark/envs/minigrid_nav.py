"""MiniGrid navigation tasks (FourRooms, DoorKey, Empty, SimpleCrossing).

The policy is memoryless: it sees only the 7x7x3 egocentric image, flattened and scaled to
[0, 1]. The prompts get a NavView read straight from the simulator, and the episodic memory
sigma (known map, visits, action history) is built from what the agent actually saw."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import minigrid  # noqa: F401  (registers the MiniGrid-* ids)
import numpy as np
from minigrid.core.constants import COLOR_TO_IDX, DIR_TO_VEC, OBJECT_TO_IDX, STATE_TO_IDX
from minigrid.core.world_object import WorldObj
from minigrid.minigrid_env import MiniGridEnv

from benchmark.envs.base import Episode, NavView, Task
from benchmark.envs.expert import GridPlanner
from benchmark.envs.wrappers import ActionSubset

# MiniGrid's action indices (minigrid.core.actions.Actions)
ACTION_INDEX: dict[str, int] = {
    "TURN_LEFT": 0,
    "TURN_RIGHT": 1,
    "FORWARD": 2,
    "PICKUP": 3,
    "DROP": 4,
    "TOGGLE": 5,
    "DONE": 6,
}
FACING = ("EAST", "SOUTH", "WEST", "NORTH")  # agent_dir 0..3
AGENT_CHAR = (">", "v", "<", "^")  # agent_dir 0..3 in full_grid
VIEW = 7  # MiniGrid's default agent_view_size; the agent sits at view (x=3, y=6)
# per-channel divisor: the largest index each channel of the image can hold
IMAGE_SCALE = np.array(
    [max(OBJECT_TO_IDX.values()), max(COLOR_TO_IDX.values()), max(STATE_TO_IDX.values())],
    dtype=np.float32,
)


def cell_char(obj: WorldObj | None) -> str:
    """One character per cell, as documented in NavView."""
    if obj is None or obj.type == "floor":
        return "."
    if obj.type == "door":
        return "o" if obj.is_open else "L" if obj.is_locked else "D"
    return {"wall": "#", "key": "k", "goal": "G", "lava": "~"}.get(obj.type, "b")


class EgoImageObs(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """MiniGrid's dict observation -> the image only, as float32 in [0, 1], flattened in the
    image's own (view x, view y, channel) C order: a memoryless MLP input."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        shape = env.observation_space["image"].shape
        self.observation_space = gym.spaces.Box(0.0, 1.0, (int(np.prod(shape)),), np.float32)

    def observation(self, observation: dict[str, Any]) -> np.ndarray:
        return (observation["image"].astype(np.float32) / IMAGE_SCALE).reshape(-1)


def default_max_steps(gym_id: str) -> int:
    """MiniGrid's own `max_steps` for `gym_id` (4 * size^2 for Empty and SimpleCrossing)."""
    env = gym.make(gym_id, disable_env_checker=True)
    try:
        return int(env.unwrapped.max_steps)
    finally:
        env.close()


class MiniGridTask(Task):
    """A MiniGrid env id, its reward horizon and step cap, and the actions the policy may use.

    Two limits, because MiniGrid ties its reward to its own step limit:
    - `max_steps` is MiniGrid's own `max_steps`: the reward horizon (reaching the goal pays
      1 - 0.9 * steps / max_steps) and MiniGrid's own truncation. null = the env's default
      (4 * size^2 for Empty and SimpleCrossing: 100 on Empty-5x5, 1024 on Empty-16x16, 324 on
      SimpleCrossingS9N1).
    - `step_limit` (optional) cuts validation, tuning and test episodes after that many steps
      without touching the reward (the feedback paper's 100-step cap on default-reward envs).
      Training episodes play to `max_steps`, as the feedback paper's PPO trained on the plain env.
    `actions` is a list of MiniGrid action names, or "all" for MiniGrid's seven in index order.

    `train_gym_ids` (optional) is a mixture curriculum for PPO: training slot i plays
    `train_gym_ids[i % len]` (an id other than `gym_id` keeps MiniGrid's own step limit). The
    egocentric 7x7 view has the same meaning on every grid size, so skills learnt on DoorKey-5x5
    carry over to 8x8. Validation, tuning and test episodes always play `gym_id`."""

    metric = "success"
    family = "grid"

    def __init__(
        self,
        name: str,
        gym_id: str,
        max_steps: int | None,
        actions: Sequence[str] | str,
        train_gym_ids: Sequence[str] | None = None,
        step_limit: int | None = None,
    ):
        for key, gid in [("gym_id", gym_id), *(("train_gym_ids", g) for g in train_gym_ids or [])]:
            if gid not in gym.registry or not gid.startswith("MiniGrid-"):
                known = sorted(k for k in gym.registry if k.startswith("MiniGrid-"))
                raise ValueError(f"{key} {gid!r} is not a registered MiniGrid id; known: {known}")
        if train_gym_ids is not None and len(train_gym_ids) == 0:
            raise ValueError(
                "train_gym_ids is empty: give MiniGrid ids, or null to train on gym_id"
            )
        for key, value in (("max_steps", max_steps), ("step_limit", step_limit)):
            if value is not None and int(value) < 1:
                raise ValueError(f"{key} must be >= 1 or null, got {value!r}")
        if isinstance(actions, str):
            if actions != "all":
                raise ValueError(f"actions={actions!r}: give a list of action names or 'all'")
            actions = list(ACTION_INDEX)
        bad = [a for a in actions if a not in ACTION_INDEX]
        if bad or not actions:
            raise ValueError(
                f"unknown actions {bad or list(actions)!r}; allowed: {list(ACTION_INDEX)}"
            )
        self.name = name
        self.gym_id = gym_id
        self.own_max_steps = None if max_steps is None else int(max_steps)
        # the reward horizon, resolved: what MiniGrid's reward divides by
        self.max_steps = self.own_max_steps or default_max_steps(gym_id)
        self.step_limit = None if step_limit is None else int(step_limit)
        # the longest an evaluation episode can last (what the prompts show as Step=t/N)
        self.episode_limit = min(self.max_steps, self.step_limit or self.max_steps)
        self.action_names = tuple(actions)
        self.train_gym_ids = tuple(train_gym_ids or (gym_id,))
        self.max_reward = 1.0  # MiniGrid pays 1 - 0.9 * steps / max_steps on reaching the goal

    @property
    def doorkey(self) -> bool:
        """Whether the env is DoorKey (a key to pick up, a locked door to open before the goal),
        told by its env id: the one place this is decided. The prompts (through NavView.doorkey)
        add DoorKey's key and door symbols, rules, state lines and examples. Not the actions:
        another env with PICKUP (all seven actions, KeyCorridor) is no DoorKey."""
        return self.gym_id.startswith("MiniGrid-DoorKey-")

    def make_env(self, gym_id: str | None = None, capped: bool = True) -> gym.Env:
        """The policy-facing env: flat scaled image in, the configured action subset out; `gym_id`
        with `max_steps` and, if `capped`, cut after `step_limit` steps (reward untouched)."""
        gid = gym_id or self.gym_id
        own = gid == self.gym_id
        limit = {"max_steps": self.own_max_steps} if own and self.own_max_steps else {}
        env = gym.make(gid, disable_env_checker=True, **limit)
        if own and capped and self.step_limit is not None:
            env = gym.wrappers.TimeLimit(env, max_episode_steps=self.step_limit)
        return ActionSubset(EgoImageObs(env), self.action_names, ACTION_INDEX)

    def make_training_env(self, index: int) -> gym.Env:
        return self.make_env(self.train_gym_ids[index % len(self.train_gym_ids)], capped=False)

    def episode(self, seed: int) -> MiniGridEpisode:
        return MiniGridEpisode(self, seed)

    def __repr__(self) -> str:
        return (
            f"MiniGridTask({self.name!r}, {self.gym_id!r}, max_steps={self.max_steps}, "
            f"step_limit={self.step_limit})"
        )


class MiniGridEpisode(Episode):
    """One seeded MiniGrid episode with its memory and expert."""

    # the expert's planner; a family whose goal is not 'G' plans with its own
    planner_class: type[GridPlanner] = GridPlanner

    def __init__(self, task: MiniGridTask, seed: int):
        super().__init__(task, seed)
        self.sim: MiniGridEnv = self.env.unwrapped
        self.terminated = False
        self.truncated = False
        self.last_reward = 0.0
        self._planner = self.planner_class(self.sim, [ACTION_INDEX[a] for a in self.action_names])
        # called with the action's name after every step: per-episode state kept elsewhere (the
        # released code's prompt memory, benchmark.envs.released_grid)
        self.watchers: list = []
        self._remember_position()
        self._observe()

    # -- stepping and memory -------------------------------------------------------------------

    def step(self, action: int) -> tuple[float, bool]:
        a = self.checked_action(action)
        self.obs, reward, terminated, truncated, _ = self.env.step(a)
        reward = float(reward)
        self.steps += 1
        self.total_reward += reward
        self.last_reward = reward
        self.terminated, self.truncated = bool(terminated), bool(truncated)
        self.done = self.terminated or self.truncated
        self.memory.actions.append(self.action_names[a])
        self.memory.rewards.append(reward)
        self._remember_position()
        self._observe()
        for watch in self.watchers:
            watch(self.action_names[a])
        return reward, self.done

    def _remember_position(self) -> None:
        pos = (int(self.sim.agent_pos[0]), int(self.sim.agent_pos[1]))
        self.memory.positions.append(pos)
        self.memory.visits[pos] = self.memory.visits.get(pos, 0) + 1

    def _observe(self) -> None:
        """Read the visibility mask once per step; fold the visible cells into the known map."""
        _, vis = self.sim.gen_obs_grid()
        self._vis = vis
        grid = self.sim.grid
        for (row, col), (x, y) in self.ego_to_world().items():
            if vis[col, row] and 0 <= x < grid.width and 0 <= y < grid.height:
                ch = cell_char(grid.get(x, y))
                self.memory.known_map[(x, y)] = ch
                if ch == "G" and self.memory.goal_pos is None:
                    self.memory.goal_pos = (x, y)

    # -- views -----------------------------------------------------------------------------------

    def ego_to_world(self) -> dict[tuple[int, int], tuple[int, int]]:
        """(row, col) of the egocentric view -> world (x, y), for all 49 cells; cells past the
        grid's edge get coordinates outside 0..W-1 / 0..H-1. Row = MiniGrid's view y, col = view
        x, so the agent is at (6, 3) and world = agent + (6 - row) * dir + (col - 3) * right."""
        ax, ay = (int(v) for v in self.sim.agent_pos)
        dx, dy = (int(v) for v in DIR_TO_VEC[self.sim.agent_dir])
        rx, ry = -dy, dx
        return {
            (row, col): (ax + (VIEW - 1 - row) * dx + (col - VIEW // 2) * rx,
                         ay + (VIEW - 1 - row) * dy + (col - VIEW // 2) * ry)
            for row in range(VIEW)
            for col in range(VIEW)
        }  # fmt: skip

    def visible_cells(self) -> set[tuple[int, int]]:
        """World cells inside the grid that are visible in the current view."""
        grid = self.sim.grid
        return {
            (x, y)
            for (row, col), (x, y) in self.ego_to_world().items()
            if self._vis[col, row] and 0 <= x < grid.width and 0 <= y < grid.height
        }

    def view(self) -> NavView:
        sim, grid = self.sim, self.sim.grid
        e2w = self.ego_to_world()
        visible = self.visible_cells()
        ego, doors, keys, goal = [], [], [], None
        for row in range(VIEW):
            line = []
            for col in range(VIEW):
                pos = e2w[(row, col)]
                if (row, col) == (VIEW - 1, VIEW // 2):
                    line.append("A")
                    continue
                if pos not in visible:
                    line.append("?")
                    continue
                ch = cell_char(grid.get(*pos))
                line.append(ch)
                if ch == "G":
                    goal = pos
                elif ch in "DLo":
                    doors.append((pos, ch))
                elif ch == "k":
                    keys.append(pos)
            ego.append("".join(line))
        agent = (int(sim.agent_pos[0]), int(sim.agent_pos[1]))
        full = []
        for y in range(grid.height):
            row_chars = [cell_char(grid.get(x, y)) for x in range(grid.width)]
            if y == agent[1]:
                row_chars[agent[0]] = AGENT_CHAR[sim.agent_dir]
            full.append("".join(row_chars))
        fx, fy = (int(v) for v in sim.front_pos)
        return NavView(
            ego=ego,
            facing=FACING[sim.agent_dir],
            pos=agent,
            carrying=sim.carrying.type if sim.carrying is not None else None,
            ego_to_world=e2w,
            front=cell_char(grid.get(fx, fy)),
            front_pos=(fx, fy),
            goal_pos=goal,
            doors=doors,
            keys=keys,
            full_grid=full,
            width=grid.width,
            height=grid.height,
            step=self.steps,
            max_steps=self.task.episode_limit,
            doorkey=bool(getattr(self.task, "doorkey", False)),
        )

    # -- expert and outcome ----------------------------------------------------------------------

    def expert_plan(self) -> list[int]:
        """Shortest action sequence (policy action indices) from now to the goal; [] if the
        goal cannot be reached (e.g. the episode is over)."""
        if self.done:
            return []
        index_of = {ACTION_INDEX[n]: i for i, n in enumerate(self.action_names)}
        return [index_of[a] for a in self._planner.plan()]

    def expert_action(self) -> int:
        """First action of a shortest plan; when no plan exists, action 0 (a harmless turn)."""
        plan = self.expert_plan()
        return plan[0] if plan else 0

    def optimal_actions(self) -> set[int]:
        """Every policy action index that starts a shortest plan (GridPlanner.optimal_actions);
        empty when the goal cannot be reached or the episode is over."""
        if self.done:
            return set()
        index_of = {ACTION_INDEX[n]: i for i, n in enumerate(self.action_names)}
        return {index_of[a] for a in self._planner.optimal_actions()}

    def step_fields(self) -> dict[str, Any]:
        """The agent's world (x, y) and direction (0 E, 1 S, 2 W, 3 N)."""
        return {
            "pos": [int(self.sim.agent_pos[0]), int(self.sim.agent_pos[1])],
            "dir": int(self.sim.agent_dir),
        }

    def walls(self) -> np.ndarray:
        grid = self.sim.grid
        return np.array(
            [
                [(o := grid.get(x, y)) is not None and o.type == "wall" for x in range(grid.width)]
                for y in range(grid.height)
            ],
            dtype=bool,
        )

    def outcome(self) -> dict[str, float]:
        return {"success": 1.0 if self.terminated and self.last_reward > 0 else 0.0}
