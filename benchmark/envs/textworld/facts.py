"""TextWorld's true facts read as a world of objects: where each object is, which states it is
in, what the player can see. The episode records the objects seen (task.py), the Agent-BRACE
teacher states them and its claim rules check object claims against them (brace.py).

A fact is a tuple (predicate, argument, ...), as TextWorld's `facts` info gives them, with the
entities' names: ('at', 'towel', 'laundromat'), ('in', 'passkey', 'I'), ('open', 'fridge').
States are read the way the game prints them: "raw" is food not fried, roasted, grilled or
burned (TextWorld's own `cooked(f)` also marks food a Cooking recipe wants raw as prepared, and
its `raw(f)` is missing on food that needs cooking, which the game prints "raw"), "closed"
holds for a locked container or door too, "eaten" is Treasure's `eaten(f)` or Cooking's
`consumed(f)`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

Fact = tuple[str, ...]

PLAYER, INVENTORY = "P", "I"
PLACED = ("at", "in", "on")  # object, place
MAP = ("north_of", "south_of", "east_of", "west_of", "free", "link")
OPENABLE = ("open", "closed", "locked")
FOOD = ("edible", "inedible", "eaten", "consumed", "cookable", "needs_cooking")
HEAT = ("fried", "roasted", "grilled", "burned")
COOKING = ("cookable", "raw", "needs_cooking", "cooked", *HEAT)
CUTTING = ("cuttable", "uncut", "sliced", "chopped", "diced")


def _any(*predicates: str):
    return lambda has: any(has(p) for p in predicates)


# a state word of the claim grammar -> (the predicates that show the object has such a state,
# whether it holds given `has(predicate)`); an object without any of the first set has no such
# state in its game, so a claim of it is not checked
STATES = {
    "open": (OPENABLE, _any("open")),
    "closed": (OPENABLE, _any("closed", "locked")),
    "locked": (OPENABLE, _any("locked")),
    "eaten": (FOOD, _any("eaten", "consumed")),
    "raw": (COOKING, lambda has: not any(has(p) for p in HEAT)),
    "cooked": (COOKING, _any(*HEAT)),
    **{word: (COOKING, _any(word)) for word in HEAT},
    **{word: (CUTTING, _any(word)) for word in CUTTING[1:]},
}


class World:
    """The facts of one step, indexed by object."""

    def __init__(self, facts: Iterable[Sequence[str]]):
        self.facts = {tuple(f) for f in facts}
        self.unary: dict[str, set[str]] = defaultdict(set)
        self.placed: dict[str, tuple[str, str]] = {}  # object -> (at | in | on, place)
        self.room = "?"
        self.rooms: set[str] = set()  # every room the facts name
        self.names: set[str] = set()  # every room and object the facts name
        self.exits: dict[tuple[str, str], str] = {}  # (room, "go <direction>") -> room
        for pred, *args in self.facts:
            self.names.update(a for a in args if a not in (PLAYER, INVENTORY))
            if pred in MAP[:4] and len(args) == 2:  # north_of(a, b): going north from b leads to a
                self.exits[(args[1], f"go {pred[: -len('_of')]}")] = args[0]
            if len(args) == 1:
                self.unary[args[0]].add(pred)
            elif pred == "at" and args[0] == PLAYER:
                self.room = args[1]
            elif pred in PLACED and len(args) == 2:
                self.placed[args[0]] = (pred, args[1])
            if pred == "at":
                self.rooms.add(args[1])
            elif pred in MAP:  # room, [door,] room
                self.rooms.update((args[0], args[-1]))

    @property
    def objects(self) -> set[str]:
        """Every object the facts name (containers, supporters, doors, food...), not rooms."""
        return self.names - self.rooms

    def has(self, obj: str, predicate: str) -> bool:
        return predicate in self.unary.get(obj, ())

    def place(self, obj: str) -> tuple[str, str] | None:
        """Where the object lies as the teacher says it: ('held', ''), ('in', room or
        container), ('on', supporter); None when it lies nowhere (eaten, a door, an unmade
        meal)."""
        where = self.placed.get(obj)
        if where is None:
            return None
        pred, place = where
        if place == INVENTORY:
            return ("held", "")
        return ("on" if pred == "on" else "in", place)

    def room_of(self, obj: str) -> str | None:
        """The room an object is in, through the containers and supporters that hold it (a held
        object: the player's room); None when it lies nowhere."""
        seen: set[str] = set()
        while obj in self.placed and obj not in seen:
            seen.add(obj)
            pred, place = self.placed[obj]
            if place == INVENTORY:
                return self.room
            if pred == "at":
                return place
            obj = place
        return None

    def lies(self, obj: str, relation: str, place: str = "") -> bool | None:
        """Whether the object is `held`, `in` the room or container `place`, or `on` the
        supporter `place` (names compared case-folded; a room holds what is on or in what is
        there, and what the player holds); None when it has no place to check (a door, an
        unmade meal). An eaten object lies nowhere: every such claim of it is false."""
        if self.room_of(obj) is None:
            return False if self.holds(obj, "eaten") else None
        if relation == "held":
            return self.placed[obj][1] == INVENTORY
        if relation == "in" and place in {r.lower() for r in self.rooms}:
            return self.room_of(obj).lower() == place
        pred, where = self.placed[obj]
        return pred == relation and where != INVENTORY and where.lower() == place

    def is_open(self, obj: str) -> bool:
        return not (self.has(obj, "closed") or self.has(obj, "locked"))

    def visible(self) -> list[str]:
        """The objects the player sees now: those in its room, on what is there, in what is
        there and open (nested), held, and the doors of its room; sorted."""
        out = {args[1] for pred, *args in self.facts if pred == "link" and args[0] == self.room}
        frontier = [o for o, (pred, place) in self.placed.items()
                    if place == INVENTORY or (pred == "at" and place == self.room)]  # fmt: skip
        frontier = [o for o in frontier if o != PLAYER]
        while frontier:
            obj = frontier.pop()
            if obj in out:
                continue
            out.add(obj)
            if self.is_open(obj):
                frontier += [o for o, (pred, place) in self.placed.items()
                             if place == obj and pred in ("in", "on")]  # fmt: skip
        return sorted(out)

    def holds(self, obj: str, state: str) -> bool | None:
        """Whether the object is in `state` (a word of STATES); None when its game gives it no
        such state (a towel is never open, a key never eaten)."""
        kinds, rule = STATES[state]
        if not any(self.has(obj, p) for p in kinds):
            return None
        return rule(lambda p: self.has(obj, p))

    def states(self, obj: str) -> list[str]:
        """The object's states as the teacher states them, one word per kind it has: open /
        closed / locked, eaten, its cooking (raw or the heat), its cutting."""
        out = []
        for word in ("locked", "closed", "open"):
            if self.holds(obj, word):
                out.append(word)
                break
        if self.holds(obj, "eaten"):
            out.append("eaten")
        if self.holds(obj, "raw") is not None:
            heat = [w for w in ("burned", *HEAT[:3]) if self.has(obj, w)]
            out.append(heat[0] if heat else "raw")
        out += [w for w in CUTTING[1:] if self.has(obj, w)][:1]
        return out
