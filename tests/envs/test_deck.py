"""What the card families share (benchmark/envs/deck.py): the deal's progress claim, worded once
and read back by each family's claim rule, under the subject that family has always used."""

from __future__ import annotations

import pytest

from benchmark.envs import family_of, make_task
from benchmark.envs.deck import deal_claim
from benchmark.envs.truth import snapshot, verify


@pytest.mark.parametrize(
    ("env", "subject"), [("higherlower", "deck"), ("repeatprevious_easy", "deal")]
)
def test_the_deal_claim_is_verified_against_the_true_deal(env, subject):
    task = make_task(env)
    ep = task.episode(103)
    for _ in range(7):
        ep.step(ep.expert_action())
    truth = snapshot(ep)
    teacher = family_of(task).brace_teacher(truth)
    claims = [c for c in teacher if "cards have been dealt" in c]
    assert len(claims) == 1 and claims[0] in family_of(task).belief_claims(ep)
    dealt, remain = (int(w) for w in claims[0].split() if w.rstrip(";").isdigit())
    assert dealt + remain == 52 and dealt == 8  # the first card and one per answer
    assert claims[0] == deal_claim(dealt, remain)
    right = verify(claims[0], truth)
    assert right.verdict == "correct" and right.subject == subject
    assert verify(deal_claim(dealt + 1, remain - 1), truth).verdict == "incorrect"
    assert verify(deal_claim(dealt, remain + 1), truth).verdict == "incorrect"
    doubted = deal_claim(dealt, remain).replace("[confirmed]", "[doubtful]")
    assert verify(doubted, truth).verdict == "incorrect"
