"""R_belief pays only for checked, true claims (benchmark.brace.rewards): on every state of
expert episodes of generated games (each TextWorld task, the grid families), the teacher's
belief scores strictly above the same belief with an invented claim added (an object, room,
exit, key or door the game does not contain, under every label), with any one of its claims
negated, and with another game's room (or pose) in place of its own."""

from __future__ import annotations

import functools

import pytest

from benchmark.brace.rewards import belief_reward
from benchmark.brace.teacher import teacher_claims
from benchmark.envs import make_task
from benchmark.envs.textworld.brace import game
from benchmark.envs.truth import Truth, snapshot, verify
from benchmark.vocabulary import BELIEF_MAX_BULLETS, LABELS, split_claim

# the smallest games the suite's tests play: TextWorld's toy size (seed 100), the grid envs
TEXTWORLD = ("tw_quest", "tw_treasure", "tw_cooking")
GRID = ("empty5x5_random", "doorkey8", "fourrooms", "keycorridor_s3r1", "memory_s11")
SEEDS = (100, 101)
MAX_STEPS = 12  # states per episode
NEGATED = {"confirmed": "doubtful", "almost certain": "unlikely", "probable": "unlikely",
           "unlikely": "almost certain", "doubtful": "confirmed"}  # fmt: skip
INVENTED = "golden unicorn"  # no object of any game here
NOWHERE = "unicorn stable"  # no room of any game here


def block(claims: list[str]) -> str:
    return "<belief_state>\n" + "\n".join(claims) + "\n</belief_state>"


@functools.cache
def states(env: str) -> list[tuple[Truth, list[str], list[str]]]:
    """(true state, teacher's belief, teacher's previous belief) at each step of expert
    episodes of `env`."""
    out = []
    task = make_task(env)
    for seed in SEEDS:
        ep, previous = task.episode(seed), ["- nothing has been observed yet [unknown]"]
        while True:
            truth = snapshot(ep)
            teacher = teacher_claims(truth)
            out.append((truth, teacher, previous))
            if ep.done or ep.steps >= MAX_STEPS:
                break
            ep.step(ep.expert_action())
            previous = teacher
    return out


@pytest.fixture(scope="module", params=TEXTWORLD + GRID)
def played(request):
    return request.param, states(request.param)


def score(claims: list[str], truth: Truth, teacher: list[str], previous: list[str]) -> float:
    return belief_reward(block(claims), previous, truth, teacher, success=0.0).total


def with_claim(teacher: list[str], claim: str) -> list[str]:
    """The teacher's belief with `claim` added, its last line (an unchecked one where it has
    one) dropped if the belief would pass the bullet cap (the length penalty would decide)."""
    out = [*teacher, claim]
    return out if len(out) <= BELIEF_MAX_BULLETS else [*teacher[:-1], claim]


def invented(env: str, truth: Truth) -> list[str]:
    """Claims naming what the game does not contain, in the family's grammar."""
    if env.startswith("tw_"):
        _, rooms, objects = game(truth)
        assert INVENTED not in objects and NOWHERE not in rooms
        room, obj = truth.view.room, sorted(objects)[0] if objects else "agent"
        texts = [f"the {INVENTED} is held", f"the {INVENTED} is in the {room}",
                 f"the {INVENTED} is on the {obj}", f"the {INVENTED} is open",
                 f"the {obj} is in the {NOWHERE}", f"the agent is in the {NOWHERE}",
                 f"go north from the {room} leads to the {NOWHERE}",
                 f"go north from the {NOWHERE} leads to the {room}",
                 f"the agent carries: {INVENTED}"]  # fmt: skip
    else:
        chars = {ch for row in truth.view.full_grid for ch in row}
        texts = ["I carry unicorn"]
        if "k" not in chars and truth.view.carrying != "key":
            texts.append("a key lies at (1, 1)")
        if not chars & set("LDo"):
            texts += ["the door is open", "the door is locked"]
    return [f"- {t} [{label}]" for t in texts for label in LABELS]


def test_an_invented_claim_never_pays(played):
    env, cases = played
    checked = 0
    for truth, teacher, previous in cases:
        base = score(teacher, truth, teacher, previous)
        for claim in invented(env, truth):
            assert verify(claim, truth).verdict == "incorrect", claim
            worse = score(with_claim(teacher, claim), truth, teacher, previous)
            assert worse < base - 1e-9, (env, truth.step, claim, worse, base)
            checked += 1
    assert checked


def test_a_negated_claim_scores_less(played):
    env, cases = played
    checked = 0
    for truth, teacher, previous in cases:
        base = score(teacher, truth, teacher, previous)
        for i, claim in enumerate(teacher):
            text, label = split_claim(claim)
            if label not in NEGATED or verify(claim, truth).verdict != "correct":
                continue
            negated = f"- {text} [{NEGATED[label]}]"
            assert verify(negated, truth).verdict == "incorrect", negated
            belief = [*teacher[:i], negated, *teacher[i + 1 :]]
            worse = score(belief, truth, teacher, previous)
            assert worse < base - 1e-9, (env, truth.step, negated, worse, base)
            checked += 1
    assert checked


def test_another_games_room_scores_less(played):
    """The teacher's first claim (TextWorld: the room; the grid: the pose) replaced by the
    same claim of another game (the other seed's states; on TextWorld every task's), where it
    differs; on TextWorld, a room this game does not contain, under every label."""
    env, cases = played
    others = [o for tw in TEXTWORLD for o in states(tw)] if env.startswith("tw_") else cases
    checked = 0
    for truth, teacher, previous in cases:
        base = score(teacher, truth, teacher, previous)
        foreign = {o[1][0] for o in others if o[0].view is not truth.view} - {teacher[0]}
        if env.startswith("tw_"):
            rooms = game(truth)[1]
            names = {split_claim(c)[0].removeprefix("the agent is in the ") for c in foreign}
            foreign = {f"- the agent is in the {r} [{lb}]" for r in names - rooms for lb in LABELS}
        for claim in sorted(foreign):
            worse = score([claim, *teacher[1:]], truth, teacher, previous)
            assert worse < base - 1e-9, (env, truth.step, claim, worse, base)
            checked += 1
    assert checked, env
