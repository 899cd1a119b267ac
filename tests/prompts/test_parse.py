"""The one action parser, against adversarial model outputs (table-driven)."""

from __future__ import annotations

import pytest

from benchmark.consultants.hf import strip_thinking as backend_strip_thinking
from benchmark.prompts.parse import json_field, parse_action, parse_plan, parse_reason
from benchmark.vocabulary import strip_thinking

NAV = ("TURN_LEFT", "TURN_RIGHT", "FORWARD")
DOORKEY = ("TURN_LEFT", "TURN_RIGHT", "FORWARD", "PICKUP", "DROP", "TOGGLE", "DONE")
CARDS = ("HIGHER", "LOWER")
FEEDBACK = ("TURN_LEFT", "TURN_RIGHT", "FORWARD", "DONE")

CASES = [
    # (text, actions, expected)
    ("FORWARD", NAV, "FORWARD"),
    ("forward", NAV, "FORWARD"),
    ("  TURN_LEFT  \n", NAV, "TURN_LEFT"),
    ("turn left", NAV, "TURN_LEFT"),
    ("Left", NAV, "TURN_LEFT"),
    ("`TURN_RIGHT`", NAV, "TURN_RIGHT"),
    ("**FORWARD**", NAV, "FORWARD"),
    ('"TURN_LEFT"', NAV, "TURN_LEFT"),
    ("'turn_right'", NAV, "TURN_RIGHT"),
    ("Action: FORWARD", NAV, "FORWARD"),
    ("**Action:** TURN_RIGHT", NAV, "TURN_RIGHT"),
    ("Reason: the wall is ahead, turn left is safer\nAction: TURN_RIGHT", NAV, "TURN_RIGHT"),
    ("Reason: FORWARD is blocked.   Action: TURN_LEFT", NAV, "TURN_LEFT"),
    ("<think>maybe forward? no, left</think>\nAction: TURN_RIGHT", NAV, "TURN_RIGHT"),
    ("<think>wall ahead so I turn</think>TURN_LEFT", NAV, "TURN_LEFT"),
    ("<think>\nI will go forward... or left", NAV, None),  # unterminated, no answer
    ("<think>\nshort budget\nAction: FORWARD", NAV, "FORWARD"),  # unterminated, explicit
    ("wall ahead, so\n</think>\n\nTURN_RIGHT", NAV, "TURN_RIGHT"),  # lone closing tag
    ("I think we should go straight.", NAV, "FORWARD"),
    ("move forward", NAV, "FORWARD"),
    ("Move_Forward", NAV, "FORWARD"),
    ("I would turn left or maybe go forward.", NAV, None),  # two actions, no answer line
    ("TURN_LEFT or TURN_RIGHT or FORWARD", NAV, None),  # echoed format line
    ("Action: TURN_LEFT or TURN_RIGHT", NAV, None),  # ambiguous explicit answer
    ("Action: <one of VALID ACTIONS>", NAV, None),
    ("", NAV, None),
    ("I don't know.", NAV, None),
    ("DONE", NAV, None),  # not a valid FourRooms action
    ("Action: 2", NAV, None),  # indices are not accepted
    ('{"action": "Move Forward", "reason": "path is clear"}', FEEDBACK, "FORWARD"),
    ('```json\n{"action": "Turn Left", "reason": "wall"}\n```', FEEDBACK, "TURN_LEFT"),
    ("{'action': 'Turn Right', 'reason': 'goal is right'}", FEEDBACK, "TURN_RIGHT"),
    ('{"action": "Move Forward", "reason": "the path to the left is bl', FEEDBACK, "FORWARD"),
    ('Reasoning: left is a wall.\n{"action": "Turn Right", "reason": "x"}', FEEDBACK, "TURN_RIGHT"),
    ('{"reason": "turn left then forward", "action": "Done"}', FEEDBACK, "DONE"),
    ("Done", FEEDBACK, "DONE"),
    ("pick up", DOORKEY, "PICKUP"),
    ("Action: Pick up the key", DOORKEY, "PICKUP"),
    ("open the door", DOORKEY, "TOGGLE"),
    ("Action: toggle", DOORKEY, "TOGGLE"),
    ("Reason: key in hand, facing L\nAction: TOGGLE", DOORKEY, "TOGGLE"),
    ("HIGHER", CARDS, "HIGHER"),
    ("higher", CARDS, "HIGHER"),
    ("High", CARDS, "HIGHER"),
    ("lower.", CARDS, "LOWER"),
    ("Reason: many cards above 3\nAction: HIGHER", CARDS, "HIGHER"),
    ("Reason: more cards below\nAction: **LOWER**", CARDS, "LOWER"),
    ("HIGHER or LOWER", CARDS, None),
    ("The next card is probably higher, so: HIGHER", CARDS, "HIGHER"),
    ("Action: Higher\nAction: Lower", CARDS, "LOWER"),  # the last explicit answer wins
    ("FORWARD\n\nThis moves toward the goal, not left.", NAV, "FORWARD"),  # answer line wins
    ("Explanation: the left cell is a wall.\nFORWARD", NAV, "FORWARD"),  # answer line wins
    ("final action = turn right", NAV, "TURN_RIGHT"),
]


@pytest.mark.parametrize(("text", "actions", "expected"), CASES)
def test_parse_action(text, actions, expected):
    assert parse_action(text, actions) == expected


def test_enough_adversarial_cases():
    assert len(CASES) >= 40


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"actions": ["Turn Right", "Move Forward", "Move Forward"], "reason": "x"}',
         ["TURN_RIGHT", "FORWARD", "FORWARD"]),
        ('["FORWARD", "TURN_LEFT"]', ["FORWARD", "TURN_LEFT"]),
        ("1. Move Forward\n2. Turn Left\n3. Move Forward", ["FORWARD", "TURN_LEFT", "FORWARD"]),
        ("Plan: Move Forward x3, Turn Right, Done", ["FORWARD"] * 3 + ["TURN_RIGHT", "DONE"]),
        ("Turn Left -> Move Forward (2 times) -> Done", ["TURN_LEFT", "FORWARD", "FORWARD", "DONE"]),
        ("<think>hmm</think>FORWARD, FORWARD", ["FORWARD", "FORWARD"]),
        ("no idea", None),
        ("", None),
    ],
)  # fmt: skip
def test_parse_plan(text, expected):
    assert parse_plan(text, FEEDBACK) == expected


def test_json_field_and_reason():
    text = '<think>x</think>{"action": "Turn Left", "reason": "wall", "policy": "hug the wall"}'
    assert json_field(text, "policy") == "hug the wall"
    assert json_field('{"action": "Done", "policy": "cut off here', "policy") == "cut off here"
    assert json_field("no json", "policy") is None
    assert parse_reason(text) == "wall"
    assert parse_reason("Reason: goal ahead   Action: FORWARD") == "goal ahead"
    assert parse_reason("FORWARD") == ""


# One strip_thinking, two readings: the parser's (tags in any case, a closed block becomes a space,
# cut at the last lone </think>) and the backends' literal one (consultants.hf and openai_compat:
# exact tags, cut at a </think> only before any <think>, blocks dropped without a space). Both are
# what they were as two functions; the rows where they differ pin that neither changes.
THINKING_SPLITS = [
    # (text, parser's (visible, thinking), literal (visible, thinking))
    (
        "<think>a</think>\n\nAction: FORWARD",
        (" \n\nAction: FORWARD", ""),
        ("\n\nAction: FORWARD", ""),
    ),
    ("x<think>a</think>y", ("x y", ""), ("xy", "")),
    ("<THINK>a</THINK>FORWARD", (" FORWARD", ""), ("<THINK>a</THINK>FORWARD", "")),
    ("a</think>b</think>c", ("c", ""), ("b</think>c", "")),
    ("<think>a</think>b</think>c", ("c", ""), ("b</think>c", "")),
    ("x<think>a<think>b</think>y<think>c", ("x y", "c"), ("xy", "c")),
    ("<think>a\n", ("", "a\n"), ("\n", "a")),
    ("<<think>a</think>think>b", ("< think>b", ""), ("<think>b", "")),  # literal: one pass
    ("İ<think>x", ("İ<", ""), ("İ", "x")),  # the parser slices by lower() indices ('İ' -> 2 chars)
    (
        "Action: FORWARD <think>never closed",
        ("Action: FORWARD ", "never closed"),
        ("Action: FORWARD ", "never closed"),
    ),
]


@pytest.mark.parametrize(("text", "parser", "literal"), THINKING_SPLITS)
def test_strip_thinking_parser_and_literal_readings(text, parser, literal):
    assert strip_thinking(text) == parser
    assert strip_thinking(text, literal=True) == literal
    assert backend_strip_thinking(text) == literal[0].strip()
