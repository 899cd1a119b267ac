"""The MiniGrid KeyCorridor family (MiniGrid-KeyCorridorS*R*-v0): fetch a ball behind a locked door.

A corridor of rooms; the ball lies behind a locked door, its key in another room, possibly
behind a closed door. The episode ends when the agent picks the ball up (MiniGrid's reward,
1 - 0.9 * steps / max_steps). MiniGrid lets the agent carry one object, so after unlocking the
door it must drop the key on a free cell before it can pick the ball up: the expert (BFS on the
true grid) plans with DROP, and the prompts say so.

It reuses the grid machinery (MiniGridTask, GridPlanner, the grid family's state block) and adds
the ball as the goal; the env configs are conf/env/keycorridor_*.yaml, docs/families.md."""

from __future__ import annotations

from collections.abc import Sequence

from minigrid.core.actions import Actions
from minigrid.core.constants import DIR_TO_VEC
from minigrid.minigrid_env import MiniGridEnv

from benchmark.envs import navfeatures as nf
from benchmark.envs.base import Memory, NavView
from benchmark.envs.expert import GridPlanner, State
from benchmark.envs.grid import ObjectiveFamily
from benchmark.envs.minigrid_nav import MiniGridEpisode, MiniGridTask


class KeyCorridorPlanner(GridPlanner):
    """Shortest plans to picking the ball up: PICKUP facing the ball with empty hands ends the
    search, and DROP puts the carried key on the free cell ahead (MiniGrid's one-object hand)."""

    def __init__(self, env: MiniGridEnv, allowed: Sequence[int]):
        super().__init__(env, allowed)
        self.ball = tuple(int(v) for v in env.obj.cur_pos)
        if int(Actions.drop) in {int(a) for a in allowed}:
            self.allowed = [*self.allowed, Actions.drop]

    def _next(self, s: State, action: int) -> tuple[State | None, bool]:
        x, y, d, carry, doors, keys = s
        dx, dy = (int(v) for v in DIR_TO_VEC[d])
        front = (x + dx, y + dy)
        if action == Actions.pickup and front == self.ball:
            return None, carry is None  # hands full: nothing happens
        if action == Actions.drop:
            free = (
                carry is not None
                and 0 <= front[0] < self.width
                and 0 <= front[1] < self.height
                and front not in self.blocked | self.lava | self.goals | set(self.door_index)
                and front not in keys
            )
            if not free:
                return None, False
            self._key_colors[front] = carry
            return (x, y, d, None, doors, tuple(sorted((*keys, front)))), False
        return super()._next(s, action)


class KeyCorridorTask(MiniGridTask):
    """A MiniGrid KeyCorridor env id, the grid task machinery with the ball-fetching expert and
    the `keycorridor` family."""

    family = "keycorridor"

    def __init__(
        self,
        name: str,
        gym_id: str,
        max_steps: int | None,
        actions: Sequence[str],
        step_limit: int | None = None,
    ):
        if not gym_id.startswith("MiniGrid-KeyCorridor"):
            raise ValueError(f"gym_id {gym_id!r} is not a MiniGrid KeyCorridor id")
        missing = [a for a in ("PICKUP", "DROP", "TOGGLE") if a not in actions]
        if missing:
            raise ValueError(
                f"KeyCorridor needs the actions PICKUP, DROP and TOGGLE; {missing} missing from "
                f"{list(actions)}"
            )
        super().__init__(name, gym_id, max_steps, actions, step_limit=step_limit)

    def episode(self, seed: int) -> KeyCorridorEpisode:
        return KeyCorridorEpisode(self, seed)


class KeyCorridorEpisode(MiniGridEpisode):
    """A MiniGrid episode whose expert fetches the ball."""

    planner_class = KeyCorridorPlanner


# -- the family: prompt blocks, belief task, reasons -----------------------------------------------


def ball_seen(view: NavView, memory: Memory) -> tuple[int, int] | None:
    """Where the ball was seen this episode ('b' on the known map or in view), else None."""
    seen = {p for p, ch in nf.World(view, memory).cells.items() if ch == "b"}
    return min(seen) if seen else None


def subtask(view: NavView, memory: Memory) -> str:
    """The next step of key -> locked door -> drop the key -> ball, from what the agent knows."""
    world = nf.World(view, memory)
    locked = any(ch == "L" for ch in world.cells.values())
    if view.carrying == "key" and not locked and ball_seen(view, memory):
        return "DROP THE KEY on a free cell ('.'), then PICKUP the ball ('b')"
    if view.carrying == "key":
        return "OPEN THE LOCKED DOOR ('L') -- face it with the key, then TOGGLE"
    if ball_seen(view, memory) and not locked:
        return "PICK UP THE BALL ('b') -- face it with empty hands, then PICKUP"
    return "FIND AND PICK UP THE KEY ('k'); open closed doors ('D') with TOGGLE"


def ball_lines(view: NavView, memory: Memory) -> list[str]:
    """Hand, ball and subtask: what the grid family's state block lacks for this objective."""
    ball = ball_seen(view, memory)
    where = "not seen yet" if ball is None else f"{ball}, {nf.offset_words(view, ball)}"
    return [
        "SYMBOLS: k=key b=ball (the goal) L=door(locked) D=door(closed) o=door(open)",
        f"STATUS: Carrying={view.carrying or 'nothing'}  Ball={where}",
        f"SUBTASK: {subtask(view, memory)}",
    ]


class KeyCorridorFamily(ObjectiveFamily):
    """MiniGrid KeyCorridor: the grid family's view and features, the ball as the goal, the key,
    the locked door and the one-object hand."""

    name = "keycorridor"
    kinds = ("keycorridor",)
    prompt_version = 2
    gym_id = "MiniGrid-KeyCorridor"
    world = (
        "a corridor of small rooms; a ball 'b' lies behind a locked door 'L', the key 'k' that "
        "opens it lies in another room. The episode is won by picking the ball up. The agent "
        "sees only a 7x7 window in front of it. Pick the single next action that brings it "
        "closest to holding the ball."
    )
    rules = (
        "- TOGGLE opens a closed door 'D'; a locked door 'L' opens only with the key in hand.",
        "- The agent holds one object: DROP the key on a free cell '.' before PICKUP of 'b'.",
        "- FORWARD cannot enter '#', 'k', 'b' or a closed/locked door.",
    )
    autopilot_rule = (
        "- Follow autopilot when it matches the subtask.",
        "- Explore rooms through their doors until the key and the ball are seen.",
    )
    example_lines = (
        "facing 'D' (closed door)                      -> TOGGLE",
        "facing 'k', nothing in hand                   -> PICKUP",
        "key in hand, facing 'L'                       -> TOGGLE",
        "key in hand, door open, free cell '.' ahead   -> DROP",
        "facing 'b', nothing in hand                   -> PICKUP",
    )
    belief = (
        "TASK: MiniGrid KeyCorridor. A ball lies behind a locked door; the key lies in "
        "another room. The agent must pick the ball up, dropping the key first. It sees a "
        "7x7 window in front of it."
    )

    def objective_state(self, grid_at, view, memory, level):
        lines = grid_at(level).split("\n")
        at = next(i for i, line in enumerate(lines) if line.startswith("STATE:")) + 1
        return "\n".join([*lines[:at], *ball_lines(view, memory), *lines[at:]])

    def reason(self, episode, action):
        view = episode.view()
        if action == "PICKUP":
            return "the ball is ahead" if view.front == "b" else "the key is ahead"
        if action == "DROP":
            return "free the hand for the ball"
        if action == "TOGGLE":
            return "the door is ahead"
        return subtask(view, episode.memory).split(" --")[0].lower()


FAMILY = KeyCorridorFamily()
