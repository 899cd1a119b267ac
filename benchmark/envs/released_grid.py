"""The released code's MiniGrid prompts (protocol=official, prompt.style=released): what the
authors' code (github jrzmnt/ask-pomdp: eval_ppo_slm.py for FourRooms, door_key/eval.py for
DoorKey) shows the SLM, reproduced from the simulator of one of our episodes. Its view is the
raw observation image (columns of the agent's view as text lines, the carried object on the
agent's cell), its episodic state is its own (`ReleasedMemory`), and its text is its template,
quirks included (the view-ray names, a turn in place counting as 'stuck' in FourRooms), because
the point is to send what the released code sends: tests/test_official_parity.py compares the
two on the same states. The suite's own prompts are benchmark.envs.grid."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from minigrid.core.constants import OBJECT_TO_IDX

from benchmark.envs.family import ReleasedText
from benchmark.envs.minigrid_nav import ACTION_INDEX

# object index -> character, per env (FourRooms: '?' unseen, 'L' lava; DoorKey: ' ' unseen, '~')
FR_CHARS = {0: "?", 1: ".", 2: "#", 3: ".", 4: "D", 5: "k", 6: "b", 7: "B", 8: "G", 9: "L", 10: "A"}
DK_CHARS = {**FR_CHARS, 0: " ", 9: "~"}
DOOR_STATE = {0: "o", 1: "D", 2: "L"}  # DoorKey: a door's state channel
FACING = ("EAST", "SOUTH", "WEST", "NORTH")
VEC = ((1, 0), (0, 1), (-1, 0), (0, -1))
LETTER = {"TURN_LEFT": "L", "TURN_RIGHT": "R", "FORWARD": "F", "PICKUP": "P", "DROP": "D"}
LETTER |= {"TOGGLE": "T", "DONE": "E"}
AGENT_IJ = (3, 6)  # the agent's cell in the image: image[3][6]
DOOR_CHARS = ("L", "D", "o")
# the released parsers' token tables, in the order they are tried (substring match)
FR_TOKENS = (
    ("TURN_LEFT", "TURN_LEFT"),
    ("TURN_RIGHT", "TURN_RIGHT"),
    ("FORWARD", "FORWARD"),
    ("LEFT", "TURN_LEFT"),
    ("RIGHT", "TURN_RIGHT"),
    ("UP", "FORWARD"),
)
_DK = [(a, a) for a in ACTION_INDEX] + [
    ("LEFT", "TURN_LEFT"),
    ("RIGHT", "TURN_RIGHT"),
    ("FWD", "FORWARD"),
    ("PICK", "PICKUP"),
    ("PICK_UP", "PICKUP"),
]
DK_TOKENS = tuple(sorted(_DK, key=lambda kv: len(kv[0]), reverse=True))  # longest first (stable)


class Scene:
    """One state of the simulator as the released code reads it."""

    def __init__(self, sim: Any, doorkey: bool):
        self.sim, self.doorkey = sim, doorkey
        self.image = sim.gen_obs()["image"]  # what the last step returned (gen_obs is pure)
        self.pos = (int(sim.agent_pos[0]), int(sim.agent_pos[1]))
        self.dir = int(sim.agent_dir)

    def char(self, i: int, j: int) -> str:
        obj, state = int(self.image[i, j, 0]), int(self.image[i, j, 2])
        if self.doorkey and obj == 4:
            return DOOR_STATE.get(state, "D")
        return (DK_CHARS if self.doorkey else FR_CHARS).get(obj, "?")

    def to_world(self, i: int, j: int) -> tuple[int, int]:
        """image[i][j] -> world (x, y), MiniGrid's view geometry."""
        (fx, fy), (rx, ry) = VEC[self.dir], VEC[(self.dir + 1) % 4]
        x0, y0 = self.pos[0] + fx * 6 - rx * 3, self.pos[1] + fy * 6 - ry * 3
        return x0 - fx * j + rx * i, y0 - fy * j + ry * i

    def world(self, x: int, y: int) -> str:
        grid = self.sim.grid
        if not (0 <= x < grid.width and 0 <= y < grid.height):
            return "#"
        cell = grid.get(x, y)
        if cell is None:
            return "."
        if self.doorkey and cell.type == "door":
            return "o" if cell.is_open else "L" if cell.is_locked else "D"
        chars = DK_CHARS if self.doorkey else FR_CHARS
        return chars.get(OBJECT_TO_IDX.get(cell.type, 1), ".")

    def ego(self, target: tuple[int, int]) -> tuple[int, int]:
        """(steps forward, steps right) from the agent to `target`."""
        dx, dy = target[0] - self.pos[0], target[1] - self.pos[1]
        (fx, fy), (rx, ry) = VEC[self.dir], VEC[(self.dir + 1) % 4]
        return dx * fx + dy * fy, dx * rx + dy * ry

    def around(self, turns: int, k: int = 1) -> str:
        """The world character k cells away in direction dir + turns."""
        vx, vy = VEC[(self.dir + turns) % 4]
        return self.world(self.pos[0] + vx * k, self.pos[1] + vy * k)

    def view_text(self) -> str:
        return "\n".join("".join(self.char(i, j) for j in range(7)) for i in range(7))

    @property
    def carrying(self) -> bool:
        return self.sim.carrying is not None

    def door(self) -> Any:
        return next((o for o in self.sim.grid.grid if o is not None and o.type == "door"), None)


@dataclass
class ReleasedMemory:
    """The released code's EpisodeState, updated after every step (`update`) as its eval loops
    do: the known grid merged from the image, visits, the positions and actions."""

    doorkey: bool
    visits: dict = field(default_factory=dict)
    known: dict = field(default_factory=dict)
    actions: list = field(default_factory=list)  # action names
    goal: tuple | None = None
    key: tuple | None = None
    door: tuple | None = None
    last_pos: tuple | None = None
    stuck: int = 0
    recent: deque = field(default_factory=lambda: deque(maxlen=5))

    def update(self, sim: Any, action: str | None) -> None:
        scene = Scene(sim, self.doorkey)
        for i in range(7):
            for j in range(7):
                ch = scene.char(i, j)
                if ch in ("?", " "):
                    continue
                pos = scene.to_world(i, j)
                self.known[pos] = self._merge(self.known.get(pos, "?"), ch)
                if ch == "G":
                    self.goal = pos
                elif self.doorkey and ch == "k":
                    self.key = pos
                elif self.doorkey and ch in DOOR_CHARS:
                    self.door = pos
        # DoorKey counts a step as stuck only after FORWARD (or at the start); FourRooms after any
        counts = action is None or action == "FORWARD" or not self.doorkey
        stuck = self.last_pos is not None and self.last_pos == scene.pos and counts
        self.stuck = self.stuck + 1 if stuck else 0
        self.last_pos = scene.pos
        self.visits[scene.pos] = self.visits.get(scene.pos, 0) + 1
        self.recent.append(scene.pos)
        if action is not None:
            self.actions.append(action)
        if self.doorkey and scene.carrying:  # the key is in hand: its tile is empty now
            if self.key is not None and self.key in self.known:
                self.known[self.key] = "."
            self.key = None
        if not self.doorkey and self.goal is None:
            self.goal = next((p for p, ch in self.known.items() if ch == "G"), None)

    def _merge(self, old: str, new: str) -> str:
        """The known cell after seeing `new` where `old` was known: the goal and walls stick
        (FourRooms: a wall seen over a known goal wins; DoorKey: the goal wins)."""
        if not self.doorkey:
            return new if new in ("G", "#") or old != "G" else "G"
        if new == "G" or old == "G":
            return "G"
        if new == "#":
            return "#"
        order = {"L": 0, "D": 1, "o": 2}  # a door only opens
        if old in order and new in order:
            return new if order[new] >= order[old] else old
        return new

    def window(self, scene: Scene, radius: int) -> str:
        ax, ay = scene.pos
        w, h = scene.sim.width, scene.sim.height
        rows = []
        for y in range(ay - radius, ay + radius + 1):
            row = ""
            for x in range(ax - radius, ax + radius + 1):
                inside = 0 <= x < w and 0 <= y < h
                row += (
                    "A" if (x, y) == scene.pos else self.known.get((x, y), "?") if inside else "#"
                )
            rows.append(row)
        return "\n".join(rows)

    def loop_hints(self, unstuck: str, turns: int, target: str) -> list[str]:
        """The state block's LOOP_HINT lines: after 6 steps without a new cell (with the env's
        `unstuck` advice) and after `turns` turns in a row (toward the cached `target`)."""
        hints = []
        if self.stuck >= 6:
            hints.append(
                f"LOOP_HINT: You have not moved to a new cell for several steps; {unstuck}"
            )
        if len(self.actions) >= turns and all(
            a in ("TURN_LEFT", "TURN_RIGHT") for a in self.actions[-turns:]
        ):
            hints.append(
                "LOOP_HINT: Many consecutive turns; align with a clear corridor or cached "
                f"{target} bearing."
            )
        return hints

    def visits_tail(self) -> str:
        return str([self.visits.get(p, 0) for p in list(self.recent)[-5:]])

    def recent_actions(self, n: int) -> str:
        tail = self.actions[-n:] if n > 0 else []
        return " ".join(LETTER[a] for a in tail) if tail else "(none)"

    def first_step(self, scene: Scene, target: tuple, passable: set) -> str | None:
        """Where the first move of a breadth-first path to `target` over `passable` goes,
        relative to the agent (forward, right, left, back); None without a path."""
        start = scene.pos
        prev: dict = {start: None}
        queue = deque([start])
        while queue:
            cur = queue.popleft()
            if cur == target:
                break
            x, y = cur
            for nxt in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
                if nxt in passable and nxt not in prev:
                    prev[nxt] = cur
                    queue.append(nxt)
        if target not in prev:
            return None
        cur = target
        while prev[cur] != start:
            cur = prev[cur]
        step = (cur[0] - start[0], cur[1] - start[1])
        names = {VEC[(scene.dir + t) % 4]: n for t, n in ((0, "F"), (1, "R"), (3, "L"), (2, "B"))}
        return names[step]


def quadrant(pos: tuple[int, int], w: int, h: int) -> str:
    return ("N" if pos[1] < h // 2 else "S") + ("W" if pos[0] < w // 2 else "E")


def bearing(along: int, perp: int) -> str:
    parts = []
    if along:
        parts.append(f"{abs(along)} {'forward' if along > 0 else 'behind'}")
    if perp:
        parts.append(f"{abs(perp)} {'right' if perp > 0 else 'left'}")
    return ", ".join(parts) or "on agent tile"


def view_ray(scene: Scene) -> tuple[str, int]:
    """The longest free run from the agent's image cell along the image axes, by the released
    code's names for them."""
    best, best_n = "forward_in_view", 0
    for name, (di, dj) in (
        ("forward_in_view", (-1, 0)),
        ("right_in_view", (0, 1)),
        ("back_in_view", (1, 0)),
        ("left_in_view", (0, -1)),
    ):
        (i, j), n = AGENT_IJ, 0
        while 0 <= i + di < 7 and 0 <= j + dj < 7:
            i, j = i + di, j + dj
            obj = int(scene.image[i, j, 0])
            ch = (DK_CHARS if scene.doorkey else FR_CHARS).get(obj, "?")
            if ch in ("#", "?", " ") or (scene.doorkey and obj == 4):
                break
            n += 1
        if n > best_n:
            best, best_n = name, n
    return best, best_n


def world_ray(scene: Scene) -> tuple[str, int]:
    blocked = ("#", "?", "~", "L", "D") if scene.doorkey else ("#", "?", "L")
    best, best_n = "FORWARD", 0
    for name, turns in (("FORWARD", 0), ("RIGHT", 1), ("BACK", 2), ("LEFT", 3)):
        n = 0
        while scene.around(turns, n + 1) not in blocked:
            n += 1
        if n > best_n:
            best, best_n = name, n
    return best, best_n


def turn_previews(scene: Scene, word: str) -> list[str]:
    x, y = scene.pos
    lines = []
    for name, turns in (("TURN_LEFT  ", 3), ("TURN_RIGHT ", 1)):
        d = (scene.dir + turns) % 4
        ahead = scene.world(x + VEC[d][0], y + VEC[d][1])
        lines.append(f"{name}→ facing={FACING[d]}, {word} would be {ahead!r}")
    return lines


def autopilot_line(autopilot: str | None) -> str:
    return f"\nAutopilot suggests: {autopilot}" if autopilot is not None else ""


def map_block(memory: ReleasedMemory, scene: Scene, radius: int) -> str:
    side = 2 * radius + 1
    return (
        f"DISCOVERED MAP ({side}×{side} around you; A=you ?=unknown):\n"
        f"{memory.window(scene, radius)}\n\n"
    )


# -- FourRooms (eval_ppo_slm.py build_prompt) -----------------------------------------------------
FR_ACTIONS = "VALID ACTIONS:\nTURN_LEFT\nTURN_RIGHT\nFORWARD\n"
FR_VIEW = "CURRENT VIEW (A=you  .=floor  #=wall  G=goal  ?=unseen  D=door):"
FR_EXAMPLES = (
    "Examples:\n"
    "ahead=passable, goal visible (3 ahead, straight) → FORWARD\n"
    "ahead=passable, goal visible (2 ahead, 2 right) → TURN_RIGHT\n"
    "ahead=passable, door visible (2 ahead, 2 right) → TURN_RIGHT\n"
    "ahead=BLOCKED, door visible to the right → TURN_RIGHT\n"
)
FR_TOKEN_ANSWER = "TURN_LEFT or TURN_RIGHT or FORWARD\n\nAction: "
FR_HINTS = {
    "F": "FORWARD (one step on known map toward cached goal)",
    "R": "TURN_RIGHT then FORWARD when aligned (toward cached goal on known map)",
    "L": "TURN_LEFT then FORWARD when aligned (toward cached goal on known map)",
    "B": "TURN_LEFT twice (or RIGHT twice) to face cached goal, then FORWARD",
}


def fr_goal_in_view(scene: Scene) -> str:
    cell = next(((i, j) for i in range(7) for j in range(7) if scene.char(i, j) == "G"), None)
    if cell is None:
        return "not visible"
    along, perp = scene.ego(scene.to_world(*cell))
    side = f"{perp} right" if perp > 0 else f"{-perp} left" if perp < 0 else "straight"
    return f"visible ({along} forward, {side}{' in agent frame' if perp else ''})"


def fourrooms_prompt(
    scene: Scene,
    memory: ReleasedMemory | None,
    autopilot: str | None,
    level: str,
    rationale: bool,
    history: int = 8,
    radius: int = 5,
) -> str:
    ahead = "BLOCKED" if scene.around(0) == "#" else "passable"
    goal = fr_goal_in_view(scene)
    ppo = autopilot_line(autopilot)
    if level == "basic":
        return (
            "You are a robot navigation policy.\nYour task is to choose exactly ONE action.\n\n"
            f"{FR_ACTIONS}\nRULES:\n- Do NOT explain.\n- Do NOT add text or markdown.\n"
            "- If the path ahead is BLOCKED, do not choose FORWARD.\n"
            "- If the goal is visible, prioritize moving toward it.\n"
            "- If the autopilot suggestion is safe, follow it.\n\n"
            f"{FR_VIEW}\n{scene.view_text()}\n\n"
            f"STATE:\nFacing: {FACING[scene.dir]}\nPath ahead: {ahead}\nGoal: {goal}{ppo}\n\n"
            f"{FR_EXAMPLES}"
            "ahead=passable, goal not visible, longest corridor is right_in_view → TURN_RIGHT\n\n"
            f"OUTPUT FORMAT (MANDATORY):\n{FR_TOKEN_ANSWER}"
        )
    x, y = scene.pos
    doors = [
        f"world_delta x={wx - x:+d} y={wy - y:+d} (image r={i} c={j})"
        for i in range(7)
        for j in range(7)
        if scene.char(i, j) == "D"
        for wx, wy in [scene.to_world(i, j)]
    ]
    chain = " ".join(scene.around(0, k) for k in (1, 2, 3))
    forward = scene.world(x + VEC[scene.dir][0], y + VEC[scene.dir][1])
    moves = (
        f"FORWARD    → blocked (ahead is {forward!r})"
        if forward in ("#", "?", "L")
        else f"FORWARD    → move to ({x + VEC[scene.dir][0]},{y + VEC[scene.dir][1]}), "
        f"ahead cell is {forward!r}"
    )
    previews = [*turn_previews(scene, "cell ahead"), moves]
    enriched = (
        f"Adjacent (forward/left/right/back in view): {scene.around(0)}/{scene.around(3)}/"
        f"{scene.around(1)}/{scene.around(2)}\n"
        f"Ahead chain (steps 1-3): {chain}\n"
        f"Doors visible (offsets): {', '.join(doors) if doors else '(none visible)'}\n"
        "Longest clear ray in view: {} ({} steps)\n".format(*view_ray(scene))
        + "Longest clear ray in world frame: {} ({} steps)\n\n".format(*world_ray(scene))
        + "ACTION PREVIEW (ground truth from simulator):\n"
        + "\n".join(previews)
        + "\n"
    )
    state = maps = ""
    if level in ("stateful_min", "stateful") and memory is not None:
        state = fr_state_block(scene, memory, history)
        if level == "stateful":
            maps = map_block(memory, scene, radius)
    rules = "- Output only the action token line required below (no markdown).\n"
    rules += (
        "- First line: Reason: <one short line, max 15 words>.\n"
        "- Second line: Action: <TURN_LEFT|TURN_RIGHT|FORWARD>.\n"
        if rationale
        else "- Do NOT explain.\n"
    )
    answer = (
        "Reason: <short>\nAction: TURN_LEFT or TURN_RIGHT or FORWARD\n\n"
        if rationale
        else FR_TOKEN_ANSWER
    )
    return (
        "You are a robot navigation policy in MiniGrid FourRooms (partially observed).\n"
        f"Choose exactly ONE low-level action.\n\n{FR_ACTIONS}\nRULES:\n{rules}"
        "- If FORWARD is blocked (ahead is '#' or you cannot enter), do not choose FORWARD.\n"
        "- Prefer moving through doors (D) when they align with corridors or the cached goal.\n"
        "- If the egocentric goal 'G' is visible, move toward it.\n"
        "- If a planner hint is given on the known map, prefer it when it matches safe previews.\n"
        f"{'- If autopilot suggests a safe action, follow it.' if ppo else ''}\n\n"
        f"{FR_VIEW}\n{scene.view_text()}\n\n{maps}"
        f"STATE:\nFacing: {FACING[scene.dir]}\nPath ahead: {ahead}\nGoal (in view): {goal}\n"
        f"{state}{enriched}{ppo}\n\n{FR_EXAMPLES}"
        "visits high + loop hint + longest corridor is right_in_view → TURN_RIGHT\n\n"
        f"OUTPUT FORMAT (MANDATORY):\n{answer}"
    )


def fr_state_block(scene: Scene, memory: ReleasedMemory, history: int) -> str:
    w, h = scene.sim.width, scene.sim.height
    goal, pos = memory.goal, scene.pos
    room_line = hint = ""
    if goal is not None:
        dx, dy = goal[0] - pos[0], goal[1] - pos[1]
        goal_line = (
            f"Goal cached at world {goal}  (delta x={dx:+d}, y={dy:+d}, "
            f"manhattan={abs(dx) + abs(dy)})"
        )
        room_line = f"Goal room (cached): {quadrant(goal, w, h)}\n"
        passable = {p for p, ch in memory.known.items() if ch not in ("#", "?")}
        if pos != goal and pos in passable and goal in passable:
            step = memory.first_step(scene, goal, passable)
            if step is not None:
                hint = f"Planner hint (known cells): {FR_HINTS[step]}\n"
    else:
        goal_line = "Goal not yet seen — explore through doors and along long corridors."
    loops = memory.loop_hints(
        "prefer FORWARD if passable, otherwise turn toward a longer corridor.", 4, "goal"
    )
    return (
        f"World position (x,y): {pos}\nRoom (quadrant): {quadrant(pos, w, h)}\n"
        f"{room_line}{goal_line}\nVisits at current cell: {memory.visits.get(pos, 0)}\n"
        f"Visit counts (last up to 5 positions): {memory.visits_tail()}\n"
        f"Recent actions (L/R/F): {memory.recent_actions(history)}\n"
        + "\n".join(loops)
        + f"\n{hint}"
    )


def start_memory(episode: Any) -> ReleasedMemory:
    """The released episodic state of a MiniGrid episode from now on, updated after each step
    (its eval loops start it at reset and update it after every env step)."""
    memory = ReleasedMemory(doorkey=bool(getattr(episode.task, "doorkey", False)))
    memory.update(episode.sim, None)
    episode.watchers.append(lambda action: memory.update(episode.sim, action))
    return memory


def fourrooms_text() -> ReleasedText:
    """eval_ppo_slm.py: DECODING max_tokens 10, 48 with rationale; FORWARD on an invalid answer."""

    def prompt(episode, memory, level, rationale, autopilot, radius=5, history=8):
        scene = Scene(episode.sim, doorkey=False)
        return fourrooms_prompt(scene, memory, autopilot, level, rationale, history, radius)

    levels = ("basic", "enriched", "stateful_min", "stateful")
    return ReleasedText(levels, FR_TOKENS, "FORWARD", 10, 48, start_memory, prompt)
