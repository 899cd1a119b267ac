"""Derived navigation features for the prompts, computed from a NavView and the episodic memory.

Everything here is what the agent could know: the current egocentric view plus the known map
sigma (cells it has seen). Nothing reads the true grid, except `NavView.front`, which the
simulator reports for the cell directly ahead (the agent sees it)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from benchmark.envs.base import Memory, NavView

FACINGS = ("EAST", "SOUTH", "WEST", "NORTH")  # MiniGrid's agent_dir order
VEC = {"EAST": (1, 0), "SOUTH": (0, 1), "WEST": (-1, 0), "NORTH": (0, -1)}
ARROW = {"EAST": ">", "SOUTH": "v", "WEST": "<", "NORTH": "^"}
# cells the agent can stand on (lava '~' can be entered but ends the episode: never "clear")
PASSABLE = frozenset(".oGA")
# cells FORWARD cannot enter (MiniGrid: anything that does not `can_overlap`)
BLOCKING = frozenset("#DLkb")
CELL_WORDS = {
    "#": "wall",
    ".": "floor",
    "D": "closed door",
    "L": "locked door",
    "o": "open door",
    "k": "key",
    "G": "goal",
    "?": "unknown",
    "b": "object",
    "~": "lava",
    "A": "floor",
}


def turn(facing: str, side: str) -> str:
    """The facing after turning `side` ('left' or 'right')."""
    i = FACINGS.index(facing)
    return FACINGS[(i + (1 if side == "right" else -1)) % 4]


def relative(facing: str) -> dict[str, tuple[int, int]]:
    """World step vectors of the agent's forward/left/right/back directions."""
    return {
        "forward": VEC[facing],
        "left": VEC[turn(facing, "left")],
        "right": VEC[turn(facing, "right")],
        "back": VEC[turn(turn(facing, "left"), "left")],
    }


def offset_words(view: NavView, target: tuple[int, int]) -> str:
    """Where `target` lies from the agent, in its own frame: '3 ahead, 1 left'."""
    dx, dy = target[0] - view.pos[0], target[1] - view.pos[1]
    fx, fy = VEC[view.facing]
    rx, ry = VEC[turn(view.facing, "right")]
    ahead, right = dx * fx + dy * fy, dx * rx + dy * ry
    return _axis_words((ahead, "ahead", "behind"), (right, "right", "left"))


def compass_words(view: NavView, target: tuple[int, int]) -> str:
    """Where `target` lies from the agent, north-up: '13 east, 4 north'."""
    dx, dy = target[0] - view.pos[0], target[1] - view.pos[1]
    return _axis_words((dx, "east", "west"), (dy, "south", "north"))


def _axis_words(*axes: tuple[int, str, str]) -> str:
    """'3 ahead, 1 left' from (signed distance, word when > 0, word when < 0) per axis; axes at
    0 are left out, 'here' when all are."""
    return (
        ", ".join(f"{abs(n)} {plus if n > 0 else minus}" for n, plus, minus in axes if n) or "here"
    )


class World:
    """The agent's knowledge of the grid: the known map with the current view laid over it."""

    def __init__(self, view: NavView, memory: Memory):
        self.view = view
        self.cells: dict[tuple[int, int], str] = dict(memory.known_map)
        for (row, col), pos in view.ego_to_world.items():
            ch = view.ego[row][col]
            if ch not in "?A" and 0 <= pos[0] < view.width and 0 <= pos[1] < view.height:
                self.cells[pos] = ch
        self.cells[view.front_pos] = view.front
        self.cells.setdefault(view.pos, ".")

    def at(self, pos: tuple[int, int]) -> str:
        return self.cells.get(pos, "?")

    def ahead(self, n: int = 1) -> tuple[int, int]:
        fx, fy = VEC[self.view.facing]
        return (self.view.pos[0] + n * fx, self.view.pos[1] + n * fy)


def adjacent(world: World) -> dict[str, str]:
    """Cells forward/left/right/back of the agent (back comes from the known map)."""
    x, y = world.view.pos
    return {k: world.at((x + dx, y + dy)) for k, (dx, dy) in relative(world.view.facing).items()}


def ahead_chain(world: World, n: int = 3) -> list[str]:
    return [world.at(world.ahead(i)) for i in range(1, n + 1)]


def ray(world: World, direction: str) -> int:
    """Clear (passable, known) cells in a straight line from the agent, in the known world."""
    dx, dy = relative(world.view.facing)[direction]
    x, y = world.view.pos
    return _clear_run(lambda k: world.at((x + k * dx, y + k * dy)))


def view_ray(view: NavView, direction: str) -> int:
    """Clear cells from the agent inside the 7x7 view (forward, left, right; back is unseen)."""
    rows, cols = len(view.ego), len(view.ego[0])
    row, col = rows - 1, cols // 2
    dr, dc = {"forward": (-1, 0), "left": (0, -1), "right": (0, 1)}[direction]

    def cell(k: int) -> str | None:
        r, c = row + k * dr, col + k * dc
        return view.ego[r][c] if 0 <= r < rows and 0 <= c < cols else None

    return _clear_run(cell)


def _clear_run(cell: Callable[[int], str | None]) -> int:
    """How many cells in a row, k = 1, 2, ..., are passable (`cell(k)`: the k-th cell's
    character, None past the edge)."""
    n = 0
    while cell(n + 1) in PASSABLE:
        n += 1
    return n


def longest(rays: dict[str, int]) -> str:
    best = max(rays, key=lambda k: (rays[k], -list(rays).index(k)))
    return f"{best} {rays[best]}"


def doorways(view: NavView, world: World) -> list[tuple[tuple[int, int], str]]:
    """Visible doors (D/L/o) and visible wall gaps (FourRooms' openings between rooms),
    nearest first."""
    found = {pos: ch for pos, ch in view.doors}
    for (row, col), (x, y) in view.ego_to_world.items():
        if view.ego[row][col] != "." or (x, y) in found:
            continue
        # a gap in a wall line: walls 1 and 2 cells away on both sides along one axis (a
        # one-cell-wide corridor has walls only 1 away), the other axis open
        ns = all(world.at((x, y + k)) == "#" for k in (-2, -1, 1, 2))
        ew = all(world.at((x + k, y)) == "#" for k in (-2, -1, 1, 2))
        if ns != ew:
            found[(x, y)] = "gap"
    dist = {p: abs(p[0] - view.pos[0]) + abs(p[1] - view.pos[1]) for p in found}
    return sorted(found.items(), key=lambda kv: (dist[kv[0]], kv[0]))


def quadrant(view: NavView) -> str:
    """Room label for four-room layouts: the grid quadrant (NW/NE/SW/SE) of the agent."""
    ns = "N" if view.pos[1] < view.height / 2 else "S"
    ew = "W" if view.pos[0] < view.width / 2 else "E"
    return ns + ew


def map_window(view: NavView, memory: Memory, radius: int) -> list[str]:
    """The (2r+1)-square of the known map around the agent, north up; '?' = never seen (or off
    the grid); the agent's cell shows its facing arrow (> v < ^)."""
    x0, y0 = view.pos[0] - radius, view.pos[1] - radius
    rows = []
    for y in range(y0, y0 + 2 * radius + 1):
        row = []
        for x in range(x0, x0 + 2 * radius + 1):
            row.append(
                ARROW[view.facing] if (x, y) == view.pos else memory.known_map.get((x, y), "?")
            )
        rows.append("".join(row))
    return rows


def door_state(world: World) -> str:
    """LOCKED / CLOSED / OPEN for the doors the agent knows of, or UNSEEN."""
    chars = set(world.cells.values())
    for ch, word in (("L", "LOCKED"), ("D", "CLOSED"), ("o", "OPEN")):
        if ch in chars:
            return word
    return "UNSEEN"


def subtask(view: NavView, world: World) -> str:
    """The DoorKey objective: key -> locked door -> goal, read from inventory and known doors."""
    state = door_state(world)
    if state == "OPEN":
        return "REACH THE GOAL ('G') -- go through the open door"
    if view.carrying != "key":
        return "FIND AND PICK UP THE KEY ('k') -- face it, then PICKUP"
    if state == "UNSEEN":
        return "FIND THE LOCKED DOOR ('L') -- explore with the key in hand"
    return "OPEN THE DOOR ('L'/'D') -- face it with the key, then TOGGLE"


def previews(view: NavView, world: World, actions: Sequence[str]) -> dict[str, str]:
    """What each valid action would do right now (cell entered, blocked, picked up...)."""
    out = {action: preview(view, world, action) for action in actions}
    return {action: text for action, text in out.items() if text is not None}


def preview(view: NavView, world: World, action: str) -> str | None:
    """What `action` would do right now; None for an action the previews do not describe."""
    front = view.front
    if action in ("TURN_LEFT", "TURN_RIGHT"):
        new = turn(view.facing, "left" if action == "TURN_LEFT" else "right")
        dx, dy = VEC[new]
        return f"{new[0]},'{world.at((view.pos[0] + dx, view.pos[1] + dy))}'"
    if action == "FORWARD":
        if front in BLOCKING:
            return f"blocked '{front}'"
        extra = " LAVA(ends episode)" if front == "~" else ""
        return f"{view.front_pos} '{front}'{extra}"
    if action == "PICKUP":
        if front != "k":
            return "nothing"
        return "takes key" if view.carrying is None else "hands full"
    if action == "DROP":
        if view.carrying is None:
            return "nothing held"
        return f"puts {view.carrying} ahead" if front == "." else "no room ahead"
    if action == "TOGGLE":
        if front == "L":
            return "unlocks door" if view.carrying == "key" else "locked, needs key"
        return {"D": "opens door", "o": "closes door"}.get(front, "no door")
    if action == "DONE":
        return "no effect"
    return None


@dataclass
class Hint:
    action: str | None
    length: int
    target: str  # what the path leads to, in words


def _bfs(
    world: World,
    actions: Sequence[str],
    stand_on: set[tuple[int, int]],
    face: set[tuple[int, int]],
    final: str | None,
) -> tuple[str | None, int] | None:
    """Shortest turn/forward path on the known map to standing on a `stand_on` cell or facing a
    `face` cell (then `final`, e.g. PICKUP). Returns (first action, length) or None."""
    start = (world.view.pos, world.view.facing)
    moves = [a for a in ("TURN_LEFT", "TURN_RIGHT", "FORWARD") if a in actions]
    first: dict[tuple, str | None] = {start: None}
    depth = {start: 0}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        pos, facing = state
        dx, dy = VEC[facing]
        ahead = (pos[0] + dx, pos[1] + dy)
        if pos in stand_on and state != start:
            return first[state], depth[state]
        if ahead in face and final in actions:
            return (first[state] or final), depth[state] + 1
        for move in moves:
            if move == "FORWARD":
                if world.at(ahead) not in PASSABLE:
                    continue
                nxt = (ahead, facing)
            else:
                nxt = (pos, turn(facing, "left" if move == "TURN_LEFT" else "right"))
            if nxt not in first:
                first[nxt] = first[state] or move
                depth[nxt] = depth[state] + 1
                queue.append(nxt)
    return None


# prompt.planner_hint: what the stateful prompts' `Planner hint:` line searches for
PLANNER_HINTS = ("seen_target", "frontier", "none")


def planner_hint(
    view: NavView, memory: Memory, actions: Sequence[str], mode: str = "frontier"
) -> Hint | None:
    """The `Planner hint:` of the stateful prompts, a BFS shortest path on the KNOWN map.

    frontier (the suite's): to the cached goal; in DoorKey first to the key (then PICKUP) and the
    door (then TOGGLE); with no known target, to the nearest frontier (a known free cell next to
    an unseen one), so the hint also guides exploration.
    seen_target (the authors' released code, `_bfs_hint_to_goal` / `_bfs_hint_to_target`): only
    toward the current target once it has been seen (FourRooms: the cached goal; DoorKey: the
    key without it, the door with it, the goal once the door is open); None (no line) otherwise.
    none: no hint (None)."""
    if mode not in PLANNER_HINTS:
        raise ValueError(f"prompt.planner_hint={mode!r} is unknown: allowed {list(PLANNER_HINTS)}")
    if mode == "none":
        return None
    if mode == "seen_target":
        return _seen_target_hint(view, World(view, memory), memory, actions)
    return _frontier_hint(view, memory, actions)


def _seen_target_hint(
    view: NavView, world: World, memory: Memory, actions: Sequence[str]
) -> Hint | None:
    """The current subtask's target, only once seen; None before that or when unreachable on the
    known map (the released code then shows no hint line)."""
    goal = memory.goal_pos or view.goal_pos
    cells = world.cells
    if view.doorkey and door_state(world) != "OPEN":
        if view.carrying is None:
            target, final, words = {p for p, c in cells.items() if c == "k"}, "PICKUP", "the key"
        else:
            target = {p for p, c in cells.items() if c in "LD"}
            final, words = "TOGGLE", "the door"
        found = _bfs(world, actions, set(), target, final) if target else None
        return Hint(found[0], found[1], f"{words}, then {final}") if found else None
    if goal is None or goal == view.pos:
        return None
    found = _bfs(world, actions, {goal}, set(), None)
    return Hint(found[0], found[1], "the cached goal") if found else None


def _frontier_hint(view: NavView, memory: Memory, actions: Sequence[str]) -> Hint:
    """planner_hint's `frontier` mode (see there)."""
    world = World(view, memory)
    goal = memory.goal_pos or view.goal_pos
    cells = world.cells
    if view.doorkey and view.carrying is None and door_state(world) != "OPEN":
        keys = {p for p, ch in cells.items() if ch == "k"}
        if keys:
            found = _bfs(world, actions, set(), keys, "PICKUP")
            if found:
                return Hint(found[0], found[1], "the key, then PICKUP")
    if "TOGGLE" in actions:
        doors = {p for p, ch in cells.items() if ch == "D" or (ch == "L" and view.carrying)}
        if doors and door_state(world) != "OPEN":
            found = _bfs(world, actions, set(), doors, "TOGGLE")
            if found:
                return Hint(found[0], found[1], "the door, then TOGGLE")
    if goal is not None:
        if goal == view.pos:
            return Hint(None, 0, "the goal (you are on it)")
        found = _bfs(world, actions, {goal}, set(), None)
        if found:
            return Hint(found[0], found[1], "the cached goal")
    frontier = {
        p
        for p, ch in cells.items()
        if ch in PASSABLE
        and any(
            (p[0] + dx, p[1] + dy) not in cells
            and 0 <= p[0] + dx < view.width
            and 0 <= p[1] + dy < view.height
            for dx, dy in VEC.values()
        )
    }
    frontier.discard(view.pos)
    if frontier:
        found = _bfs(world, actions, frontier, set(), None)
        if found:
            return Hint(found[0], found[1], "the nearest unexplored area")
    return Hint(None, 0, "nothing reachable on the known map")


def loop_warning(memory: Memory, pos: tuple[int, int], window: int = 12) -> str | None:
    """A warning when the recent trajectory circles: many steps, few distinct cells."""
    recent = memory.positions[-window:]
    here = memory.visits.get(pos, 0)
    if len(recent) >= window and len(set(recent)) <= window // 4:
        return f"LOOP: last {window} steps covered only {len(set(recent))} cells"
    if here >= 4:
        return f"LOOP: this cell visited {here} times"
    return None


def recent_cells(memory: Memory, n: int = 5) -> list[tuple[tuple[int, int], int]]:
    """The last `n` distinct cells before the current one, oldest first, with visit counts."""
    out: list[tuple[int, int]] = []
    for p in reversed(memory.positions[:-1]):
        if p not in out and p != (memory.positions[-1] if memory.positions else None):
            out.append(p)
        if len(out) == n:
            break
    return [(p, memory.visits.get(p, 0)) for p in reversed(out)]
