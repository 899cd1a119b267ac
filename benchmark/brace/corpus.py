"""The pretraining corpus of the base that reads its prompt (benchmark.brace.base): TextWorld game
transcripts rendered by the TextWorld family's own prompt blocks, with copy questions answered
only from the context.

Why synthetic: making real games (tw-make) takes seconds each, far too slow for millions of
tokens. A document here is a small world made from a seed (rooms joined by exits and doors,
containers, supporters and portable objects) played by an expert or a random player; each turn
is the family's VALID ACTIONS block and its state block (`Family.system` and `Family.state` on a
`TextView` and `TextMemory`, exactly as a TextWorld prompt shows them), then the command taken.
Room and object names are drawn per document from thousands of generated adjective+noun names,
so a name can only be predicted by copying it from earlier in the document. Copy questions
("The agent is in: <room>", "Visible: <objects>") follow some state blocks. The corpus holds no
belief blocks and no demo prompts.

Seeds: training documents come from CORPUS_SEEDS, held-out documents (the probe's) from
PROBE_SEEDS; both lie far above every evaluation split and every TextWorld training game
(tests/brace/test_base.py checks it). Names are split too: about one in eight is held out and
appears only in held-out documents."""

from __future__ import annotations

import random
import zlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

CORPUS_VERSION = 1  # bump when a document's text changes: it is part of a base's identity
CORPUS_SEEDS = range(1_000_000_000, 1_900_000_000)  # training documents
PROBE_SEEDS = range(1_900_000_000, 2_000_000_000)  # held-out documents (the probe)
LEVELS = ("enriched", "stateful_min", "stateful")  # prompt levels that show the current room
QUESTION_ROOM = "The agent is in:"
QUESTION_VISIBLE = "Visible:"
NOTHING = "(nothing)"

ADJECTIVES = tuple(
    """amber ancient ashen azure battered beige black blue brass bronze brown burgundy carved
    chipped chrome cobalt copper coral cracked crimson crystal dented dusty ebony emerald faded
    fancy frosted gilded glass golden granite green grey hardened heavy hollow iron ivory jade
    lacquered large lavender leather lemon light lilac maple marble mauve modern mossy narrow
    oaken old olive orange ornate painted pale pewter pine pink plain plastic polished purple
    quartz red rosewood rough rusty scarlet shabby shiny silver slate small smooth spotted steel
    sturdy tarnished teal teak tin topaz umber velvet violet walnut weathered white wicker wooden
    worn yellow""".split()
)
PORTABLES = tuple(
    """apple bag ball banana basket bell belt blanket book bottle bowl box brush bucket button
    candle cap card carrot chain cloak clock coin comb compass cookie crown cup dagger dice
    feather flask flute fork glove goblet hammer hat helmet jar jug kettle key knife ladle lamp
    lantern lens letter map medal mirror mug necklace note onion orb pear pen pencil pepper
    pillow plate potato purse quill ring rope scarf scroll shoe sock spoon stone sword teapot
    tomato torch towel trowel vase wallet whistle""".split()
)
CONTAINERS = tuple(
    "cabinet case chest coffer crate drawer fridge hamper locker safe toolbox trunk wardrobe".split()
)
SUPPORTERS = tuple(
    "bench bookshelf counter desk dresser mantle pedestal rack shelf sofa stand table workbench".split()
)
ROOMS = tuple(
    """attic atrium bathroom bedroom cellar chamber chapel closet corridor cottage den dungeon
    foyer galley garage garden gallery hall hallway kitchen kitchenette laboratory larder library
    lobby loft lounge nursery office pantry parlor playroom porch salon sauna scullery shed
    spare studio study sunroom vault vestibule workshop""".split()
)
DOORS = tuple("door gate hatch portal doorway".split())
DIRECTIONS = {"north": (0, 1), "south": (0, -1), "east": (1, 0), "west": (-1, 0)}
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}
HELD_OUT_EVERY = 8  # about one name in eight is held out (crc32 of the name)


def is_held_out(name: str) -> bool:
    """Whether a name belongs to the held-out part of the pool (deterministic on every machine)."""
    return zlib.crc32(name.encode()) % HELD_OUT_EVERY == 0


def name_pool(nouns: tuple[str, ...], held_out: bool) -> tuple[str, ...]:
    """Every adjective+noun name of `nouns` on one side of the held-out split."""
    names = (f"{a} {n}" for a in ADJECTIVES for n in nouns)
    return tuple(name for name in names if is_held_out(name) == held_out)


POOLS = {
    held: {
        kind: name_pool(nouns, held)
        for kind, nouns in (
            ("room", ROOMS),
            ("portable", PORTABLES),
            ("container", CONTAINERS),
            ("supporter", SUPPORTERS),
            ("door", DOORS),
        )
    }
    for held in (False, True)
}


def vocabulary() -> str:
    """The corpus' words as its documents write them (after a space, capitalised in room titles,
    one name per line): what the base's tokenizer learns beside the `words` size's corpus, so a
    name is a few whole tokens."""
    words = [*ADJECTIVES, *PORTABLES, *CONTAINERS, *SUPPORTERS, *ROOMS, *DOORS, *DIRECTIONS]
    lines = [f" {w}" for w in words] + [f" {w.capitalize()}" for w in words]
    lines += [f"{QUESTION_ROOM} the {r}" for r in ROOMS] + [f"{QUESTION_VISIBLE} a, b", NOTHING]
    return "\n".join(lines)


def article(name: str) -> str:
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def listing(names: list[str]) -> str:
    """`a x`, `a x and a y`, `a x, a y and a z`, as TextWorld lists things."""
    items = [article(n) for n in names]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


@dataclass
class Thing:
    name: str
    kind: str  # portable | container | supporter
    where: str  # a room name, a container or supporter name, or "inventory"
    open: bool = True  # containers only


@dataclass
class World:
    """A small game state: rooms on a grid joined by exits (some through doors), things, the
    player, the objective and its expert plan."""

    rooms: list[str]
    exits: dict[str, dict[str, str]]  # room -> direction -> room
    doors: dict[frozenset, list]  # {room a, room b} -> [door name, is open]
    things: dict[str, Thing]
    at: str
    goal: tuple[str, str] = ("", "")  # (portable, its target container or supporter)
    objective: str = ""
    score: int = 0
    moves: int = 0
    filler: dict[str, str] = field(default_factory=dict)  # room -> its description sentence

    # ------------------------------------------------------------------ what a player sees
    def inside(self, holder: str) -> list[str]:
        return [t.name for t in self.things.values() if t.where == holder]

    def visible(self) -> list[str]:
        """The room's things in the order the description names them (containers' contents
        when open, supporters' contents, then the floor)."""
        seen = []
        for t in self.things.values():
            if t.where != self.at:
                continue
            seen.append(t.name)
            if t.kind == "supporter" or (t.kind == "container" and t.open):
                seen += self.inside(t.name)
        return seen

    def describe(self) -> str:
        """The room as TextWorld's `look` prints it: title, description, things, exits."""
        lines = [f"-= {self.at.title()} =-", self.filler[self.at], ""]
        things = []
        for t in self.things.values():
            if t.where != self.at or t.kind == "portable":
                continue
            inside = self.inside(t.name)
            if t.kind == "container":
                state = "an open" if t.open else "a closed"
                text = f"You see {state} {t.name}."
                if t.open:
                    text += (
                        f" Inside the {t.name} you see {listing(inside)}."
                        if inside
                        else f" The {t.name} is empty."
                    )
            else:
                text = f"You can see {article(t.name)}."
                text += (
                    f" On the {t.name} you see {listing(inside)}."
                    if inside
                    else f" The {t.name} is bare."
                )
            things.append(text)
        floor = [
            t.name for t in self.things.values() if t.where == self.at and t.kind == "portable"
        ]
        if floor:
            things.append(f"There is {listing(floor)} on the floor.")
        lines.append(" ".join(things) if things else "The room is empty.")
        lines.append("")
        ways = []
        for d, room in self.exits[self.at].items():
            door = self.doors.get(frozenset((self.at, room)))
            if door:
                ways.append(
                    f"There is {'an open' if door[1] else 'a closed'} {door[0]} leading {d}."
                )
            else:
                ways.append(f"There is an exit to the {d}.")
        lines.append(" ".join(ways))
        return "\n".join(lines)

    def inventory(self) -> str:
        held = self.inside("inventory")
        return f"You are carrying: {listing(held)}." if held else "You are carrying nothing."

    # ------------------------------------------------------------------ what a player does
    def commands(self) -> list[str]:
        """The admissible commands now, sorted as TextWorld lists them."""
        out = []
        for d, room in self.exits[self.at].items():
            door = self.doors.get(frozenset((self.at, room)))
            if door:
                out.append(f"{'close' if door[1] else 'open'} {door[0]}")
            if not door or door[1]:
                out.append(f"go {d}")
        held = self.inside("inventory")
        for t in self.things.values():
            if t.where != self.at:
                continue
            if t.kind == "portable":
                out.append(f"take {t.name}")
            elif t.kind == "container":
                out.append(f"{'close' if t.open else 'open'} {t.name}")
                if t.open:
                    out += [f"take {x} from {t.name}" for x in self.inside(t.name)]
                    out += [f"insert {x} into {t.name}" for x in held]
            else:
                out += [f"take {x} from {t.name}" for x in self.inside(t.name)]
                out += [f"put {x} on {t.name}" for x in held]
        out += [f"drop {x}" for x in held]
        return sorted(set(out))

    def step(self, command: str) -> str:
        """Apply an admissible command; the game's answer."""
        self.moves += 1
        verb, _, rest = command.partition(" ")
        if verb == "go":
            self.at = self.exits[self.at][rest]
            return self.describe()
        if verb in ("open", "close"):
            for rooms, door in self.doors.items():
                if door[0] == rest and self.at in rooms:
                    door[1] = verb == "open"
                    return f"You {verb} {rest}."
            self.things[rest].open = verb == "open"
            inside = self.inside(rest)
            if verb == "open" and inside:
                return f"You open the {rest}, revealing {listing(inside)}."
            return f"You {verb} the {rest}."
        if verb == "take":
            name, _, holder = rest.partition(" from ")
            self.things[name].where = "inventory"
            return (
                f"You take the {name} from the {holder}." if holder else f"You pick up the {name}."
            )
        if verb == "drop":
            self.things[rest].where = self.at
            return f"You drop the {rest} on the ground."
        name, _, holder = rest.partition(" on " if verb == "put" else " into ")
        self.things[name].where = holder
        if (name, holder) == self.goal:
            self.score = 1
        return f"You put the {name} {'on' if verb == 'put' else 'into'} the {holder}."

    def expert_command(self) -> str | None:
        """The next command of the shortest plan to the objective (open doors and containers on
        the way), or None once it is done."""
        portable, target = self.goal
        if self.score:
            return None
        held = self.things[portable].where == "inventory"
        aim = self.things[target] if held else self.things[portable]
        where = aim.where
        if where != self.at and where in self.things:  # inside a container or on a supporter
            holder = self.things[where]
            if holder.where == self.at:
                if holder.kind == "container" and not holder.open:
                    return f"open {holder.name}"
                return f"take {portable} from {holder.name}"
            where = holder.where
        if where == self.at:
            if not held:
                return f"take {portable}"
            if aim.kind == "container" and not aim.open:
                return f"open {aim.name}"
            return f"{'put' if aim.kind == 'supporter' else 'insert'} {portable} " + (
                f"on {target}" if aim.kind == "supporter" else f"into {target}"
            )
        step = self._first_step(where)
        door = self.doors.get(frozenset((self.at, self.exits[self.at][step])))
        if door and not door[1]:
            return f"open {door[0]}"
        return f"go {step}"

    def _first_step(self, room: str) -> str:
        seen, todo = {self.at}, deque((r, d) for d, r in self.exits[self.at].items())
        while todo:
            r, first = todo.popleft()
            if r == room:
                return first
            seen.add(r)
            todo.extend((n, first) for n in self.exits[r].values() if n not in seen)
        raise ValueError(f"room {room!r} cannot be reached")


FILLERS = (
    "You've entered {a}. You begin to take stock of what's here.",
    "You find yourself in {a}. An usual one.",
    "Well, here we are in {a}. It's not the most exciting room, but it will do.",
    "You arrive in {a}. A normal kind of place.",
    "You've just walked into {a}. The room seems oddly familiar.",
)


def make_world(rng: random.Random, held_out: bool) -> World:
    """A world of 2-5 rooms on a grid, things placed in them, and a put/insert objective."""
    pool = POOLS[held_out]
    n_rooms = rng.randint(2, 5)
    rooms = rng.sample(pool["room"], n_rooms)
    place = {rooms[0]: (0, 0)}
    exits: dict[str, dict[str, str]] = {r: {} for r in rooms}
    doors: dict[frozenset, list] = {}
    door_names = iter(rng.sample(pool["door"], n_rooms))
    for room in rooms[1:]:
        while True:
            base = rng.choice(list(place))
            d = rng.choice(list(DIRECTIONS))
            xy = (place[base][0] + DIRECTIONS[d][0], place[base][1] + DIRECTIONS[d][1])
            if xy not in place.values():
                break
        place[room] = xy
        exits[base][d], exits[room][OPPOSITE[d]] = room, base
        if rng.random() < 0.35:
            doors[frozenset((base, room))] = [next(door_names), rng.random() < 0.3]
    for r in rooms:  # exits in the order TextWorld names them
        exits[r] = {d: exits[r][d] for d in DIRECTIONS if d in exits[r]}
    things: dict[str, Thing] = {}
    n_items = rng.randint(2, 6)
    holders = rng.sample(pool["container"], rng.randint(0, 3)) + rng.sample(
        pool["supporter"], rng.randint(1, 3)
    )
    for name in holders:
        kind = "supporter" if name.split()[-1] in SUPPORTERS else "container"
        things[name] = Thing(name, kind, rng.choice(rooms), open=rng.random() < 0.5)
    for name in rng.sample(pool["portable"], n_items):
        spots = [*rooms, *holders, *(["inventory"] if rng.random() < 0.3 else [])]
        things[name] = Thing(name, "portable", rng.choice(spots))
    order = list(things.values())
    rng.shuffle(order)
    world = World(
        rooms=rooms,
        exits=exits,
        doors=doors,
        things={t.name: t for t in order},
        at=rng.choice(rooms),
        filler={r: rng.choice(FILLERS).format(a=article(r)) for r in rooms},
    )
    portable = rng.choice([t.name for t in order if t.kind == "portable"])
    target = rng.choice(holders)
    if world.things[portable].where == target:  # the objective moves it: start it elsewhere
        world.things[portable].where = rng.choice(rooms)
    world.goal = (portable, target)
    verb = "put it on" if world.things[target].kind == "supporter" else "put it into"
    world.objective = (
        f"Here is how to play! First, find the {portable}. Then, {verb} the {target}. "
        "Got that? Good!"
    )
    return world


@dataclass(frozen=True)
class Document:
    """One transcript: its text, and where each copy question's answer starts and ends in it
    (character offsets: the probe cuts a prompt before an answer)."""

    text: str
    answers: tuple[tuple[str, int, int], ...]  # (question, start, end) of each answer


def document(
    seed: int,
    held_out: bool = False,
    turns: int | None = None,
    ask: float = 0.5,
    max_chars: int | None = None,
) -> Document:
    """The transcript of seed `seed`: a world played for `turns` turns (random 1-12 by default;
    fewer when the text passes `max_chars` first) by an expert, a random or an epsilon-greedy
    player; after each state block the copy questions follow with probability `ask`, and always
    after the last turn's (the document then ends there). A training document
    takes a seed of CORPUS_SEEDS and the training names; a held-out one PROBE_SEEDS and the
    held-out names."""
    seeds = PROBE_SEEDS if held_out else CORPUS_SEEDS
    if seed not in seeds:
        raise ValueError(
            f"document seed {seed} is out of range: allowed [{seeds.start}, {seeds.stop}) "
            f"for {'held-out' if held_out else 'training'} documents"
        )
    from benchmark.envs import get_family
    from benchmark.envs.textworld.task import TextMemory, TextView

    family = get_family("textworld")
    rng = random.Random(seed)
    world = make_world(rng, held_out)
    level = rng.choice(LEVELS)
    epsilon = rng.choice((0.0, 0.2, 0.5, 1.0))  # expert .. random player
    turns = rng.randint(1, 12) if turns is None else turns
    memory = TextMemory()
    memory.rooms.append(world.at)
    observation = f"{world.objective}\n\n{world.describe()}"
    parts: list[str] = []
    answers: list[tuple[str, int, int]] = []
    length = 0

    def add(text: str) -> None:
        nonlocal length
        parts.append(text)
        length += len(text)

    max_steps = rng.choice((30, 50, 100))
    for turn in range(turns):
        if max_chars is not None and length > max_chars:
            break
        commands = world.commands()
        view = TextView(
            observation=observation,
            description=world.describe(),
            inventory=world.inventory(),
            objective=world.objective,
            room=world.at,
            commands=tuple(commands),
            score=world.score,
            max_score=1,
            moves=world.moves,
            max_steps=max_steps,
        )
        system = family.system(None, tuple(commands), level, False, False)
        add(system.split("\n\n")[1] + "\n")  # the VALID ACTIONS block
        add(family.state(view, memory, tuple(commands), level, None) + "\n")
        if turn == turns - 1 or rng.random() < ask:
            visible = world.visible()
            for question, answer in (
                (QUESTION_ROOM, world.at),
                (QUESTION_VISIBLE, ", ".join(visible) if visible else NOTHING),
            ):
                add(question)
                answers.append((question, length, length + 1 + len(answer)))
                add(f" {answer}\n")
        if turn == turns - 1:
            break
        expert = world.expert_command()
        command = expert if expert and rng.random() >= epsilon else rng.choice(commands)
        add(f"Action: {command}\n\n")
        before = world.at
        observation = world.step(command)
        memory.transcript.append((command, observation.splitlines()[0]))
        if world.at != before:
            memory.exits.setdefault(before, {})[command] = world.at
            if world.at not in memory.rooms:
                memory.rooms.append(world.at)
    return Document("".join(parts), tuple(answers))


def documents(
    start: int = 0, held_out: bool = False, max_chars: int | None = None
) -> Iterator[Document]:
    """Documents number `start`, `start` + 1, ... of the training (or held-out) seeds."""
    seeds = PROBE_SEEDS if held_out else CORPUS_SEEDS
    for i in range(start, len(seeds)):
        yield document(seeds[i], held_out, max_chars=max_chars)
