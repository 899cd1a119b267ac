"""Agent-BRACE's teacher belief and claim rules on TextWorld games (Family.brace_teacher /
brace_rules): what R_belief's correctness and tracking are checked against, exactly, where the
paper asks an LLM judge.

The paper's belief tracks location, room connections, observed objects, inventory and progress
(its appendix A). The teacher states, from the true state: the room (confirmed), the inventory
(confirmed), the score of the quest (its progress, confirmed), every exit walked so far (room
connections: static, so almost certain once walked; confirmed from the room the agent is in),
every object seen so far (where it lies, held or not, and its open / closed / locked, eaten,
cooking and cutting states where its game has them: confirmed in view, almost certain once
seen), the number of rooms entered (confirmed) and the rest of the map (unknown until every
room is seen); cut by relevance to at most BELIEF_MAX_BULLETS.

Each claim is verified against the episode's true state: the room from TextWorld's facts, the
inventory and score from the game, the exits against the exits walked and then the game's map,
the objects against TextWorld's facts at that step (facts.World). A claim naming a room or
object the game does not contain is incorrect, whatever its label (an invented claim never
pays); a real room, exit or object not yet seen is judged by the facts like any other, its
label included; a state its object does not have in its game is false (a towel is not open).
What no fact decides (the place of a door, the unexplored rest) is unverifiable and never
scores.

The object claim grammar (case-insensitive, one claim per line):
  the <object> is held
  the <object> is in the <room or container>   (a room holds what lies on or in what is there)
  the <object> is on the <supporter>
  the <object> is open | closed | locked | eaten
  the <object> is raw | cooked | fried | roasted | grilled | burned
  the <object> is uncut | sliced | chopped | diced
"""

from __future__ import annotations

import functools
import re
from typing import Any

from benchmark.envs.textworld.facts import STATES, World
from benchmark.vocabulary import BELIEF_MAX_BULLETS

ARTICLES = re.compile(r"^(a|an|the|some)\s+")


def items(inventory: str) -> list[str]:
    """The objects of an inventory text ('You are carrying: a bug and a cookie.' -> bug,
    cookie; 'nothing' -> none), sorted, without articles."""
    text = inventory.strip().rstrip(".").lower()
    text = re.sub(r"^you are carrying:?\s*", "", text)
    if text in ("", "nothing", "none", "no object", "nothing at all"):
        return []
    parts = re.split(r",\s*|\s+and\s+", text)
    return sorted(ARTICLES.sub("", p.strip()) for p in parts if p.strip())


def object_claims(truth: Any) -> tuple[list[str], list[str], list[str]]:
    """The claims of the objects seen so far, as three groups by relevance: the held objects'
    (where, then states), the objects seen now in the room (every one's place, then their
    states) and the others' (the latest found first). An object in view is confirmed, one
    seen earlier almost certain (it only changes by the player's own commands)."""
    world, seen = World(truth.view.facts), truth.memory.seen
    here = set(world.visible())

    def place(obj: str) -> list[str]:
        where = world.place(obj)
        if where is None:
            return []
        text = "held" if where[0] == "held" else f"{where[0]} the {where[1]}"
        return [f"- the {obj} is {text} [{'confirmed' if obj in here else 'almost certain'}]"]

    def states(obj: str) -> list[str]:
        label = "confirmed" if obj in here or world.holds(obj, "eaten") else "almost certain"
        return [f"- the {obj} is {state} [{label}]" for state in world.states(obj)]

    held = [o for o in seen if world.place(o) == ("held", "")]
    now = [o for o in seen if o in here and o not in held]
    rest = [o for o in reversed(seen) if o not in here]
    return (
        [c for o in held for c in place(o) + states(o)],
        [c for o in now for c in place(o)] + [c for o in now for c in states(o)],
        [c for o in rest for c in place(o) + states(o)],
    )


def brace_teacher(truth: Any) -> list[str]:
    """The teacher's belief at a TextWorld state, as '- <claim> [<label>]' lines: the room,
    the inventory, the score, then by relevance the held objects, the current room's exits,
    the objects in view, the other walked exits and the other objects seen, cut so that the
    whole belief holds at most BELIEF_MAX_BULLETS (a longer target would fail its own format
    score), then the rooms entered and the unexplored rest."""
    view, mem = truth.view, truth.memory
    claims = [
        f"- the agent is in the {view.room} [confirmed]",
        f"- the agent carries: {', '.join(items(view.inventory)) or 'nothing'} [confirmed]",
        f"- score {view.score} of {view.max_score} [confirmed]",
    ]
    tail = [f"- {len(mem.rooms)} rooms entered so far [confirmed]",
            "- the rooms not yet entered [unknown]"]  # fmt: skip

    def exits(room: str) -> list[str]:
        label = "confirmed" if room == view.room else "almost certain"
        return [f"- {cmd} from the {room} leads to the {to} [{label}]"
                for cmd, to in mem.exits.get(room, {}).items()]  # fmt: skip

    held, now, rest = object_claims(truth)
    # the walked exits: the current room's, then the most recently walked rooms'
    others = [c for r in reversed(list(mem.exits)) if r != view.room for c in exits(r)]
    middle = held + exits(view.room) + now + others + rest
    return claims + middle[: BELIEF_MAX_BULLETS - len(claims) - len(tail)] + tail


def game(truth: Any) -> tuple[World, set[str], dict[str, str]]:
    """The facts at `truth`, the game's rooms (case-folded) and its objects (case-folded ->
    the facts' spelling): those the facts name, and those the episode saw (a state built
    without the game's facts names only these)."""
    world, mem = World(truth.view.facts), truth.memory
    rooms = {r.lower() for r in (*world.rooms, *mem.rooms, truth.view.room)}
    rooms |= {r.lower() for room, ex in mem.exits.items() for r in (room, *ex.values())}
    objects = {o.lower(): o for o in (*world.objects, *mem.seen, *items(truth.view.inventory))}
    return world, rooms, objects


@functools.cache
def brace_rules() -> list[Any]:
    """The claim rules of the TextWorld belief (room, inventory, score, exits, rooms entered,
    objects: the grammar of the module's docstring). The teacher's "the rooms not yet entered [unknown]" states no fact: no rule checks it, so
    it is unverifiable and never scores (it used to count as correct whenever labelled
    unknown)."""
    from benchmark.vocabulary import fact_verdict

    def room(m, t, lb):
        if m[1].strip() not in game(t)[1]:
            return "incorrect"  # no room of the game
        return fact_verdict(m[1].strip() == t.view.room.lower(), lb)

    def carries(m, t, lb):
        if not set(items(m[1])) <= set(game(t)[2]):
            return "incorrect"  # an object the game does not contain
        return fact_verdict(items(m[1]) == items(t.view.inventory), lb)

    def score(m, t, lb):
        return fact_verdict((int(m[1]), int(m[2])) == (t.view.score, t.view.max_score), lb)

    def exit_to(m, t, lb):
        walked = {(r.lower(), c.lower()): to.lower() for r, ex in t.memory.exits.items()
                  for c, to in ex.items()}  # fmt: skip
        world, rooms, _ = game(t)
        if not {m[2].strip(), m[3].strip()} <= rooms:
            return "incorrect"  # no room of the game
        known = walked.get((m[2].strip(), m[1].strip()))
        if known is None:  # never walked: the game's map decides
            if not world.exits:
                return None  # a state without the game's facts: nothing to check
            game_map = {(r.lower(), c): to.lower() for (r, c), to in world.exits.items()}
            known = game_map.get((m[2].strip(), m[1].strip()))
        return fact_verdict(known == m[3].strip(), lb)

    def entered(m, t, lb):
        return fact_verdict(int(m[1]) == len(t.memory.rooms), lb)

    def object_state(m, t, lb):
        world, _, objects = game(t)
        obj = objects.get(m[1].strip())
        if obj is None:
            return "incorrect"  # an object the game does not contain
        if m[2] == "held":
            true = world.lies(obj, "held")
        else:
            true = bool(world.holds(obj, m[2]))  # a state it does not have: false
        return None if true is None else fact_verdict(true, lb)

    def object_place(m, t, lb):
        world, rooms, objects = game(t)
        obj, place = objects.get(m[1].strip()), m[3].strip()
        if obj is None or (place not in rooms and place not in objects):
            return "incorrect"  # an object or place the game does not contain
        true = world.lies(obj, m[2], place)
        return None if true is None else fact_verdict(true, lb)

    return [
        ("location", re.compile(r"^the agent is in the (.+)$"), room),
        ("inventory", re.compile(r"^the agent carries:?\s*(.+)$"), carries),
        ("score", re.compile(r"^score (\d+) of (\d+)$"), score),
        ("exits", re.compile(r"^(.+?) from the (.+?) leads to the (.+)$"), exit_to),
        ("rooms", re.compile(r"^(\d+) rooms? entered"), entered),
        ("objects", re.compile(rf"^the (.+?) is ({'|'.join(['held', *STATES])})$"), object_state),
        ("objects", re.compile(r"^the (.+?) is (in|on) the (.+)$"), object_place),
    ]
