"""The POPGym RepeatPrevious family (`repeatprevious`): name the suit of the card dealt k-1 cards ago.

POPGym's conventions (read from popgym/envs/repeat_previous.py and popgym/core/deck.py):
- one shuffled 52-card deck (per deck) is dealt one card at a time; the agent observes only the
  suit of the card just dealt (suits indexed 0..3 as spades, diamonds, clubs, hearts);
- the answer to card t is scored against the suit of `hand[-k]`, the k-th most recent card
  counting the current one (k=4: the card dealt 3 cards before the current one), from card k on:
  +1/(52 - k) right, -1/(52 - k) wrong; the first k-1 answers are not scored;
- the episode is 51 answers (every card but the last), so a perfect episode returns 1.0.
Accuracy = right answers / scored answers. The current suit says almost nothing about the suit
k-1 cards back (a memoryless rule scores about 13/51 = 0.25), while the expert, which reads the
true hand, is always right: the episodic memory the ASK+ stateful levels show is exactly what
the task needs. The env configs are conf/env/repeatprevious_*.yaml, docs/families.md."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from popgym.core.deck import SUITS
from popgym.envs.repeat_previous import RepeatPrevious

from benchmark.envs.base import Episode, Memory, Task
from benchmark.envs.deck import (
    DeckEpisode,
    OneHot,
    check_actions,
    check_decks,
    check_steps,
    deal_claim,
    deal_rule,
)
from benchmark.envs.family import Family, system_block
from benchmark.envs.wrappers import ActionSubset

SUIT_NAMES: tuple[str, ...] = ("SPADES", "DIAMONDS", "CLUBS", "HEARTS")  # POPGym's SUITS order
ACTION_INDEX: dict[str, int] = {name: i for i, name in enumerate(SUIT_NAMES)}
N_SUITS = len(SUITS)
if [s[0].lower() for s in SUIT_NAMES] != SUITS.tolist():  # the action names follow POPGym's order
    raise ImportError(
        f"POPGym's suits are {SUITS.tolist()}, not {list(SUIT_NAMES)}: update SUIT_NAMES"
    )


@dataclass
class SuitView:
    """What a RepeatPrevious prompt may say, read from POPGym's deck at the current step."""

    suit: int  # the current card's suit (0..3, SUIT_NAMES)
    card: int  # 1-based number of the current card in the deal
    n_cards: int  # cards in the deck (the deal's length)
    k: int  # the answer names hand[-k]: the card dealt k-1 cards before the current one
    dealt: list[int]  # suits dealt so far, in order, current card last (the true hand)
    counts: list[int]  # cards dealt so far per suit

    @property
    def target_card(self) -> int | None:
        """The 1-based number of the card whose suit is asked for; None while nothing is scored."""
        return self.card - self.k + 1 if self.card >= self.k else None

    @property
    def target(self) -> int | None:
        """The suit POPGym scores this answer against (None before card k)."""
        return self.dealt[-self.k] if self.card >= self.k else None


@dataclass
class SuitMemory(Memory):
    """The episodic memory of a card stream: every suit observed, in order (current last), and
    one dict per answer: {card, suit, action, target, outcome: RIGHT|WRONG|UNSCORED}."""

    suits: list[int] = field(default_factory=list)


class RepeatPreviousTask(Task):
    """POPGym RepeatPrevious with `num_decks` decks and lag `k` (RepeatPreviousEasy: 1 deck, k=4);
    the policy sees only the current suit."""

    metric = "accuracy"
    family = "repeatprevious"

    def __init__(
        self,
        name: str,
        num_decks: int = 1,
        k: int = 4,
        max_steps: int | None = None,
        actions: Sequence[str] = SUIT_NAMES,
    ):
        n_cards = check_decks(num_decks)
        if not 1 <= int(k) < n_cards:
            raise ValueError(f"k must be in 1..{n_cards - 1} for {num_decks} deck(s), got {k!r}")
        answers = n_cards - 1
        check_steps("RepeatPrevious", num_decks, max_steps, answers, "answers")
        self.action_names = check_actions(actions, SUIT_NAMES)
        self.name = name
        self.num_decks = int(num_decks)
        self.k = int(k)
        self.n_cards = n_cards
        self.max_steps = answers
        self.max_reward = 1.0  # every scored answer right: (n_cards - k) * 1/(n_cards - k)

    def make_env(self) -> gym.Env:
        """The policy-facing env: one-hot suit in, a suit (in config order) out."""
        game = RepeatPrevious(num_decks=self.num_decks, k=self.k)
        return ActionSubset(OneHot(game, N_SUITS), self.action_names, ACTION_INDEX)

    def episode(self, seed: int) -> RepeatPreviousEpisode:
        return RepeatPreviousEpisode(self, seed)

    def __repr__(self) -> str:
        return f"RepeatPreviousTask({self.name!r}, num_decks={self.num_decks}, k={self.k})"


class RepeatPreviousEpisode(DeckEpisode):
    """One seeded deal; the view and the expert read POPGym's hand, the memory records what the
    agent observed."""

    memory: SuitMemory
    WIN_LOSS = ("RIGHT", "WRONG")

    def __init__(self, task: RepeatPreviousTask, seed: int):
        super().__init__(task, seed)
        self.game: RepeatPrevious = self.env.unwrapped
        self.memory = SuitMemory()
        self.memory.suits.append(int(np.argmax(self.obs)))

    def dealt(self) -> list[int]:
        """The suits of the cards dealt so far, in order, current card last (POPGym's hand)."""
        deck = self.game.deck
        return deck.suits_idx[deck["player"]].astype(int).tolist()

    def step(self, action: int) -> tuple[float, bool]:
        a = self.checked_action(action)
        view, name = self.view(), self.action_names[a]
        self.obs, reward, terminated, truncated, _ = self.env.step(a)
        target = view.target
        outcome = (
            "UNSCORED" if target is None else "RIGHT" if ACTION_INDEX[name] == target else "WRONG"
        )
        decision = {
            "card": view.card,
            "suit": view.suit,
            "action": name,
            "target": target,
            "outcome": outcome,
        }
        about = f"card {view.card}: {name}"
        done = bool(terminated or truncated)
        reward, done = self.settle(name, float(reward), done, outcome, decision, about)
        self.memory.suits.append(int(np.argmax(self.obs)))
        return reward, done

    def view(self) -> SuitView:
        dealt = self.dealt()
        return SuitView(
            suit=dealt[-1],
            card=len(dealt),
            n_cards=self.task.n_cards,
            k=self.task.k,
            dealt=dealt,
            counts=np.bincount(dealt, minlength=N_SUITS).astype(int).tolist(),
        )

    def expert_action(self) -> int:
        """The suit of hand[-k] (what POPGym scores); before card k, where no answer is scored,
        the oldest card dealt."""
        dealt = self.dealt()
        suit = dealt[-self.task.k] if len(dealt) >= self.task.k else dealt[0]
        return self.action_names.index(SUIT_NAMES[suit])

    def optimal_actions(self) -> set[int]:
        """The target's suit; every suit while nothing is scored."""
        target = self.view().target
        if target is None:
            return set(range(len(self.action_names)))
        return {self.action_names.index(SUIT_NAMES[target])}

    def step_fields(self) -> dict[str, Any]:
        """The current suit and the 0-based answer index."""
        return {"suit": int(self.dealt()[-1]), "decision": int(self.steps)}

    def outcome(self) -> dict[str, float]:
        """Accuracy = right answers / scored answers (the first k-1 answers are not scored)."""
        scored = [d for d in self.memory.decisions if d["outcome"] != "UNSCORED"]
        right = sum(d["outcome"] == "RIGHT" for d in scored)
        return {"accuracy": right / len(scored) if scored else 0.0}


# -- the family: prompt blocks, belief claims, Agent-BRACE, reasons ----------------------------


def suit_name(suit: int | None) -> str:
    return "unknown" if suit is None else SUIT_NAMES[int(suit)]


def lag_words(k: int) -> str:
    """How the asked-for card is named: 'the card dealt 3 cards before the current one'."""
    back = k - 1
    if back == 0:
        return "the current card"
    return f"the card dealt {back} card{'s' if back > 1 else ''} before the current one"


RATIONALE_RULE = (
    "- Line 1: Reason: <one short line, max 12 words>.   Line 2: Action: <SPADES|DIAMONDS|"
    "CLUBS|HEARTS>."
)


def recent_line(memory: SuitMemory) -> str:
    recent = " | ".join(
        f"card {d['card']}: {d['action']}->{d['outcome']}" for d in memory.decisions[-3:]
    )
    return f"Recent answers: {recent or '(none)'}"


def card_claims(first: int, suits: Sequence[int]) -> list[str]:
    """'- card N was a <suit> [confirmed]' for the cards numbered first, first + 1, ..."""
    return [
        f"- card {first + i} was a {suit_name(s)[:-1].lower()} [confirmed]"
        for i, s in enumerate(suits)
    ]


def window_claims(view: SuitView, suits: Sequence[int]) -> list[str]:
    """The claims an answer now and at the next k-1 cards needs: the current suit, the deal's
    progress and the suits of the k-1 cards before the current one (`suits`: every card dealt,
    current last, as remembered or as dealt)."""
    first = max(1, view.card - view.k + 1)
    claims = [
        f"- the current card is a {suit_name(view.suit)[:-1].lower()} [confirmed]",
        deal_claim(view.card, view.n_cards - view.card),
        *card_claims(first, suits[first - 1 : view.card - 1]),
    ]
    if view.target_card is None:
        claims.append(f"- no answer is scored before card {view.k} [confirmed]")
    return claims


def belief_claims(episode: Episode) -> list[str]:
    """Claims the current card and the remembered cards establish (all observed)."""
    return window_claims(episode.view(), episode.memory.suits)


def belief_steps(episode: Episode, since: int, limit: int) -> list[str]:
    """One line per answer since step `since` (the last `limit`)."""
    return [
        f"card {d['card']} ({suit_name(d['suit'])}): named {d['action']} -> {d['outcome']}"
        for d in episode.memory.decisions[since:][-limit:]
    ]


def brace_teacher(truth: Any) -> list[str]:
    """The teacher's belief: the current card, the deal's progress and the suits of the k-1
    cards before the current one (from the true hand), all confirmed."""
    return window_claims(truth.view, truth.view.dealt)


SUIT_RE = "(spade|diamond|club|heart)s?"


@functools.cache
def brace_rules() -> list[Any]:
    """Claim rules: the current suit, the deal's progress, any dealt card's suit."""
    from benchmark.vocabulary import fact_verdict

    def singular(word: str) -> str:
        return word.rstrip("s").upper() + "S"

    def current(m, t, lb):
        return fact_verdict(singular(m[1]) == suit_name(t.view.suit), lb)

    def card(m, t, lb):
        number = int(m[1])
        if not 1 <= number <= t.view.card:
            return None  # a card not dealt yet: nothing to check it against
        return fact_verdict(singular(m[2]) == suit_name(t.view.dealt[number - 1]), lb)

    return [
        ("current card", re.compile(rf"\bthe current card is an? {SUIT_RE}\b"), current),
        deal_rule("deal", lambda t: (t.view.card, t.view.n_cards - t.view.card)),
        ("dealt card", re.compile(rf"\bcard (\d+) was an? {SUIT_RE}\b"), card),
    ]


class RepeatPreviousFamily(Family):
    """POPGym RepeatPrevious: the current suit, the remembered cards, the suit k-1 cards back."""

    name = "repeatprevious"
    kinds = ("card_memory",)
    prompt_version = 2

    def system(self, task, actions, level, rationale, autopilot):
        """Blocks (i)-(iii); the same at every level."""
        k, n = task.k, task.n_cards
        role = (
            f"You advise an agent playing RepeatPrevious (POPGym): a shuffled {n}-card deck is "
            "dealt one card at a time and the agent sees only the suit of the card just dealt. At "
            f"every card it must name the suit of {lag_words(k)} ({k} cards back, counting the "
            "current one). The current suit alone does not tell the answer: it has to be "
            "remembered."
        )
        meanings = {a: f"the card {k - 1} back was a {a[:-1].lower()}" for a in actions}
        rules = [
            *([RATIONALE_RULE] if rationale else []),
            "- No other text or markdown.",
            f"- Name the suit of {lag_words(k)}. From card {k} on an answer scores "
            f"+1/{n - k} when right and -1/{n - k} when wrong; before card {k} nothing is scored.",
            "- Follow autopilot when no remembered card says otherwise."
            if autopilot
            else "- If that card is not known, any suit but the current one is as good as another.",
        ]
        return system_block(role, actions, rules, meanings)

    def state(self, view, memory, actions, level, autopilot, map_radius=5, planner_hint="frontier"):
        """Block (iv), cumulative: basic = the current suit and the card number (what the policy
        sees, plus the count); enriched adds which card is asked for, whether the answer is scored
        and the suits dealt so far per suit; stateful_min adds the episodic memory: the last k cards
        remembered, the remembered suit of the asked-for card and the recent answers; stateful adds
        every card remembered since the deal began."""
        lines = [
            f"STATE: Current card: {suit_name(view.suit)}  Card {view.card}/{view.n_cards}  "
            f"Cards left in deck={view.n_cards - view.card}",
        ]
        if autopilot is not None:
            lines.append(f"Autopilot: {autopilot}")
        if level == "basic":
            return "\n".join(lines)
        asked = (
            f"card {view.target_card} ({view.k - 1} back); this answer is scored"
            if view.target_card is not None
            else f"not dealt yet (card {view.card - view.k + 1}); not scored before card {view.k}"
        )
        counts = "  ".join(f"{SUIT_NAMES[s]}={c}" for s, c in enumerate(view.counts))
        lines += [f"Asked for: {asked}", f"Dealt so far: {counts}"]
        if level == "enriched":
            return "\n".join(lines)
        first = max(1, len(memory.suits) - view.k + 1)
        window = " | ".join(
            f"card {first + i}: {suit_name(s)}" for i, s in enumerate(memory.suits[first - 1 :])
        )
        remembered = (
            memory.suits[view.target_card - 1]
            if view.target_card is not None and len(memory.suits) >= view.target_card
            else None
        )
        lines += [
            f"MEMORY (last {view.k} cards, oldest first): {window} (now)",
            (
                f"Card {view.target_card} (asked for, remembered): {suit_name(remembered)}"
                if view.target_card is not None
                else "Asked-for card: not dealt yet (any suit scores the same)"
            ),
            recent_line(memory),
        ]
        if level == "stateful_min":
            return "\n".join(lines)
        every = " ".join(f"{i + 1}:{SUIT_NAMES[s][0]}" for i, s in enumerate(memory.suits))
        lines.append(f"ALL CARDS REMEMBERED (card:suit initial, oldest first): {every}")
        return "\n".join(lines)

    def examples(self, task, actions, level):
        """Block (v); the same at every level."""
        k = task.k
        cycle = ("SPADES", "CLUBS", "HEARTS", "DIAMONDS", "HEARTS")
        seq = [cycle[i % len(cycle)] for i in range(k + 1)]
        shown = ", ".join(seq[:-1]) + f", {seq[-1]} (now)"
        lines = ["EXAMPLES:", f"cards dealt {shown} -> {seq[-k]} ({k - 1} back)"]
        if k > 1:
            lines.append(f"card {k - 1} of the deal (nothing scored yet)  -> any suit")
        return "\n".join(lines)

    def belief_task(self, task):
        return (
            f"TASK: RepeatPrevious card game. A shuffled {task.n_cards}-card deck is dealt card "
            "by card; the agent sees only each card's suit and must name the suit of "
            f"{lag_words(task.k)}."
        )

    def reason(self, episode, action):
        view = episode.view()
        if view.target_card is None:
            return "nothing is scored yet"
        return f"card {view.target_card} was {action.lower()}"

    # the module's functions of the same arguments are the methods (no forwarding wrappers)
    belief_claims = staticmethod(belief_claims)
    belief_steps = staticmethod(belief_steps)
    brace_teacher = staticmethod(brace_teacher)
    brace_rules = staticmethod(brace_rules)


FAMILY = RepeatPreviousFamily()
