"""Text blocks of the ASK / ASK+ prompt family (ASK+ paper, appendix 9).

Six blocks: (i) role, (ii) valid actions, (iii) rules, (iv) state, (v) examples, (vi) output
format. As in the paper, (i), (ii), (v) and (vi) are static per environment, (iii) changes only
with the rationale instruction, and (iv) is the only block the levels extend, cumulatively:
basic -> enriched (derived features, previews) -> stateful_min (episodic memory, no map) ->
stateful (+ the known-map window). Rules and examples are the paper's full-template text at every
level, also where a line refers to state a lower level does not show (docs/protocol.md).
The autopilot (the PPO suggestion) is part of the state block; without it (SLM-only, or
prompt.autopilot=false) the rule text that refers to it is dropped too.
The belief variant reuses the basic state block as its "current view"."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmark.envs.base import CardView, Memory, NavView, Task, is_doorkey
from benchmark.prompts import navfeatures as nf

LEVELS = ("basic", "enriched", "stateful_min", "stateful")
FAMILIES = ("grid", "cards")

ACTION_MEANING = {
    "TURN_LEFT": "rotate 90 degrees counter-clockwise in place",
    "TURN_RIGHT": "rotate 90 degrees clockwise in place",
    "FORWARD": "move one cell in the facing direction (fails if blocked)",
    "PICKUP": "pick up the object directly ahead",
    "DROP": "drop the carried object onto the cell ahead",
    "TOGGLE": "open/close/unlock the door directly ahead",
    "DONE": "declare the task finished",
    "HIGHER": "bet the next card ranks above the current one",
    "LOWER": "bet the next card ranks below the current one",
}

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


def family_of(task: Task) -> str:
    """'grid' or 'cards': the task's `family` attribute, else read from its action names."""
    fam = getattr(task, "family", None)
    if fam in FAMILIES:
        return fam
    return "cards" if "HIGHER" in task.action_names else "grid"


def world_sentence(task: Any) -> str:
    name = getattr(task, "name", "")
    return GRID_WORLDS.get(name, f"{getattr(task, 'gym_id', name)}: reach the goal square 'G'")


def legend(actions: Sequence[str]) -> str:
    extra = " k=key L=door(locked) D=door(closed) o=door(open)" if is_doorkey(actions) else ""
    return f"LEGEND: A=agent #=wall .=floor G=goal ?=unseen{extra}"


def or_list(actions: Sequence[str]) -> str:
    return " or ".join(actions)


# -- grid ------------------------------------------------------------------------------------------


# The rationale instruction of block (iii) (the paper's tinted lines), per family.
GRID_RATIONALE_RULE = (
    "- Line 1: Reason: <one short line, max 15 words>.   Line 2: Action: <one of VALID ACTIONS>."
)
CARDS_RATIONALE_RULE = (
    "- Line 1: Reason: <one short line, max 12 words>.   Line 2: Action: <HIGHER|LOWER>."
)


def grid_rules(actions: Sequence[str], rationale: bool, autopilot: bool) -> list[str]:
    """Block (iii) for navigation: appendix 9.1 (FourRooms, also used for the other grid envs)
    and 9.3 (DoorKey), the same at every level. Only the output-shape lines follow `rationale`:
    the paper's DoorKey line "Output only the two lines below" describes the rationale answer,
    so without rationale both families say what FourRooms' static line says."""
    token_line = "- Output only the action token line required below (no markdown)."
    if is_doorkey(actions):
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
    lines = [
        "ROLE: You are the navigation consultant of a reinforcement-learning agent in the "
        f"MiniGrid world {world_sentence(task)}. The agent sees only a 7x7 window in front of it. "
        "Pick the single next action that brings it closest to reaching the goal.",
        "",
        "VALID ACTIONS:",
        *(f"- {a}: {ACTION_MEANING[a]}" for a in actions),
        "",
        "RULES:",
        *grid_rules(actions, rationale, autopilot),
    ]
    return "\n".join(lines)


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
    doorkey = is_doorkey(actions)
    ahead = "BLOCKED" if view.front in nf.BLOCKING else "clear"
    lines = [
        legend(actions),
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


def grid_examples(actions: Sequence[str], level: str | None = None) -> str:
    """Block (v): the paper's one-shot examples (appendix 9.1 / 9.3), the same at every level
    (`level` is ignored)."""
    if is_doorkey(actions):
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


def output_format(actions: Sequence[str], rationale: bool) -> str:
    if rationale:
        return f"OUTPUT FORMAT:\nReason: <short>\nAction: {or_list(actions)}"
    return f"OUTPUT FORMAT: exactly one token: {or_list(actions)}"


# -- cards -----------------------------------------------------------------------------------------


def rank_name(rank: int) -> str:
    from benchmark.envs.higherlower import rank_name as _name

    return _name(rank)


def cards_rules(rationale: bool, autopilot: bool) -> list[str]:
    """Block (iii) for HigherLower (appendix 9.2), the same at every level."""
    tie = "- If counts tie, use P(push) and recent streaks as tie-breakers."
    return [
        *([CARDS_RATIONALE_RULE] if rationale else []),
        "- No other text or markdown.",
        "- Choose HIGHER (resp. LOWER) if more remaining cards are strictly above (below) the "
        "current card.",
        tie + (" Follow autopilot when consistent." if autopilot else ""),
    ]


def cards_system(actions: Sequence[str], level: str, rationale: bool, autopilot: bool) -> str:
    """Blocks (i)-(iii); the same for every level (`level` is ignored)."""
    lines = [
        "ROLE: You advise a card-game agent playing HigherLower: one shuffled 52-card deck is "
        "dealt one card at a time, and before each new card the agent bets whether it will rank "
        "HIGHER or LOWER than the current card. Ranks, lowest to highest: A 2 3 4 5 6 7 8 9 10 J "
        "Q K (the ace is low). A card of the same rank is a push (no reward either way).",
        "",
        "VALID ACTIONS:",
        *(f"- {a}: {ACTION_MEANING[a]}" for a in actions),
        "",
        "RULES:",
        *cards_rules(rationale, autopilot),
    ]
    return "\n".join(lines)


def cards_state(view: CardView, memory: Memory, level: str, autopilot: str | None) -> str:
    """Block (iv) for HigherLower (appendix 9.2), cumulative over the levels: basic = the card,
    the decision index and the cards left; enriched adds the remaining higher/lower/equal counts
    and the count-derived probabilities with the recommendation and its margin; stateful adds
    the decision index, the win and loss streaks and the last three decisions with outcomes.
    There is no map in this env, so stateful_min (stateful without the map) equals stateful."""
    left = sum(view.remaining)
    lines = [
        f"STATE: Card={view.card_name}  Decision {view.decision + 1}/{view.n_decisions}  "
        f"Cards left in deck={left}",
    ]
    if autopilot is not None:
        lines.append(f"Autopilot: {autopilot}")
    if level == "basic":
        return "\n".join(lines)
    total = max(left, 1)
    p_hi, p_lo, p_eq = view.higher / total, view.lower / total, view.equal / total
    rec = "HIGHER" if view.higher >= view.lower else "LOWER"
    lines += [
        f"Remaining cards: higher={view.higher}  lower={view.lower}  equal={view.equal}",
        f"P(higher)={p_hi:.2f}  P(lower)={p_lo:.2f}  P(push)={p_eq:.2f}  "
        f"Count says: {rec} (margin {abs(p_hi - p_lo):.2f})",
    ]
    if level == "enriched":
        return "\n".join(lines)
    recent = " | ".join(
        f"on {rank_name(d['card'])}->{d['action']}->{d['outcome']}({rank_name(d['next_card'])})"
        for d in memory.decisions[-3:]
    )
    lines += [
        f"Decision idx: {view.decision}    Win streak: {memory.win_streak}    "
        f"Loss streak: {memory.loss_streak}",
        f"Recent: {recent or '(none)'}",
    ]
    return "\n".join(lines)


def cards_examples(level: str | None = None) -> str:
    """Block (v): the paper's examples (appendix 9.2), the same at every level."""
    lines = [
        "EXAMPLES:",
        "Card=A, many ranks above -> HIGHER       Card=K, many ranks below -> LOWER",
        "Counts tie, pushes possible -> pick using push prob. and recent streaks",
    ]
    return "\n".join(lines)
