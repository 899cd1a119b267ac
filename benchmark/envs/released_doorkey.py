"""The released code's DoorKey prompt (door_key/eval.py build_prompt; protocol=official): the
status, subtask, previews and cached targets it shows, from the scene and the released episodic
state of benchmark.envs.released_grid (which says why the released text is reproduced)."""

from __future__ import annotations

from benchmark.envs.family import ReleasedText
from benchmark.envs.minigrid_nav import ACTION_INDEX
from benchmark.envs.released_grid import (
    AGENT_IJ,
    DK_TOKENS,
    FACING,
    VEC,
    ReleasedMemory,
    Scene,
    autopilot_line,
    bearing,
    map_block,
    start_memory,
    turn_previews,
    view_ray,
    world_ray,
)

# -- DoorKey (door_key/eval.py build_prompt) ------------------------------------------------------
DK_ACTIONS = "VALID ACTIONS:\n" + "".join(f"{a}\n" for a in ACTION_INDEX)
DK_LEGEND = (
    "LEGEND: A=agent, k=key, L=door(locked), D=door(closed), o=door(open), "
    "G=goal, #=wall, .=empty, ?=unknown"
)
DK_HINTS = {
    "F": "FORWARD (one step on known map toward target)",
    "R": "TURN_RIGHT then FORWARD (target is on your right)",
    "L": "TURN_LEFT then FORWARD (target is on your left)",
    "B": "TURN_LEFT twice (or RIGHT twice) to face target, then FORWARD",
}


def dk_status(scene: Scene) -> tuple[str, str, str]:
    """(has key, door, subtask) as the released DoorKey prompt words them."""
    door = scene.door()
    is_open = door is not None and door.is_open
    locked = door is not None and bool(getattr(door, "is_locked", False))
    if is_open:
        subtask = "REACH THE GREEN GOAL TILE (G); navigate to G then optionally DONE"
    elif scene.carrying:
        subtask = "FIND AND UNLOCK THE DOOR (face door 'L' or 'D' and TOGGLE)"
    else:
        subtask = "FIND AND PICK UP THE KEY ('k') — face it then PICKUP"
    door_word = "OPEN" if is_open else "LOCKED" if locked else "CLOSED"
    return ("YES" if scene.carrying else "NO"), door_word, subtask


def dk_previews(scene: Scene) -> list[str]:
    x, y = scene.pos
    fx, fy = x + VEC[scene.dir][0], y + VEC[scene.dir][1]
    front, key = scene.world(fx, fy), scene.carrying
    if front in ("#", "L", "D"):
        forward = f"FORWARD    → blocked (ahead is {front!r})"
    elif front == "o":
        forward = f"FORWARD    → step through open door to ({fx},{fy})"
    else:
        forward = f"FORWARD    → move to ({fx},{fy}), cell is {front!r}"
    if front == "k":
        pickup = "already carrying an object (no-op)" if key else "would pick up the KEY in front"
    else:
        pickup = f"nothing pickable directly ahead (sees {front!r})"
    drop = (
        "would drop the carried key on the empty tile in front (if empty)"
        if key
        else "nothing to drop (not carrying)"
    )
    toggle = {
        "L": "would UNLOCK the door in front (you have the key)"
        if key
        else "door is LOCKED but you do not hold the key",
        "D": "would OPEN the closed door in front",
        "o": "would CLOSE the open door in front (rarely useful)",
    }.get(front, f"no door directly ahead (sees {front!r})")
    return [
        *turn_previews(scene, "ahead"),
        forward,
        f"PICKUP     → {pickup}",
        f"DROP       → {drop}",
        f"TOGGLE     → {toggle}",
        "DONE       → ends the episode immediately; only use after reaching the goal G",
    ]


def dk_enriched(scene: Scene) -> str:
    seen: dict[str, list[str]] = {c: [] for c in ("k", "D", "L", "o", "G")}
    for i in range(7):
        for j in range(7):
            ch = scene.char(i, j)
            if ch in seen and (i, j) != AGENT_IJ:
                seen[ch].append(bearing(*scene.ego(scene.to_world(i, j))))
    lines = [
        f"Adjacent (forward/left/right/back): {scene.around(0)}/{scene.around(3)}/"
        f"{scene.around(1)}/{scene.around(2)}",
        f"Ahead chain (steps 1-3): {' '.join(scene.around(0, k) for k in (1, 2, 3))}",
    ]
    for label, ch in (
        ("Key (k) visible", "k"),
        ("Door L locked", "L"),
        ("Door D closed", "D"),
        ("Door o open", "o"),
        ("Goal (G) visible", "G"),
    ):
        lines.append(f"{label}: " + (", ".join(seen[ch]) if seen[ch] else "(none in view)"))
    lines.append("Longest clear ray in view: {} ({} steps)".format(*view_ray(scene)))
    lines.append("Longest clear ray in world frame: {} ({} steps)".format(*world_ray(scene)))
    lines += ["", "ACTION PREVIEW (ground truth from simulator):", *dk_previews(scene)]
    return "\n".join(lines) + "\n"


def dk_state_block(scene: Scene, memory: ReleasedMemory, step: str, history: int) -> str:
    has_key, door, _ = dk_status(scene)
    cached = [
        f"{label} {p} ({bearing(*scene.ego(p))})"
        for label, p in (
            ("Key cached at", memory.key),
            ("Door cached at", memory.door),
            ("Goal cached at", memory.goal),
        )
        if p is not None
    ]
    door_obj = scene.door()
    if door_obj is not None and door_obj.is_open:
        target, doors_pass = memory.goal, True
    elif scene.carrying:
        target, doors_pass = memory.door, True
    else:
        target, doors_pass = memory.key, False
    hint = ""
    if target is not None and target != scene.pos and target in memory.known:
        blocked = {"#", "?", "~"} | (set() if doors_pass else {"L", "D"})
        passable = {p for p, ch in memory.known.items() if ch not in blocked}
        step_to = memory.first_step(scene, target, passable | {scene.pos, target})
        if step_to is not None:
            hint = f"Planner hint (known cells, current subtask): {DK_HINTS[step_to]}\n"
    loops = memory.loop_hints(
        "prefer aligning with a clear corridor or interacting with key/door.", 5, "target"
    )
    none_yet = "No subtask target cached yet — explore to discover key/door/goal."
    return (
        f"World position (x,y): {scene.pos}\n"
        f"Has key: {has_key}  |  Door: {door}  |  Step: {step}\n"
        f"{chr(10).join(cached) if cached else none_yet}\n"
        f"Visits at current cell: {memory.visits.get(scene.pos, 0)}\n"
        f"Visit counts (last up to 5 positions): {memory.visits_tail()}\n"
        f"Recent actions (L/R/F/P/D/T/E): {memory.recent_actions(history)}\n"
        + "\n".join(loops)
        + f"\n{hint}"
    )


def doorkey_prompt(
    scene: Scene,
    memory: ReleasedMemory | None,
    autopilot: str | None,
    level: str,
    rationale: bool,
    step: str,
    history: int = 8,
    radius: int = 5,
) -> str:
    """`step`: 'steps taken/step limit', as the released status line shows it."""
    has_key, door, subtask = dk_status(scene)
    ppo = autopilot_line(autopilot)
    if level == "basic":
        return (
            "You are a navigation policy for a MiniGrid DoorKey task.\n"
            f"Your task is to choose exactly ONE action.\n\n{DK_ACTIONS}\nRULES:\n"
            "- Do NOT explain.\n- Do NOT add text or markdown.\n"
            "- PICKUP: pick up the key when you face it.\n"
            "- TOGGLE: unlock/open the door when you face it (key required).\n"
            "- FORWARD: move one step in the direction you face.\n"
            "- Avoid walls (#). Navigate around them.\n\n"
            f"{DK_LEGEND}\n\nCURRENT VIEW (7×7 egocentric):\n{scene.view_text()}\n\n"
            f"STATUS:\nFacing: {FACING[scene.dir]}\nHas key: {has_key}\nDoor: {door}\n"
            f"Step: {step}\n\nCURRENT SUBTASK:\n{subtask}{ppo}\n\nAction: "
        )
    state = maps = ""
    if level in ("stateful_min", "stateful") and memory is not None:
        state = dk_state_block(scene, memory, step, history)
        if level == "stateful":
            maps = map_block(memory, scene, radius)
    if rationale:
        rules = (
            "- Output only the two lines below (no markdown).\n"
            "- First line: Reason: <one short line, max 15 words>.\n"
            "- Second line: Action: <one of the VALID ACTIONS>.\n"
        )
        answer = f"Reason: <short>\nAction: {' or '.join(ACTION_INDEX)}\n\n"
    else:
        rules = (
            "- Output only the action token on the Action: line (no markdown).\n- Do NOT explain.\n"
        )
        answer = "Action: "
    rules += (
        "- PICKUP works only when the cell directly in front contains the key (k) and you are "
        "not carrying anything.\n"
        "- TOGGLE works only when the cell directly in front is a door (L/D/o); L requires the "
        "key in hand.\n"
        "- FORWARD: cannot move into '#' or into a closed/locked door — TOGGLE or turn first.\n"
        "- Use DONE only after the agent is on the goal G.\n"
    )
    if ppo:
        rules += (
            "- If the autopilot suggestion is consistent with the current subtask and previews, "
            "follow it.\n"
        )
    return (
        "You are a navigation policy for a MiniGrid DoorKey task (partially observed).\n"
        f"Choose exactly ONE action.\n\n{DK_ACTIONS}\nRULES:\n{rules}\n{DK_LEGEND}\n\n"
        f"CURRENT VIEW (7×7 egocentric):\n{scene.view_text()}\n\n{maps}"
        f"STATUS:\nFacing: {FACING[scene.dir]}\nHas key: {has_key}\nDoor: {door}\n\n"
        f"CURRENT SUBTASK:\n{subtask}{ppo}\n\n{state}{dk_enriched(scene)}\n"
        "Examples:\n"
        "key visible (2 forward, 1 right), no key in hand → TURN_RIGHT\n"
        "facing 'k', no key in hand → PICKUP\n"
        "key in hand, facing 'L' → TOGGLE\n"
        "door open and goal 1 forward → FORWARD\n"
        "visits high + LOOP_HINT, longest_corridor=right_in_view → TURN_RIGHT\n\n"
        f"OUTPUT FORMAT (MANDATORY):\n{answer}"
    )


def doorkey_text() -> ReleasedText:
    """door_key/eval.py: DECODING max_tokens 10, 48 with rationale; FORWARD on an invalid answer."""

    def prompt(episode, memory, level, rationale, autopilot, radius=5, history=8):
        scene = Scene(episode.sim, doorkey=True)
        step = f"{episode.steps}/{episode.task.max_steps}"
        return doorkey_prompt(scene, memory, autopilot, level, rationale, step, history, radius)

    levels = ("basic", "enriched", "stateful_min", "stateful")
    return ReleasedText(levels, DK_TOKENS, "FORWARD", 10, 48, start_memory, prompt)
