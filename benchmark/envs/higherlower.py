"""POPGym HigherLower: guess whether the next card of a shuffled deck is higher or lower.

POPGym's conventions (read from popgym/envs/higher_lower.py and popgym/core/deck.py):
- ranks are indexed 0..12 as A, 2, 3, ..., 10, J, Q, K: the ace is LOW;
- action 0 guesses higher, action 1 lower;
- reward +1/52 for a right guess, -1/52 for a wrong one, 0 when the next card has the same rank
  (a push); with one deck the episode is 51 decisions (every card after the first).
Accuracy = right guesses / decisions, so a push counts as not correct (it is not a WIN). Under
this definition the best memoryless rule scores about 0.72-0.73, as the ASK+ paper reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from popgym.core.deck import DECK_SIZE, RANKS
from popgym.envs.higher_lower import HigherLower

from benchmark.envs.base import CardView, Task
from benchmark.envs.deck import DeckEpisode, OneHot, check_actions, check_decks, check_steps
from benchmark.envs.wrappers import ActionSubset

ACTION_INDEX: dict[str, int] = {"HIGHER": 0, "LOWER": 1}  # POPGym: guess_higher = action == 0
N_RANKS = len(RANKS)
RANK_NAMES: tuple[str, ...] = tuple(
    r.upper() for r in RANKS
)  # ('A', '2', ..., '10', 'J', 'Q', 'K')


def rank_name(rank: int) -> str:
    """Printable name of a POPGym rank index (0 = ace ... 12 = king)."""
    return RANK_NAMES[int(rank)]


def judge(card: int, action: str, next_card: int) -> str:
    """WIN, LOSS or PUSH for guessing `action` (HIGHER/LOWER) on `card` when `next_card` comes."""
    if next_card == card:
        return "PUSH"
    return "WIN" if (next_card > card) == (action == "HIGHER") else "LOSS"


def counting_choice(card: int, remaining: Sequence[int]) -> str:
    """Card counting: the side with more remaining cards strictly beyond the current rank;
    a tie goes to HIGHER (either side then has the same expected reward)."""
    higher = sum(remaining[card + 1 :])
    lower = sum(remaining[:card])
    return "HIGHER" if higher >= lower else "LOWER"


def optimal_guesses(card: int, remaining: Sequence[int]) -> tuple[str, ...]:
    """Every guess with the highest chance of a WIN on the next card (card counting): HIGHER
    when more remaining cards are strictly above the current rank than below, LOWER when fewer,
    both when as many (then either has the same expected reward; `counting_choice` says
    HIGHER)."""
    higher = sum(remaining[card + 1 :])
    lower = sum(remaining[:card])
    if higher == lower:
        return ("HIGHER", "LOWER")
    return ("HIGHER",) if higher > lower else ("LOWER",)


class HigherLowerTask(Task):
    """HigherLower with `num_decks` 52-card decks; the policy sees only the current rank."""

    metric = "accuracy"
    family = "cards"

    def __init__(
        self,
        name: str,
        num_decks: int = 1,
        max_steps: int | None = None,
        actions: Sequence[str] = ("HIGHER", "LOWER"),
    ):
        decisions = check_decks(num_decks) - 1
        check_steps("HigherLower", num_decks, max_steps, decisions, "decisions")
        self.action_names = check_actions(actions, list(ACTION_INDEX))
        self.name = name
        self.num_decks = int(num_decks)
        self.max_steps = decisions
        self.max_reward = decisions / (DECK_SIZE * self.num_decks)  # every guess right

    def make_env(self) -> gym.Env:
        """The policy-facing env: one-hot rank in, HIGHER/LOWER (in config order) out."""
        return ActionSubset(
            OneHot(HigherLower(self.num_decks), N_RANKS), self.action_names, ACTION_INDEX
        )

    def episode(self, seed: int) -> HigherLowerEpisode:
        return HigherLowerEpisode(self, seed)

    def __repr__(self) -> str:
        return f"HigherLowerTask({self.name!r}, num_decks={self.num_decks})"


class HigherLowerEpisode(DeckEpisode):
    """One seeded HigherLower game; the CardView reads the deck itself, not our bookkeeping."""

    def __init__(self, task: HigherLowerTask, seed: int):
        super().__init__(task, seed)
        self.game: HigherLower = self.env.unwrapped

    # -- game state, read from POPGym's deck -------------------------------------------------------

    def card(self) -> int:
        return int(self.game.deck.show("player", ["ranks_idx"]).item())

    def remaining(self) -> list[int]:
        """Cards left in the deck per rank (the deck deals from the end of `idx[:deck_len]`)."""
        deck = self.game.deck
        left = deck.ranks_idx[deck.idx[: deck.deck_len]]
        return np.bincount(left, minlength=N_RANKS).astype(int).tolist()

    def seen(self) -> list[int]:
        """Ranks dealt so far, in order, current card last."""
        deck = self.game.deck
        return deck.ranks_idx[deck.idx[deck.deck_len :][::-1]].astype(int).tolist()

    # -- stepping and memory -----------------------------------------------------------------------

    def step(self, action: int) -> tuple[float, bool]:
        a = self.checked_action(action)
        card, name = self.card(), self.action_names[a]
        self.obs, reward, terminated, truncated, _ = self.env.step(a)
        next_card = self.card()
        outcome = judge(card, name, next_card)
        decision = {"card": card, "action": name, "next_card": next_card, "outcome": outcome}
        about = f"{card}->{name}->{next_card}"
        return self.settle(
            name, float(reward), bool(terminated or truncated), outcome, decision, about
        )

    # -- views, expert, outcome ----------------------------------------------------------------------

    def view(self) -> CardView:
        card, remaining = self.card(), self.remaining()
        return CardView(
            card=card,
            card_name=rank_name(card),
            seen=self.seen(),
            remaining=remaining,
            higher=sum(remaining[card + 1 :]),
            lower=sum(remaining[:card]),
            equal=remaining[card],
            decision=self.steps,
            n_decisions=self.task.max_steps,
        )

    def expert_action(self) -> int:
        return self.action_names.index(counting_choice(self.card(), self.remaining()))

    def optimal_actions(self) -> set[int]:
        """The action indices of every optimal guess now (`optimal_guesses`)."""
        guesses = optimal_guesses(self.card(), self.remaining())
        return {self.action_names.index(g) for g in guesses}

    def step_fields(self) -> dict[str, Any]:
        """The current card's rank (0 = ace ... 12 = king) and the 0-based decision index."""
        return {"rank": int(self.card()), "decision": int(self.steps)}

    def outcome(self) -> dict[str, float]:
        """Accuracy = WINs / decisions made (a push is not a correct guess)."""
        decisions = self.memory.decisions
        wins = sum(d["outcome"] == "WIN" for d in decisions)
        return {"accuracy": wins / len(decisions) if decisions else 0.0}
