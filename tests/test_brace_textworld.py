"""Agent-BRACE's teacher and claim rules on TextWorld (benchmark.envs.textworld.brace): the
teacher's claims are all correct at the true state they came from, a wrong room, inventory,
score or exit is incorrect, an exit never walked is unverifiable, a miscalibrated label is
partial; R_belief of the teacher's belief beats a wrong one (hand-built states: no game)."""

from __future__ import annotations

import pytest

from benchmark.brace.rewards import belief_reward
from benchmark.envs.textworld.brace import items
from benchmark.envs.textworld.task import TextMemory, TextView
from benchmark.envs.truth import Truth, verify


def truth(room="cookery", inventory="You are carrying: a bug and a cookie.", score=1):
    view = TextView("", "", inventory, "take the bug", room, ("go west",), score, 2, 3, 30)
    memory = TextMemory(rooms=["sauna", "cookery"], exits={"sauna": {"go north": "cookery"}})
    return Truth(view, memory, ("go west",), 3, "textworld")


def test_inventory_text_to_items():
    assert items("You are carrying: a bug and a cookie.") == ["bug", "cookie"]
    assert items("You are carrying: an apple, the key and some water.") == ["apple", "key", "water"]
    assert items("You are carrying nothing.") == [] == items("nothing")


def test_teacher_claims_are_correct_at_their_state():
    t = truth()
    claims = t.brace.brace_teacher(t)
    assert claims[:3] == ["- the agent is in the cookery [confirmed]",
                          "- the agent carries: bug, cookie [confirmed]",
                          "- score 1 of 2 [confirmed]"]  # fmt: skip
    assert "- go north from the sauna leads to the cookery [almost certain]" in claims
    unexplored = "- the rooms not yet entered [unknown]"
    assert claims[-1] == unexplored and verify(unexplored, t).verdict == "unverifiable"
    assert {verify(c, t).verdict for c in claims[:-1]} == {"correct"}


def test_the_teacher_caps_its_exits_so_its_belief_keeps_a_full_format_score():
    """A long walk (12 rooms, 3 exits each: 36 walked exits) gives a belief of at most 20
    bullets, every one checked correct but the unexplored line, the current room's exits
    kept first, and its own format score 1."""
    from benchmark.brace.rewards import format_score

    rooms = [f"room{i}" for i in range(12)]
    exits = {r: {f"go {d}": rooms[(i + k + 1) % 12] for k, d in enumerate(("north", "east", "south"))}
             for i, r in enumerate(rooms)}  # fmt: skip
    view = TextView("", "", "nothing", "look", "room3", ("go west",), 0, 2, 9, 30)
    t = Truth(view, TextMemory(rooms=rooms, exits=exits), ("go west",), 9, "textworld")
    claims = t.brace.brace_teacher(t)
    assert len(claims) == 20
    assert "- go north from the room3 leads to the room4 [confirmed]" in claims
    assert {verify(c, t).verdict for c in claims[:-1]} == {"correct"}
    assert format_score("<belief_state>\n" + "\n".join(claims) + "\n</belief_state>") == 1.0


@pytest.mark.parametrize(
    "claim, verdict",
    [
        ("- the agent is in the sauna [confirmed]", "incorrect"),
        ("- the agent is in the sauna [doubtful]", "correct"),  # a false fact doubted
        ("- the agent carries: cookie [confirmed]", "incorrect"),
        ("- the agent carries: a cookie and a bug [confirmed]", "correct"),
        ("- score 0 of 2 [confirmed]", "incorrect"),
        ("- go north from the sauna leads to the shower [confirmed]", "incorrect"),
        ("- go east from the sauna leads to the shower [confirmed]", "unverifiable"),
        ("- the agent is in the cookery [probable]", "partial"),  # right fact, label too weak
        ("- 2 rooms entered so far [confirmed]", "correct"),
        ("- the rooms not yet entered [unknown]", "unverifiable"),  # states no checked fact
    ],
)
def test_claims_are_checked_against_the_true_state(claim, verdict):
    assert verify(claim, truth()).verdict == verdict


def test_r_belief_prefers_the_teacher_belief():
    t = truth()
    teacher = t.brace.brace_teacher(t)
    good = "<belief_state>\n" + "\n".join(teacher) + "\n</belief_state>"
    wrong = "<belief_state>\n- the agent is in the sauna [confirmed]\n</belief_state>"
    prev = ["- nothing has been observed yet [unknown]"]
    r_good = belief_reward(good, prev, t, teacher, 0.0)
    r_wrong = belief_reward(wrong, prev, t, teacher, 0.0)
    assert r_good.correctness == 1.0 and r_good.tracking == 1.0
    assert r_wrong.correctness == 0.0 and r_good.total > r_wrong.total
    assert belief_reward("no block", prev, t, teacher, 1.0).total == 0.0  # the format gate


@pytest.mark.slow
@pytest.mark.parametrize("env", ["tw_quest", "tw_treasure", "tw_cooking"])
def test_the_teacher_passes_its_own_format_score_on_generated_games(env, tmp_path, monkeypatch):
    """Games of the evaluation generation settings (validation seeds 0-1), played by the
    expert: every teacher belief holds at most 20 bullets, each a labelled, distinct claim (its
    format score is the count term alone, min(1, bullets / 8)), and every claim a rule checks
    is correct."""
    from benchmark.brace import rollout
    from benchmark.brace.pipeline import brace_prompt, task_for
    from benchmark.brace.rewards import format_score

    monkeypatch.setenv("BENCHMARK_ROOT", str(tmp_path))
    _, logs = rollout.run(task_for(env), brace_prompt(), rollout.TeacherConsultant(), [0, 1])
    assert logs
    for s in logs:
        text = "<belief_state>\n" + "\n".join(s.teacher) + "\n</belief_state>"
        assert len(s.teacher) <= 20
        assert format_score(text) == pytest.approx(min(1.0, len(s.teacher) / 8)), s.teacher
        verdicts = {verify(c, s.truth).verdict for c in s.teacher}
        assert verdicts <= {"correct", "unverifiable"}, (s.step, s.teacher)
