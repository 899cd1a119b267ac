"""What the POPGym card families (HigherLower `cards`, `repeatprevious`) share: the one-hot
observation their MLP policies read, the checks of a deck-sized config, the booking of one
answer (`DeckEpisode.settle`) and the belief claim of the deal's progress with its rule."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from popgym.core.deck import DECK_SIZE

from benchmark.envs.base import Episode

if TYPE_CHECKING:
    from benchmark.envs.truth import Rule


class OneHot(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """POPGym's Discrete(n) observation (a card's rank or suit) -> a one-hot float32 vector for
    the MLP policy."""

    def __init__(self, env: gym.Env, n: int):
        gym.utils.RecordConstructorArgs.__init__(self, n=int(n))
        gym.ObservationWrapper.__init__(self, env)
        self.n = int(n)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.n,), np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        out = np.zeros(self.n, dtype=np.float32)
        out[int(observation)] = 1.0
        return out


def check_decks(num_decks: int) -> int:
    """The number of cards in `num_decks` 52-card decks; raises unless it is at least one deck."""
    if int(num_decks) < 1:
        raise ValueError(f"num_decks must be >= 1, got {num_decks!r}")
    return DECK_SIZE * int(num_decks)


def check_steps(game: str, num_decks: int, max_steps: int | None, steps: int, unit: str) -> None:
    """Raises where a config's `max_steps` disagrees with the `steps` its decks always take."""
    if max_steps is not None and int(max_steps) != steps:
        raise ValueError(
            f"max_steps={max_steps} disagrees with num_decks={num_decks}: "
            f"{game} always plays {steps} {unit}"
        )


def check_actions(actions: Sequence[str], allowed: Sequence[str]) -> tuple[str, ...]:
    """`actions` as a tuple; raises unless it names each of `allowed` once, in any order."""
    if sorted(actions) != sorted(allowed):
        raise ValueError(f"actions must be a permutation of {list(allowed)}, got {actions!r}")
    return tuple(actions)


class DeckEpisode(Episode):
    """An episode of a POPGym card game: one answer per card, which POPGym pays with a positive
    reward (a win), a negative one (a loss) or nothing."""

    WIN_LOSS: tuple[str, str] = ("WIN", "LOSS")  # the family's names of a paid and a charged answer

    def settle(
        self,
        name: str,
        reward: float,
        done: bool,
        outcome: str,
        decision: dict[str, Any],
        about: str,
    ) -> tuple[float, bool]:
        """Books the answer `name` that POPGym paid `reward` for: the counters, the memory's
        actions, rewards, decisions and streaks (a streak is consecutive wins or losses; any
        other outcome ends both). Raises where the reward's sign disagrees with `outcome`, which
        guards our reading of POPGym's conventions."""
        win, loss = self.WIN_LOSS
        expected = 1 if outcome == win else -1 if outcome == loss else 0
        if np.sign(reward) != expected:
            raise RuntimeError(f"POPGym paid {reward} for {outcome} ({about})")
        self.steps += 1
        self.total_reward += reward
        self.done = done
        mem = self.memory
        mem.actions.append(name)
        mem.rewards.append(reward)
        mem.decisions.append(decision)
        mem.win_streak = mem.win_streak + 1 if outcome == win else 0
        mem.loss_streak = mem.loss_streak + 1 if outcome == loss else 0
        return reward, self.done


DEAL_RE = re.compile(r"^(\d+) cards have been dealt; (\d+) remain")


def deal_claim(dealt: int, remain: int) -> str:
    """The belief claim of the deal's progress (observed, so confirmed): one wording for both
    card families, which `deal_rule` reads back."""
    return f"- {dealt} cards have been dealt; {remain} remain [confirmed]"


def deal_rule(subject: str, progress: Callable[[Any], tuple[int, int]]) -> Rule:
    """The claim rule of `deal_claim`: `progress(truth)` is (cards dealt, cards left) in the true
    state."""
    from benchmark.vocabulary import fact_verdict

    def verdict(m: re.Match[str], truth: Any, label: str) -> str | None:
        return fact_verdict((int(m[1]), int(m[2])) == progress(truth), label)

    return (subject, DEAL_RE, verdict)
