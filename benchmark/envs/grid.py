"""The MiniGrid navigation family (`grid`: FourRooms, DoorKey, Empty, SimpleCrossing): its
ASK/ASK+ blocks (ASK+ paper, appendix 9.1 and 9.3), belief-state claims, feedback-paper text and
fine-tuning reasons. The task, episode and expert are benchmark.envs.minigrid_nav and
benchmark.envs.expert; the derived prompt features are benchmark.envs.navfeatures."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from benchmark.envs import navfeatures as nf
from benchmark.envs.base import Episode, Memory, NavView
from benchmark.envs.family import Family, system_block

GRID_WORLDS = {
    "fourrooms": "FourRooms: a 19x19 grid cut into four rooms that are joined by one-cell gaps "
    "in the walls; the green goal square 'G' lies in one of the rooms",
    "doorkey8": "DoorKey-8x8: an 8x8 grid split by a wall with one locked door; a key 'k' lies on "
    "the agent's side and the goal 'G' lies behind the door",
    "empty5x5_random": "Empty-Random-5x5: a small empty room; the goal 'G' is in a corner",
    "empty16x16": "Empty-16x16: a large empty room; the goal 'G' is in the far corner",
    "simplecrossing9": "SimpleCrossing-9x9: a room crossed by one wall with a single opening; "
    "the goal 'G' is in the far corner",
}


def is_doorkey(task: Any) -> bool:
    """Whether `task` is DoorKey: its own declaration (MiniGridTask.doorkey), never its actions."""
    return bool(getattr(task, "doorkey", False))


def world_sentence(task: Any) -> str:
    name = getattr(task, "name", "")
    return GRID_WORLDS.get(name, f"{getattr(task, 'gym_id', name)}: reach the goal square 'G'")


def gym_name(task: Any, default: str) -> str:
    """The task's MiniGrid environment as a prompt names it (`MiniGrid-Memory-S7-v0` ->
    `Memory-S7`); `default` for a task without a gym id."""
    gym_id = str(getattr(task, "gym_id", default))
    return gym_id.removeprefix("MiniGrid-").removesuffix("-v0")


def legend(doorkey: bool) -> str:
    extra = " k=key L=door(locked) D=door(closed) o=door(open)" if doorkey else ""
    return f"LEGEND: A=agent #=wall .=floor G=goal ?=unseen{extra}"


# The rationale instruction of block (iii) (the paper's tinted lines), per family.
GRID_RATIONALE_RULE = (
    "- Line 1: Reason: <one short line, max 15 words>.   Line 2: Action: <one of VALID ACTIONS>."
)


def grid_rules(doorkey: bool, rationale: bool, autopilot: bool) -> list[str]:
    """Block (iii) for navigation: appendix 9.1 (FourRooms, also used for the other grid envs)
    and 9.3 (DoorKey), the same at every level. Only the output-shape lines follow `rationale`:
    the paper's DoorKey line "Output only the two lines below" describes the rationale answer,
    so without rationale both families say what FourRooms' static line says."""
    token_line = "- Output only the action token line required below (no markdown)."
    if doorkey:
        lines = (
            ["- Output only the two lines below (no markdown).", GRID_RATIONALE_RULE]
            if rationale
            else [token_line]
        )
        lines += [
            "- PICKUP: only when 'k' is directly ahead and nothing in hand.  "
            "TOGGLE: only on L/D/o (L needs key).",
            "- FORWARD cannot enter '#' or a closed/locked door -- TOGGLE or turn first.   "
            "DONE: only on G.",
        ]
        if autopilot:
            lines.append("- Follow autopilot when it matches the current subtask and previews.")
        return lines
    lines = [token_line, *([GRID_RATIONALE_RULE] if rationale else [])]
    lines += [
        "- If FORWARD is blocked (ahead is '#'), do not choose FORWARD. Prefer doors (D)",
        "  aligned with corridors / the cached goal. If 'G' is visible, move toward it.",
        "- Follow planner hint and autopilot when consistent with safe previews."
        if autopilot
        else "- Follow planner hint when consistent with safe previews.",
    ]
    return lines


def grid_system(
    task: Any, actions: Sequence[str], level: str, rationale: bool, autopilot: bool
) -> str:
    """Blocks (i)-(iii). `level` is accepted for symmetry with the state block and ignored: the
    system message is the same for every level (ASK+ paper, appendix 9)."""
    world = (
        f"{world_sentence(task)}. The agent sees only a 7x7 window in front of it. "
        "Pick the single next action that brings it closest to reaching the goal."
    )
    return navigation_system(world, actions, grid_rules(is_doorkey(task), rationale, autopilot))


def navigation_system(world: str, actions: Sequence[str], rules: Sequence[str]) -> str:
    """Blocks (i)-(iii) as every MiniGrid family words them: the ROLE sentence ending in `world`
    (the world, the goal, the view), the valid actions and `rules` (block (iii))."""
    role = (
        "You are the navigation consultant of a reinforcement-learning agent in the MiniGrid "
        f"world {world}"
    )
    return system_block(role, actions, rules)


def family_rules(rationale: bool, rules: Sequence[str]) -> list[str]:
    """Block (iii) of a family beyond the paper's: the output shape (the grid families' rationale
    rule with `rationale`), then the family's own `rules`."""
    return [
        "- Output only the action token line required below (no markdown).",
        *([GRID_RATIONALE_RULE] if rationale else []),
        *rules,
    ]


def ego_lines(view: NavView) -> list[str]:
    return [f"  {row}" for row in view.ego]


def goal_words(view: NavView) -> str:
    if view.goal_pos is None:
        return "not visible"
    return f"visible, {nf.offset_words(view, view.goal_pos)}"


def grid_state(
    view: NavView,
    memory: Memory,
    actions: Sequence[str],
    level: str,
    autopilot: str | None,
    map_radius: int = 5,
    planner_hint: str = "frontier",
) -> str:
    """Block (iv) for navigation, cumulative over the levels. `planner_hint`: what the
    `Planner hint:` line searches for (navfeatures.PLANNER_HINTS); no line when it finds none
    under seen_target, or with none."""
    world = nf.World(view, memory)
    doorkey = view.doorkey
    ahead = "BLOCKED" if view.front in nf.BLOCKING else "clear"
    lines = [
        legend(doorkey),
        "VIEW (7x7; top row = farthest ahead; you are A at the bottom middle, facing up):",
        *ego_lines(view),
        f"STATE: Facing={view.facing}  PathAhead={ahead} ('{view.front}')  Goal={goal_words(view)}"
        f"  Step={view.step}/{view.max_steps}",
    ]
    if doorkey:
        has_key = "YES" if view.carrying == "key" else "NO"
        lines.append(f"STATUS: HasKey={has_key}  Door={nf.door_state(world)}")
        lines.append(f"SUBTASK: {nf.subtask(view, world)}")
    if autopilot is not None:
        lines.append(f"Autopilot: {autopilot}")
    if level == "basic":
        return "\n".join(lines)

    adj = nf.adjacent(world)
    chain = " ".join(nf.ahead_chain(world))
    doors = nf.doorways(view, world)
    door_txt = "; ".join(f"{kind} {nf.offset_words(view, p)}" for p, kind in doors) or "(none)"
    view_rays = {d: nf.view_ray(view, d) for d in ("forward", "left", "right")}
    world_rays = {d: nf.ray(world, d) for d in ("forward", "left", "right", "back")}
    lines += [
        f"Adjacent F/L/R/B: {adj['forward']}/{adj['left']}/{adj['right']}/{adj['back']}"
        f"    Ahead chain: {chain}    Doors visible: {door_txt}",
        f"Longest ray (view): {nf.longest(view_rays)}    "
        f"Longest ray (known map): {nf.longest(world_rays)}",
    ]
    if doorkey:
        keys = "; ".join(nf.offset_words(view, k) for k in view.keys) or "(none)"
        lines.append(
            f"Key visible: {keys}    Goal: {'(none)' if view.goal_pos is None else nf.offset_words(view, view.goal_pos)}"
        )
    prev = nf.previews(view, world, actions)
    items = [f"{a}->{prev[a]}" for a in actions]
    if len(items) > 3:
        lines.append("PREVIEW  " + "    ".join(items[:3]))
        lines.append("         " + "    ".join(items[3:]))
    else:
        lines.append("PREVIEW  " + "    ".join(items))
    if level == "enriched":
        return "\n".join(lines)

    here = memory.visits.get(view.pos, 0)
    recent = " ".join(f"{p}x{n}" for p, n in nf.recent_cells(memory)) or "(none)"
    history = " ".join(memory.actions[-8:]) or "(none)"
    goal = memory.goal_pos
    goal_txt = "not seen yet" if goal is None else f"{goal}, {nf.compass_words(view, goal)}"
    hint = nf.planner_hint(view, memory, actions, planner_hint)
    hint_lines = []
    if hint is not None:
        hint_lines.append(
            f"Planner hint: {hint.action} (known-map path to {hint.target}, {hint.length} actions)"
            if hint.action
            else f"Planner hint: (none: {hint.target})"
        )
    lines += [
        f"MEMORY: Pos={view.pos}  Room={nf.quadrant(view)}  Visits@here={here}"
        f"  Cells seen={len(memory.known_map)}",
        f"Recent cells (oldest first, visits): {recent}",
        f"Recent actions (last 8): {history}",
        f"Loop warning: {nf.loop_warning(memory, view.pos) or 'none'}",
        f"Goal (cached): {goal_txt}",
        *hint_lines,
    ]
    if level == "stateful_min":
        return "\n".join(lines)

    window = nf.map_window(view, memory, map_radius)
    x0, y0 = view.pos[0] - map_radius, view.pos[1] - map_radius
    side = 2 * map_radius + 1
    lines.append(
        f"KNOWN MAP ({side}x{side} around you, north up, x {x0}..{x0 + side - 1}, "
        f"y {y0}..{y0 + side - 1}; your cell = {nf.ARROW[view.facing]}; ? = never seen):"
    )
    lines += [f"  {row}" for row in window]
    return "\n".join(lines)


def grid_examples(doorkey: bool, level: str | None = None) -> str:
    """Block (v): the paper's one-shot examples (appendix 9.1 / 9.3), the same at every level
    (`level` is ignored)."""
    if doorkey:
        lines = [
            "key visible (2 fwd, 1 right), no key in hand -> TURN_RIGHT     "
            "facing 'k', no key in hand -> PICKUP",
            "key in hand, facing 'L' -> TOGGLE                              "
            "door open and goal 1 fwd -> FORWARD",
        ]
    else:
        lines = [
            "ahead=passable, goal visible (3 ahead)            -> FORWARD",
            "ahead=BLOCKED,  door visible to the right         -> TURN_RIGHT",
            "visits high + loop hint + longest_corridor=right  -> TURN_RIGHT",
        ]
    return "\n".join(["EXAMPLES:", *lines])


# -- belief state (benchmark.prompts.belief) -------------------------------------------------------


def belief_claims(episode: Episode) -> list[str]:
    """Claims that the current view and memory establish (the oracle's belief update): exact
    where observed, 'unknown' where nothing was seen."""
    view, mem = episode.view(), episode.memory
    world = nf.World(view, mem)
    claims = [
        f"- I am at {view.pos} facing {view.facing} in the {nf.quadrant(view)} area [confirmed]",
        f"- the cell ahead is {nf.CELL_WORDS.get(view.front, view.front)} [confirmed]",
    ]
    goal = mem.goal_pos or view.goal_pos
    claims.append(
        f"- the goal is at {goal} [confirmed]" if goal else "- the goal location [unknown]"
    )
    claims.append(f"- {len(mem.known_map)} cells of the map have been seen [confirmed]")
    exits = [f"{kind} at {p}" for p, kind in nf.doorways(view, world)][:3]
    if exits:
        claims.append(f"- visible exits: {', '.join(exits)} [confirmed]")
    if view.doorkey:
        keys = [p for p, ch in world.cells.items() if ch == "k"]
        claims.append(f"- I carry {view.carrying or 'nothing'} [confirmed]")
        claims.append(
            f"- a key lies at {keys[0]} [confirmed]" if keys else "- the key location [unknown]"
        )
        claims.append(f"- the door is {nf.door_state(world).lower()} [confirmed]")
    return claims


def belief_steps(episode: Episode, since: int, limit: int) -> list[str]:
    """'<action>-><position>' for each step since step `since` (the last `limit`)."""
    mem = episode.memory
    positions = mem.positions[since + 1 :][-limit:]
    return [f"{a}->{p}" for a, p in zip(mem.actions[since:][-limit:], positions, strict=False)]


# -- feedback paper (benchmark.prompts.feedback) ---------------------------------------------------
GRID_SYMBOLS = {
    "W": "Wall (blocks movement)",
    "G": "Goal",
    ".": "Empty cell",
    "D": "Closed door (Toggle opens it)",
    "L": "Locked door (needs the key, then Toggle)",
    "o": "Open door (passable)",
    "k": "Key (Pick Up when facing it)",
    "~": "Lava (ends the episode)",
    "b": "Object (blocks movement)",
}
ENV_TITLES = {
    "empty5x5_random": "MiniGrid-Empty-Random-5x5",
    "empty16x16": "MiniGrid-Empty-16x16",
    "simplecrossing9": "MiniGrid-SimpleCrossingS9N1",
    "fourrooms": "MiniGrid-FourRooms",
    "doorkey8": "MiniGrid-DoorKey-8x8",
}


def grid_text(view: NavView) -> str:
    """The whole grid, one row per line: 'W' wall, '.' empty, agent as > v < ^ (the paper draws
    empty cells as spaces; we use '.', which no tokenizer or chat template strips)."""
    return "\n".join(row.replace("#", "W") for row in view.full_grid)


class GridFeedback:
    """The feedback paper's environment text for MiniGrid (benchmark.prompts.feedback)."""

    def title(self, task: Any) -> str:
        name = getattr(task, "name", "")
        return ENV_TITLES.get(name, getattr(task, "gym_id", "Minigrid"))

    def observation(self, view: NavView) -> str:
        return grid_text(view)

    def description(
        self, view: NavView, grid: str, actions: Sequence[str], display: dict[str, str]
    ) -> str:
        """The HWBP environment description: rules, the symbols on the grid, the grid, the actions."""
        symbols = {"W", "G", "."} | {c for c in "DLokb~" if any(c in r for r in view.full_grid)}
        if view.doorkey:
            symbols |= {"D", "L", "o", "k"}
        lines = [
            "In the Minigrid environment you control an agent that moves through a grid world. "
            "The objective is to reach the target 'G' while avoiding obstacles and hazards. Every "
            "cell of the grid is drawn as a single-character symbol.",
            "",
            "The observation is the whole grid with the agent drawn at its position as an arrow "
            "that shows where it faces. Actions turn the agent, move it, or interact with objects.",
            "",
            "Agent orientation and movement:",
            "- The agent faces one of four directions: '>' right, 'v' down, '<' left, '^' up.",
            "- Rotation (the agent turns in place and does not move):",
            "  - Turn Left: rotates 90 degrees counter-clockwise, e.g. from '^' to '<'.",
            "  - Turn Right: rotates 90 degrees clockwise, e.g. from '^' to '>'.",
            "- Movement:",
            "  - Move Forward: moves one cell in the facing direction unless an obstacle is there.",
        ]
        interaction = {
            "PICKUP": "  - Pick Up: picks up the key in the cell ahead.",
            "DROP": "  - Drop: drops the carried object into the cell ahead.",
            "TOGGLE": "  - Toggle: opens or closes the door ahead (a locked door needs the key).",
        }
        if any(a in actions for a in interaction):  # what the actions do, DoorKey or not
            lines += ["- Interaction:", *(line for a, line in interaction.items() if a in actions)]
        if "DONE" in actions:
            lines += ["Completion:", "- Done: signals that the agent has reached the goal."]
        lines += ["", "Grid symbols:"]
        lines += [f"- '{s}': {GRID_SYMBOLS[s]}" for s in GRID_SYMBOLS if s in symbols]
        lines += ["", "The current game state is:", grid, ""]
        lines.append("Available actions (select one):")
        lines += [f"- '{display[a]}'" for a in actions]
        return "\n".join(lines)


# -- fine-tuning reasons (benchmark.finetune.dataset) ----------------------------------------------


def reason(episode: Episode, action: str) -> str:
    """The templated reason of the expert's `action`, in a few words from the simulator's view."""
    view = episode.view()
    if view.carrying is None and "PICKUP" in episode.action_names and action == "PICKUP":
        return "the key is ahead"
    if action == "TOGGLE":
        return "the door is ahead"
    if view.goal_pos is not None:
        return f"goal {nf.offset_words(view, view.goal_pos)}"
    if view.front in nf.BLOCKING:
        return "the way ahead is blocked"
    return "goal not visible, explore"


# ----------------------------------------------------------------------------- Agent-BRACE
def visible_cells(view: NavView) -> set[tuple[int, int]]:
    """World cells in the agent's view now."""
    return set(view.ego_to_world.values())


def true_cells(view: NavView, char: str) -> list[tuple[int, int]]:
    """World positions of `char` on the true grid; the goal under the agent (the grid shows the
    agent there) is at the agent's position."""
    cells = [
        (x, y) for y, row in enumerate(view.full_grid) for x, ch in enumerate(row) if ch == char
    ]
    return cells if cells or char != "G" else [tuple(view.pos)]


def brace_teacher(truth: Any) -> list[str]:
    """The teacher's belief on a MiniGrid state: pose and cell ahead confirmed, the goal
    confirmed in view / almost certain when seen before / unknown; DoorKey adds the inventory,
    the key and the door."""
    view, mem = truth.view, truth.memory
    visible = visible_cells(view)
    claims = [
        f"- I am at {view.pos} facing {view.facing} [confirmed]",
        f"- the cell ahead is {nf.CELL_WORDS.get(view.front, view.front)} [confirmed]",
    ]
    if view.goal_pos is not None:
        claims.append(f"- the goal is at {view.goal_pos} [confirmed]")
    elif mem.goal_pos is not None:
        claims.append(f"- the goal is at {mem.goal_pos} [almost certain]")
    else:
        claims.append("- the goal location [unknown]")
    claims.append(f"- {len(mem.known_map)} cells of the map have been seen [confirmed]")
    if truth.view.doorkey:
        claims.append(f"- I carry {view.carrying or 'nothing'} [confirmed]")
        if view.carrying != "key":
            keys = [p for p, ch in mem.known_map.items() if ch == "k"] + list(view.keys)
            if keys:
                label = "confirmed" if keys[-1] in visible else "almost certain"
                claims.append(f"- a key lies at {keys[-1]} [{label}]")
            else:
                claims.append("- the key location [unknown]")
        doors = [(p, ch) for p, ch in mem.known_map.items() if ch in "LDo"]
        doors += [(p, ch) for p, ch in view.doors]
        if doors:
            where, ch = doors[-1]
            word = {"L": "locked", "D": "closed", "o": "open"}[ch]
            claims.append(
                f"- the door is {word} [{'confirmed' if where in visible else 'almost certain'}]"
            )
        else:
            claims.append("- the door is unseen [confirmed]")
    return claims


@functools.cache
def brace_rules() -> list[Any]:
    """Claim rules of the navigation belief (pose, cell ahead, goal, map, inventory, key, door);
    a key, door or carried object the game does not contain is incorrect, whatever its label."""
    from benchmark.vocabulary import POS, fact_verdict

    def pos(m, t, lb):  # the pose: the position and, where the claim states it, the facing
        true = (int(m[1]), int(m[2])) == tuple(t.view.pos)
        return fact_verdict(true and m[3] in (None, t.view.facing.lower()), lb)

    def facing(m, t, lb):
        return fact_verdict(m[1].upper() == t.view.facing, lb)

    def ahead(m, t, lb):
        word = nf.CELL_WORDS.get(t.view.front, t.view.front)
        return fact_verdict(m[1].strip().lower() == str(word).lower(), lb)

    def goal_at(m, t, lb):
        seen = t.memory.goal_pos is not None or t.view.goal_pos is not None
        return fact_verdict((int(m[1]), int(m[2])) in true_cells(t.view, "G"), lb, observable=seen)

    def goal_unknown(m, t, lb):
        seen = t.memory.goal_pos is not None or t.view.goal_pos is not None
        if lb != "unknown":
            return None  # a location claim without a position: nothing to verify
        return "partial" if seen else "correct"

    def seen_cells(m, t, lb):
        return fact_verdict(int(m[1]) == len(t.memory.known_map), lb)

    def present(t) -> set[str]:
        """The objects the game contains: on its grid, or carried."""
        chars = {ch for row in t.view.full_grid for ch in row}
        return {str(nf.CELL_WORDS.get(ch, ch)) for ch in chars} | {t.view.carrying or "nothing"}

    def carry(m, t, lb):
        said = m[1].strip().lower()
        said = "nothing" if said in ("nothing", "none", "no object") else said
        if said not in present(t):
            return "incorrect"  # an object the game does not contain
        return fact_verdict(said == (t.view.carrying or "nothing"), lb)

    def key_at(m, t, lb):
        where = (int(m[1]), int(m[2]))
        if "key" not in present(t):
            return "incorrect"  # a key in a game without one
        seen = any(ch == "k" for ch in t.memory.known_map.values()) or bool(t.view.keys)
        return fact_verdict(where in true_cells(t.view, "k"), lb, observable=seen)

    def door(m, t, lb):
        chars = {ch for row in t.view.full_grid for ch in row}
        true_state = next(
            (w for ch, w in (("L", "locked"), ("D", "closed"), ("o", "open")) if ch in chars),
            "unseen",
        )
        said = m[1].strip().lower()
        if said == "unseen":  # a claim about what was observed, not the world
            known = {ch for ch in t.memory.known_map.values()} | {
                ch for row in t.view.ego for ch in row
            }
            return fact_verdict(not (known & set("LDo")), lb)
        if true_state == "unseen":
            return "incorrect"  # a door in a game without one
        return fact_verdict(said == true_state, lb)

    return [
        (
            "position",
            re.compile(r"\bi am at " + POS + r"(?: facing (north|east|south|west)\b)?"),
            pos,
        ),
        ("facing", re.compile(r"\bfacing (north|east|south|west)\b"), facing),
        ("cell ahead", re.compile(r"\bthe cell ahead is ([a-z ]+)$"), ahead),
        ("goal", re.compile(r"\bgoal is at " + POS), goal_at),
        ("goal", re.compile(r"\bgoal location\b"), goal_unknown),
        ("map seen", re.compile(r"^(\d+) cells of the map have been seen"), seen_cells),
        ("inventory", re.compile(r"\bi carry ([a-z ]+)$"), carry),
        ("key", re.compile(r"\ba key lies at " + POS), key_at),
        ("door", re.compile(r"\bthe door is ([a-z]+)$"), door),
    ]


class GridFamily(Family):
    """MiniGrid navigation: the egocentric view, the known map, BFS on the true grid."""

    name = "grid"
    kinds = ("navigation", "doorkey")
    prompt_version = 2
    feedback = GridFeedback()
    # the MiniGrid docs' CNN over the 7x7x3 egocentric image (policy=ppo_cnn)
    extractors = {"minigrid_cnn": "benchmark.policy.network.MinigridFeaturesExtractor"}
    where_figure = "benchmark.report.analysis.grid_figure"  # heatmaps by grid position

    def system(self, task, actions, level, rationale, autopilot):
        return grid_system(task, actions, level, rationale, autopilot)

    def state(self, view, memory, actions, level, autopilot, map_radius=5, planner_hint="frontier"):
        return grid_state(view, memory, actions, level, autopilot, map_radius, planner_hint)

    def prompt_keys(self, level):
        # the Planner hint line from stateful_min on, the known-map window at stateful
        keys = {"planner_hint"} if level in ("stateful_min", "stateful") else set()
        return frozenset(keys | {"map_radius"} if level == "stateful" else keys)

    def examples(self, task, actions, level):
        return grid_examples(is_doorkey(task), level)

    def released(self, task):
        from benchmark.envs.released_doorkey import doorkey_text
        from benchmark.envs.released_grid import fourrooms_text

        if is_doorkey(task) and getattr(task, "gym_id", "") == "MiniGrid-DoorKey-8x8-v0":
            return doorkey_text()
        if getattr(task, "gym_id", "") == "MiniGrid-FourRooms-v0":
            return fourrooms_text()
        return None  # the released code has prompts for FourRooms and DoorKey-8x8 only

    def belief_task(self, task):
        return (
            f"TASK: MiniGrid navigation in {world_sentence(task)}. The agent sees a "
            "7x7 window in front of it and must reach the goal 'G'."
        )

    # the module's functions of the same arguments are the methods (no forwarding wrappers)
    belief_claims = staticmethod(belief_claims)
    belief_steps = staticmethod(belief_steps)
    reason = staticmethod(reason)
    brace_teacher = staticmethod(brace_teacher)
    brace_rules = staticmethod(brace_rules)


class ObjectiveFamily(GridFamily):
    """A MiniGrid family with its own objective on the grid's view and features (Memory,
    KeyCorridor): its system block, examples and belief TASK differ only in their text, so they
    are declared as data and worded here once."""

    feedback = None  # the feedback paper's text is about reaching 'G'
    gym_id = ""  # the environment a prompt names for a task without a gym id
    world = ""  # the ROLE sentence after '<environment>: ' (the world, the goal, the view)
    rules: tuple[str, ...] = ()  # the family's rules of block (iii)
    autopilot_rule = ("", "")  # the last rule with the PPO suggestion shown, and without it
    example_lines: tuple[str, ...] = ()
    belief = ""  # the TASK paragraph of the belief prompts

    def system(self, task, actions, level, rationale, autopilot):
        rules = [*self.rules, self.autopilot_rule[0 if autopilot else 1]]
        world = f"{gym_name(task, self.gym_id)}: {self.world}"
        return navigation_system(world, actions, family_rules(rationale, rules))

    def state(self, view, memory, actions, level, autopilot, map_radius=5, planner_hint="frontier"):
        def grid_at(at_level: str) -> str:
            return grid_state(view, memory, actions, at_level, autopilot, map_radius, planner_hint)

        return self.objective_state(grid_at, view, memory, level)

    def objective_state(self, grid_at, view: NavView, memory: Memory, level: str) -> str:
        """Block (iv): the grid family's (`grid_at(level)`) with the objective's lines."""
        raise NotImplementedError(f"family {self.name!r} has no objective state lines")

    def examples(self, task, actions, level):
        return "\n".join(["EXAMPLES:", *self.example_lines])

    def belief_task(self, task):
        return self.belief


FAMILY = GridFamily()
