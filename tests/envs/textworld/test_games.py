"""TextWorld generation bounds (benchmark/envs/textworld/games.py RANGES): the largest accepted
sizes make games the suite's oracle wins within the step limit; one past them is refused in one
line before any game is made; a quest longer than the step limit is said in one line."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark.envs.textworld import TextWorldTask, games

# the largest accepted Cooking game: every skill, the most ingredients, rooms and takes
COOKING_MAX = {"recipe": 5, "take": 5, "go": 12, "open": True, "cook": True, "cut": True,
               "drop": True}  # fmt: skip
QUEST_MAX = {key: high for key, (_, high) in games.RANGES["quest"].items()}


def _play(task: TextWorldTask, seed: int):
    """The oracle's episode on the game of `seed`, played to its end."""
    ep = task.episode(seed)
    while not ep.done:
        ep.step(ep.expert_action())
    return ep


@pytest.mark.slow  # the two largest games, made and played (~1-2 min)
@pytest.mark.parametrize(
    ("game", "generation", "max_steps"),
    [("quest", QUEST_MAX, QUEST_MAX["quest_length"]), ("cooking", COOKING_MAX, 100)],
)
def test_the_largest_accepted_games_are_made_and_won_by_the_oracle(
    game, generation, max_steps, tmp_path
):
    task = TextWorldTask("t", game, generation, max_steps=max_steps, max_commands=128,
                         games_dir=str(tmp_path))  # fmt: skip
    ep = _play(task, 100)
    assert ep.won and ep.steps <= max_steps


def test_the_smallest_cooking_game_is_won_by_the_oracle(tmp_path):
    task = TextWorldTask("t", "cooking", {"recipe": 1, "take": 0, "go": 1}, max_steps=30,
                         max_commands=32, games_dir=str(tmp_path))  # fmt: skip
    ep = _play(task, 100)
    assert ep.won and ep.steps <= 30


@pytest.mark.parametrize(
    ("game", "generation", "allowed"),
    [
        *[
            ("quest", {key: high + 1}, f"{low}..{high}")
            for key, (low, high) in games.RANGES["quest"].items()
        ],  # fmt: skip
        ("cooking", {"recipe": 6, "take": 1}, "1..5"),
        ("cooking", {"go": 13}, "1, 6, 9 or 12"),
        ("treasure", {"level": 31}, "1..30"),
    ],
)
def test_one_past_the_accepted_sizes_is_refused_in_one_line_before_any_game(
    game, generation, allowed, tmp_path
):
    key, value = next(iter(generation.items()))  # the value out of range
    with pytest.raises(ValueError) as err:
        TextWorldTask("t", game, generation, max_steps=100, games_dir=str(tmp_path))
    message = str(err.value)
    assert f"generation.{key}={value}" in message and allowed in message
    assert "\n" not in message
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("game", "generation", "steps"),
    [
        ("quest", {"nb_rooms": 8, "nb_objects": 8, "quest_length": 13}, 13),
        ("treasure", {"level": 30}, 20),
    ],  # fmt: skip
)
def test_a_quest_longer_than_the_step_limit_is_said_in_one_line_before_any_game(
    game, generation, steps, tmp_path, caplog
):
    """Said, not refused: Agent-BRACE's RL rollouts cap episodes below the quest on purpose."""
    with caplog.at_level("WARNING"):
        TextWorldTask("t", game, generation, max_steps=steps - 1, games_dir=str(tmp_path))
    (message,) = [r.getMessage() for r in caplog.records if "max_steps" in r.getMessage()]
    assert f"max_steps={steps - 1} is shorter" in message and f"({steps} commands)" in message
    assert f"allowed max_steps >= {steps}" in message
    assert "\n" not in message and not any(tmp_path.iterdir())
    caplog.clear()
    with caplog.at_level("WARNING"):
        TextWorldTask("t", game, generation, max_steps=steps, games_dir=str(tmp_path))  # fits
    assert not caplog.records


def test_the_quest_steps_of_every_treasure_level_are_textworlds():
    """TextWorld's own table (tw_treasure_hunter: np.round of a linspace per ten levels)."""
    for level in range(1, 31):
        low, high = {0: (1, 5), 1: (2, 10), 2: (3, 20)}[(level - 1) // 10]
        expected = int(np.round(np.linspace(low, high, 10))[(level - 1) % 10])
        assert games.quest_steps("treasure", {"level": level}) == expected


def test_without_the_search_the_oracle_wins_cooking_on_textworlds_commands(
    textworld_games, monkeypatch
):
    """A Cooking game too large for the search (planner.SearchTooLarge, forced here) is played
    on TextWorld's own commands, `inventory` and `examine cookbook` passed over (no slot holds
    them), or the walkthrough's where TextWorld gives none: the oracle wins."""
    from benchmark.envs import make_task
    from benchmark.envs.textworld import planner

    monkeypatch.setattr(planner, "MAX_STATES", 0)
    task = make_task("tw_cooking")
    task.games_dir = textworld_games
    ep = _play(task, 100)
    assert ep.won and ep.steps <= task.max_steps
