"""Agent-BRACE's teacher belief and claim rules on TextWorld games (Family.brace_teacher /
brace_rules): what R_belief's correctness and tracking are checked against, exactly, where the
paper asks an LLM judge.

The paper's belief tracks location, room connections, observed objects, inventory and progress
(its appendix A). The teacher states, from the true state: the room (confirmed), the inventory
(confirmed), the score of the quest (its progress, confirmed), every exit walked so far (room
connections: static, so almost certain once walked; confirmed from the room the agent is in), the
number of rooms entered (confirmed) and the rest of the map (unknown until every room is seen).
Each claim is verified against the episode's true state: the room from TextWorld's facts, the
inventory and score from the game, the exits against the exits walked (an exit never walked is
unverifiable: nothing was observed to check it against); no claim scores without being checked
(the unexplored rest is unverifiable)."""

from __future__ import annotations

import functools
import re
from typing import Any

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


def brace_teacher(truth: Any) -> list[str]:
    """The teacher's belief at a TextWorld state, as '- <claim> [<label>]' lines."""
    view, mem = truth.view, truth.memory
    claims = [
        f"- the agent is in the {view.room} [confirmed]",
        f"- the agent carries: {', '.join(items(view.inventory)) or 'nothing'} [confirmed]",
        f"- score {view.score} of {view.max_score} [confirmed]",
    ]
    tail = [f"- {len(mem.rooms)} rooms entered so far [confirmed]",
            "- the rooms not yet entered [unknown]"]  # fmt: skip
    # the walked exits, the current room's first, then the most recently walked rooms', capped
    # so that the whole belief stays within BELIEF_MAX_BULLETS (the paper's 6-8-room maps walk
    # more exits than that; a longer target would fail its own format score)
    others = [r for r in reversed(list(mem.exits)) if r != view.room]
    rooms = ([view.room] if view.room in mem.exits else []) + others
    exits = [
        f"- {cmd} from the {room} leads to the {to} "
        f"[{'confirmed' if room == view.room else 'almost certain'}]"
        for room in rooms
        for cmd, to in mem.exits[room].items()
    ]
    room_claims = BELIEF_MAX_BULLETS - len(claims) - len(tail)
    return claims + exits[:room_claims] + tail


@functools.cache
def brace_rules() -> list[Any]:
    """The claim rules of the TextWorld belief (room, inventory, score, exits, rooms entered).
    The teacher's "the rooms not yet entered [unknown]" states no fact: no rule checks it, so
    it is unverifiable and never scores (it used to count as correct whenever labelled
    unknown)."""
    from benchmark.vocabulary import fact_verdict

    def room(m, t, lb):
        return fact_verdict(m[1].strip() == t.view.room.lower(), lb)

    def carries(m, t, lb):
        return fact_verdict(items(m[1]) == items(t.view.inventory), lb)

    def score(m, t, lb):
        return fact_verdict((int(m[1]), int(m[2])) == (t.view.score, t.view.max_score), lb)

    def exit_to(m, t, lb):
        walked = {(r.lower(), c.lower()): to.lower() for r, ex in t.memory.exits.items()
                  for c, to in ex.items()}  # fmt: skip
        known = walked.get((m[2].strip(), m[1].strip()))
        if known is None:
            return None  # never walked: nothing observed to verify it against
        return fact_verdict(known == m[3].strip(), lb)

    def entered(m, t, lb):
        return fact_verdict(int(m[1]) == len(t.memory.rooms), lb)

    return [
        ("location", re.compile(r"^the agent is in the (.+)$"), room),
        ("inventory", re.compile(r"^the agent carries:?\s*(.+)$"), carries),
        ("score", re.compile(r"^score (\d+) of (\d+)$"), score),
        ("exits", re.compile(r"^(.+?) from the (.+?) leads to the (.+)$"), exit_to),
        ("rooms", re.compile(r"^(\d+) rooms? entered"), entered),
    ]
