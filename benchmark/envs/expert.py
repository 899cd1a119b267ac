"""Shortest-path expert for MiniGrid, planning on the TRUE grid (the oracle consultant and the
planner hints use it; the policy never does).

Breadth-first search over (x, y, dir, carried key colour, door states, keys on the floor) with
MiniGrid's own step rules, so key -> pickup -> door -> toggle -> goal falls out of the search
instead of being scripted. Every action costs one step, so BFS gives a shortest action count.

`optimal_actions()` gives the SET of actions that start some shortest plan (several can: two
turns, or a turn and a step, may both be one step closer): from one exhaustive search of the
states reachable from the episode's start, the distance to the goal of every state, by BFS
backwards from the states one step from the goal."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from minigrid.core.actions import Actions
from minigrid.core.constants import DIR_TO_VEC
from minigrid.minigrid_env import MiniGridEnv

# door states, as in minigrid.core.constants.STATE_TO_IDX
OPEN, CLOSED, LOCKED = 0, 1, 2

# (x, y, dir, carried key colour or None, door states, positions of keys on the floor)
State = tuple[int, int, int, str | None, tuple[int, ...], tuple[tuple[int, int], ...]]

# the actions a shortest plan can use; DROP and DONE never shorten a path
PLANNING_ACTIONS = (Actions.left, Actions.right, Actions.forward, Actions.pickup, Actions.toggle)


class GridPlanner:
    """Plans from the simulator's current state. The static layout (walls, goal, doors) is read
    once; plans are cached by state, and every suffix of a shortest plan is itself shortest, so
    following the expert costs one search per episode."""

    def __init__(self, env: MiniGridEnv, allowed: Sequence[int]):
        self.env = env
        self.allowed = [a for a in PLANNING_ACTIONS if int(a) in {int(x) for x in allowed}]
        grid = env.grid
        self.width, self.height = grid.width, grid.height
        self.blocked: set[tuple[int, int]] = set()  # walls, balls, boxes
        self.goals: set[tuple[int, int]] = set()
        self.lava: set[tuple[int, int]] = set()
        self.door_index: dict[tuple[int, int], int] = {}
        self.door_colors: list[str] = []
        for y in range(self.height):
            for x in range(self.width):
                obj = grid.get(x, y)
                if obj is None or obj.type in ("floor", "key"):
                    continue
                if obj.type == "door":
                    self.door_index[(x, y)] = len(self.door_colors)
                    self.door_colors.append(obj.color)
                elif obj.type == "goal":
                    self.goals.add((x, y))
                elif obj.type == "lava":
                    self.lava.add((x, y))
                else:
                    self.blocked.add((x, y))
        self._cache: dict[State, list[int]] = {}
        self._key_colors: dict[tuple[int, int], str] = {}
        # optimal_actions(): every state explored so far -> its steps to the goal (None: never)
        self._successors: dict[State, list[tuple[int, State | None]]] = {}
        self._distance: dict[State, int | None] = {}

    def state(self) -> State:
        """The simulator's current state in planner terms."""
        env, grid = self.env, self.env.grid
        doors = []
        for x, y in self.door_index:
            door = grid.get(x, y)
            doors.append(OPEN if door.is_open else LOCKED if door.is_locked else CLOSED)
        keys = tuple(
            (x, y)
            for y in range(self.height)
            for x in range(self.width)
            if (obj := grid.get(x, y)) is not None and obj.type == "key"
        )
        carry = (
            env.carrying.color if env.carrying is not None and env.carrying.type == "key" else None
        )
        x, y = (int(v) for v in env.agent_pos)
        return (x, y, int(env.agent_dir), carry, tuple(doors), keys)

    def _next(self, s: State, action: int) -> tuple[State | None, bool]:
        """(next state or None if the action changes nothing / is fatal, reached goal)."""
        x, y, d, carry, doors, keys = s
        if action == Actions.left:
            return (x, y, (d - 1) % 4, carry, doors, keys), False
        if action == Actions.right:
            return (x, y, (d + 1) % 4, carry, doors, keys), False
        dx, dy = DIR_TO_VEC[d]
        fx, fy = x + int(dx), y + int(dy)
        front = (fx, fy)
        door = self.door_index.get(front)
        if action == Actions.forward:
            if front in self.goals:
                return None, True
            if front in self.blocked or front in self.lava or front in keys:
                return None, False
            if door is not None and doors[door] != OPEN:
                return None, False
            if not (0 <= fx < self.width and 0 <= fy < self.height):
                return None, False
            return (fx, fy, d, carry, doors, keys), False
        if action == Actions.pickup:
            if carry is None and front in keys:
                color = self._key_colors[front]
                rest = tuple(k for k in keys if k != front)
                return (x, y, d, color, doors, rest), False
            return None, False
        if action == Actions.toggle and door is not None:
            state = doors[door]
            if state == LOCKED:
                if carry != self.door_colors[door]:
                    return None, False
                new = OPEN
            else:
                new = CLOSED if state == OPEN else OPEN
            return (x, y, d, carry, doors[:door] + (new,) + doors[door + 1 :], keys), False
        return None, False

    def plan(self) -> list[int]:
        """A shortest list of MiniGrid action indices from now to the goal ([] if none)."""
        start = self.state()
        if start in self._cache:
            return list(self._cache[start])
        # the search only picks keys up, so the keys on the floor now are all it will meet
        self._key_colors = {k: self.env.grid.get(*k).color for k in start[5]}
        parent: dict[State, tuple[State, int] | None] = {start: None}
        queue = deque([start])
        while queue:
            s = queue.popleft()
            for a in self.allowed:
                nxt, done = self._next(s, int(a))
                if done:
                    return self._finish(parent, s, int(a))
                if nxt is not None and nxt not in parent:
                    parent[nxt] = (s, int(a))
                    queue.append(nxt)
        return []

    def _finish(
        self, parent: dict[State, tuple[State, int] | None], last: State, a: int
    ) -> list[int]:
        states, actions = [last], [a]
        link = parent[last]
        while link is not None:
            prev, act = link
            states.append(prev)
            actions.append(act)
            link = parent[prev]
        states.reverse()
        actions.reverse()
        for i, s in enumerate(states):
            self._cache[s] = actions[i:]
        return list(actions)

    # -- the set of optimal actions ------------------------------------------------------------

    def optimal_actions(self) -> set[int]:
        """The MiniGrid action indices (of the allowed planning actions) that start a shortest
        plan from the current state: those whose successor is one step closer to the goal, or
        that reach it when it is one step away. Empty when the goal cannot be reached. The first
        action of `plan()` is always one of them."""
        s = self.state()
        if s not in self._distance:
            self._explore(s)
        d = self._distance[s]
        if d is None:
            return set()
        return {
            a
            for a, nxt in self._successors[s]
            if (nxt is None and d == 1) or (nxt is not None and self._distance[nxt] == d - 1)
        }

    def distance(self) -> int | None:
        """Steps of a shortest plan from the current state (None when the goal is unreachable)."""
        s = self.state()
        if s not in self._distance:
            self._explore(s)
        return self._distance[s]

    def _explore(self, start: State) -> None:
        """Add every state reachable from `start` to the state graph (successor None = the goal
        is reached), then recompute all distances to the goal by BFS on the reversed graph.
        Runs once per episode, again only if the agent leaves the explored states (a key
        dropped where the search never put one)."""
        self._key_colors.update({k: self.env.grid.get(*k).color for k in start[5]})
        queue = deque([start])
        seen = {start}
        while queue:
            s = queue.popleft()
            edges = []
            for a in self.allowed:
                nxt, done = self._next(s, int(a))
                if done:
                    edges.append((int(a), None))
                elif nxt is not None and nxt != s:
                    edges.append((int(a), nxt))
                    if nxt not in seen and nxt not in self._successors:
                        seen.add(nxt)
                        queue.append(nxt)
            self._successors[s] = edges
        predecessors: dict[State, list[State]] = {}
        frontier = []
        for s, edges in self._successors.items():
            for _, nxt in edges:
                if nxt is None:
                    frontier.append(s)
                else:
                    predecessors.setdefault(nxt, []).append(s)
        distance: dict[State, int | None] = dict.fromkeys(self._successors)
        queue = deque(dict.fromkeys(frontier))
        for s in queue:
            distance[s] = 1
        while queue:
            s = queue.popleft()
            for p in predecessors.get(s, ()):
                if distance[p] is None:
                    distance[p] = distance[s] + 1
                    queue.append(p)
        self._distance = distance
