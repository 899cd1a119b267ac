"""The HigherLower family (`cards`): its ASK/ASK+ blocks (ASK+ paper, appendix 9.2), belief-state
claims and fine-tuning reasons. The task, episode and card-counting expert are
benchmark.envs.higherlower."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from benchmark.envs.base import CardView, Episode, Memory
from benchmark.envs.deck import deal_claim, deal_rule
from benchmark.envs.family import Family, system_block
from benchmark.envs.higherlower import rank_name

CARDS_RATIONALE_RULE = (
    "- Line 1: Reason: <one short line, max 12 words>.   Line 2: Action: <HIGHER|LOWER>."
)


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
    role = (
        "You advise a card-game agent playing HigherLower: one shuffled 52-card deck is dealt "
        "one card at a time, and before each new card the agent bets whether it will rank HIGHER "
        "or LOWER than the current card. Ranks, lowest to highest: A 2 3 4 5 6 7 8 9 10 J Q K "
        "(the ace is low). A card of the same rank is a push (no reward either way)."
    )
    return system_block(role, actions, cards_rules(rationale, autopilot))


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


# -- belief state (benchmark.prompts.belief) -------------------------------------------------------


def observed_claims(view: CardView, mem: Memory) -> list[str]:
    """Claims that the current card, the counts and the streaks establish (all observed): the
    belief update's and the Agent-BRACE teacher's."""
    return [
        f"- the current card is {view.card_name} [confirmed]",
        deal_claim(len(view.seen), sum(view.remaining)),
        f"- {view.higher} remaining cards rank higher and {view.lower} lower [confirmed]",
        f"- {view.equal} remaining cards share the current rank [confirmed]",
        f"- win streak {mem.win_streak}, loss streak {mem.loss_streak} [confirmed]",
    ]


def belief_claims(episode: Episode) -> list[str]:
    """Claims that the current card, the counts and the streaks establish (all observed)."""
    return observed_claims(episode.view(), episode.memory)


def belief_steps(episode: Episode, since: int, limit: int) -> list[str]:
    """One line per decision since step `since` (the last `limit`)."""
    decisions = episode.memory.decisions[since:][-limit:]
    return [
        f"on {rank_name(d['card'])} bet {d['action']} -> {d['outcome']} "
        f"(next {rank_name(d['next_card'])})"
        for d in decisions
    ]


# ----------------------------------------------------------------------------- Agent-BRACE
def brace_teacher(truth: Any) -> list[str]:
    """The teacher's belief on a HigherLower state: the card, the deck and the streaks
    confirmed; the next card's side labelled by its probability from the remaining deck."""
    from benchmark.vocabulary import label_for

    view = truth.view
    total = sum(view.remaining)
    claims = observed_claims(view, truth.memory)
    if total:
        for side, n in (("higher", view.higher), ("lower", view.lower)):
            claims.append(f"- the next card ranks {side} [{label_for(n / total)}]")
    return claims


@functools.cache
def brace_rules() -> list[Any]:
    """Claim rules of the card belief (card, deck, counts, streaks, calibrated next card)."""
    from benchmark.vocabulary import fact_verdict, prob_verdict

    def card(m, t, lb):
        return fact_verdict(m[1].upper() == t.view.card_name, lb)

    def higher_lower(m, t, lb):
        return fact_verdict(int(m[1]) == t.view.higher and int(m[2]) == t.view.lower, lb)

    def equal(m, t, lb):
        return fact_verdict(int(m[1]) == t.view.equal, lb)

    def streak(m, t, lb):
        return fact_verdict(
            int(m[1]) == t.memory.win_streak and int(m[2]) == t.memory.loss_streak, lb
        )

    def next_card(m, t, lb):
        total = sum(t.view.remaining)
        if not total:
            return None
        side = t.view.higher if m[1] == "higher" else t.view.lower
        return prob_verdict(side / total, lb)

    return [
        ("current card", re.compile(r"\bthe current card is (a|k|q|j|10|[2-9])\b"), card),
        deal_rule("deck", lambda t: (len(t.view.seen), sum(t.view.remaining))),
        (
            "higher/lower",
            re.compile(r"^(\d+) remaining cards rank higher and (\d+) lower"),
            higher_lower,
        ),
        ("same rank", re.compile(r"^(\d+) remaining cards share the current rank"), equal),
        ("streaks", re.compile(r"\bwin streak (\d+), loss streak (\d+)"), streak),
        ("next card", re.compile(r"\bthe next card ranks (higher|lower)\b"), next_card),
    ]


class CardsFamily(Family):
    """HigherLower: the card, the remaining deck, card counting."""

    name = "cards"
    kinds = ("card_game",)
    prompt_version = 2
    where_figure = "benchmark.report.analysis.cards_figure"  # rates by card and by decision

    def system(self, task, actions, level, rationale, autopilot):
        return cards_system(actions, level, rationale, autopilot)

    def state(self, view, memory, actions, level, autopilot, map_radius=5, planner_hint="frontier"):
        return cards_state(view, memory, level, autopilot)

    def examples(self, task, actions, level):
        return cards_examples(level)

    def released(self, task):
        from benchmark.envs.released_cards import cards_text

        # the released env: one deck, HIGHER and LOWER in POPGym's order
        if getattr(task, "num_decks", None) == 1 and task.action_names == ("HIGHER", "LOWER"):
            return cards_text()
        return None

    def belief_task(self, task):
        return (
            "TASK: HigherLower card game. One shuffled 52-card deck (ranks A low ... K high) is "
            "dealt card by card; before each card the agent bets HIGHER or LOWER than the "
            "current card. Same rank = push."
        )

    def reason(self, episode, action):
        view = episode.view()
        return f"{view.higher} higher and {view.lower} lower cards remain"

    # the module's functions of the same arguments are the methods (no forwarding wrappers)
    belief_claims = staticmethod(belief_claims)
    belief_steps = staticmethod(belief_steps)
    brace_teacher = staticmethod(brace_teacher)
    brace_rules = staticmethod(brace_rules)


FAMILY = CardsFamily()
