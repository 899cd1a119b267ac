"""The TextWorld family (benchmark/envs/textworld/): real games generated offline by textworld's
own generators, cached per seed; the fixed, masked command space; the walkthrough expert; the
prompts at every level; the true facts; bad input refused before any game is made."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from benchmark.consultants.dice import DiceConsultant
from benchmark.consultants.oracle import OracleConsultant
from benchmark.envs import family_of, make_task
from benchmark.envs.textworld import TextWorldTask, games, planner
from benchmark.envs.textworld.task import COMMAND_DIM, SKIPPED, TEXT_DIM, clean
from benchmark.prompts.ask import AskPrompt
from benchmark.prompts.base import consult_all
from benchmark.seeds import TRAIN_SEED_MIN
from benchmark.vocabulary import LEVELS

ENVS = ("tw_treasure", "tw_quest", "tw_cooking")


@pytest.fixture(scope="session")
def games_root(textworld_games):
    """The run's game cache (tests/conftest.py), shared with the other test files."""
    return textworld_games


def task_of(env: str, root) -> TextWorldTask:
    task = make_task(env)
    task.games_dir = root
    return task


def solve(ep) -> None:
    while not ep.done:
        assert ep.expert_action() in ep.optimal_actions()
        ep.step(ep.expert_action())


@pytest.mark.parametrize("env", ENVS)
def test_the_expert_solves_every_test_game_it_plays(env, games_root):
    task = task_of(env, games_root)
    assert family_of(task).name == "textworld"
    for seed in (100, 101):
        ep = task.episode(seed)
        walkthrough = ep.walkthrough()
        solve(ep)
        assert ep.outcome() == {"success": 1.0}, (env, seed, walkthrough)
        assert ep.total_reward == pytest.approx(1.0)  # the whole score, normalised
        assert 0 < ep.steps <= len(walkthrough)  # replanning never takes a detour


def replay(task, seed: int, commands: list[str]):
    """A fresh episode of `seed` after `commands` (by name)."""
    ep = task.episode(seed)
    for command in commands:
        ep.step(ep.action_names.index(command))
    return ep


@pytest.mark.parametrize("env", ENVS)
def test_at_the_start_the_walkthrough_starts_a_shortest_plan(env, games_root):
    """The planner searches TextWorld's world model; from the start state its plans are as long
    as the game's own walkthrough (less the commands that change nothing) and start with it."""
    task = task_of(env, games_root)
    for seed in (100, 101, 0):
        ep = task.episode(seed)
        walkthrough = [c for c in ep.walkthrough() if not SKIPPED.match(c)]
        plans = ep.shortest_plans()
        assert plans.length == len(walkthrough), (env, seed, walkthrough, plans)
        assert walkthrough[0] in plans.commands
        assert ep.action_names.index(walkthrough[0]) in ep.optimal_actions()


def test_after_a_detour_the_optimal_set_is_the_replanned_shortest_start(games_root):
    """Validation game 4 of TW-Treasure has a loop of rooms: from the start both `go west` (the
    walkthrough's) and `go north` start a 4-command win. After a detour (west, then back east:
    a step away) the set is replanned from the state reached, both starts again; after then
    going north, TextWorld's own plan walks back south (5 commands) while going west wins in 3.
    The set holds exactly the commands after which a shortest plan is one shorter (checked by
    replaying every command), and the oracle answers one of them."""
    task = task_of("tw_treasure", games_root)
    start = task.episode(4)
    assert start.walkthrough()[0] == "go west"
    assert start.shortest_plans() == planner.ShortestPlans(frozenset({"go north", "go west"}), 4)
    west = replay(task, 4, ["go west"])
    assert west.shortest_plans().length == 3
    assert west.action_names.index("go east") not in west.optimal_actions()  # the detour
    back = replay(task, 4, ["go west", "go east"])
    assert back.shortest_plans() == planner.ShortestPlans(frozenset({"go north", "go west"}), 4)
    assert {back.action_names[i] for i in back.optimal_actions()} == {"go north", "go west"}
    path = ["go west", "go east", "go north"]
    ep = replay(task, 4, path)
    walk_back = list(ep.env.state["policy_commands"])
    assert walk_back[0] == "go south" and len(walk_back) == 5
    plans = ep.shortest_plans()
    assert plans == planner.ShortestPlans(frozenset({"go west"}), 3)
    optimal = ep.optimal_actions()
    assert {ep.action_names[i] for i in optimal} == {"go west"}
    for i, command in enumerate(ep.action_names):
        after = replay(task, 4, [*path, command])
        length = 0 if after.won else after.shortest_plans().length
        assert (length == plans.length - 1) == (i in optimal), (command, length)
    prompt = AskPrompt("basic", "basic")
    oracle = consult_all([prompt.session(ep, True).consult(None)], OracleConsultant().answer)
    assert oracle[0].action in optimal
    solve(ep)  # following the set wins in exactly the planned number of steps
    assert ep.won and ep.steps == len(path) + plans.length


def test_games_are_made_once_per_seed_and_cached_by_their_parameters(games_root, tmp_path):
    task = task_of("tw_treasure", tmp_path)  # an empty cache: the games are made here
    path = task.game_file(100)
    meta = json.loads((path.parent / games.META_FILE).read_text())
    # a test game at the harder evaluation level, a training game at the training level
    assert meta["seed"] == 100 and meta["params"] == {"level": 8} and meta["bytes"] > 0
    assert meta["seconds"] > 0 and path.parent.parent.parent == tmp_path
    train = task.game_file(TRAIN_SEED_MIN)
    assert json.loads((train.parent / games.META_FILE).read_text())["params"] == {"level": 5}
    mtime = path.stat().st_mtime_ns
    assert task.game_file(100) == path and path.stat().st_mtime_ns == mtime  # not made again
    other = games.cache_key("treasure", {"level": 6})
    assert path.parent.parent.name != other and path.parent.parent.name.startswith("treasure-")
    # the same seed gives the same game, made again in another cache (the run's, shared by the
    # other tests); a different seed another one
    shared = task_of("tw_treasure", games_root)
    assert shared.game_file(100) != path
    assert task.episode(100).walkthrough() == shared.episode(100).walkthrough()
    assert task.episode(100).walkthrough() != shared.episode(101).walkthrough()


def test_training_resets_fold_onto_the_training_pool_and_never_reach_evaluation_seeds():
    task = TextWorldTask("t", "treasure", train_games=3)
    assert [task.game_seed(s) for s in (0, 99, 100, 199)] == [0, 99, 100, 199]
    pool = {task.game_seed(s) for s in range(TRAIN_SEED_MIN, TRAIN_SEED_MIN + 50)}
    assert pool == {TRAIN_SEED_MIN, TRAIN_SEED_MIN + 1, TRAIN_SEED_MIN + 2}
    assert [games.split_of(s) for s in (0, 100, TRAIN_SEED_MIN)] == ["valid", "test", "train"]


def test_the_observation_ends_with_the_mask_of_the_valid_commands(games_root):
    task = task_of("tw_treasure", games_root)
    ep = task.episode(101)
    k = task.max_commands
    assert ep.obs.shape == (TEXT_DIM + k * COMMAND_DIM + k,)
    mask = ep.obs[-k:]
    n = len(ep.action_names)
    assert 1 <= n < k and mask[:n].all() and not mask[n:].any()
    assert all(
        not c.startswith("examine") and c not in ("look", "inventory") for c in ep.action_names
    )
    with pytest.raises(ValueError, match=f"action {n} out of range: allowed 0..{n - 1}"):
        ep.step(n)
    env = task.make_env()
    obs, _ = env.reset(seed=101)
    assert np.array_equal(obs, ep.obs) and env.action_space.n == k
    obs, reward, terminated, truncated, _ = env.step(n)  # a masked slot: a wasted turn
    assert np.array_equal(obs, ep.obs) and (reward, terminated, truncated) == (0.0, False, False)
    with pytest.raises(ValueError, match=f"action {k} out of range: allowed 0..{k - 1}"):
        env.step(k)
    # a running game pickles (PPO's resumable training state): the copy replays its commands
    env.step(0)
    clone = pickle.loads(pickle.dumps(env))
    assert clone.played == env.played == [ep.action_names[0]]
    assert clone.commands == env.commands and clone.state.feedback == env.state.feedback
    assert np.array_equal(clone.step(0)[0], env.step(0)[0])


def test_prompts_hold_the_text_and_the_memory_cumulatively_over_the_levels(games_root):
    task = task_of("tw_treasure", games_root)
    ep = task.episode(100)
    first = ep.action_names[ep.expert_action()]
    ep.step(ep.expert_action())  # a move: the memory has a command and an exit walked
    texts = {}
    for level in LEVELS:
        prompt = AskPrompt(level, level)
        prompt.check(task)
        system, user = (m["content"] for m in prompt.session(ep, False).messages(0))
        assert all(f"- {c}" in system for c in ep.action_names)
        texts[level] = user
        assert "OBSERVATION: " in user and "Autopilot: " + ep.action_names[0] in user
        assert "$$" not in user and "OBJECTIVE: " in user
    assert "INVENTORY" in texts["enriched"] and "INVENTORY" not in texts["basic"]
    assert f"RECENT COMMANDS (oldest first): {first} ->" in texts["stateful_min"]
    assert "RECENT" not in texts["enriched"]
    assert "KNOWN MAP" in texts["stateful"] and "KNOWN MAP" not in texts["stateful_min"]
    room0 = ep.memory.rooms[0]
    assert f"{room0} -{first}-> {ep.view().room}" in texts["stateful"]


def test_the_oracle_and_the_dice_answer_with_valid_commands(games_root):
    task = task_of("tw_treasure", games_root)
    ep = next(e for e in map(task.episode, range(102, 110)) if len(e.action_names) > 1)
    prompt = AskPrompt("stateful", "stateful", rationale=True)
    oracle = consult_all([prompt.session(ep, True).consult(None)], OracleConsultant().answer)
    assert oracle[0].action == ep.expert_action()
    dice = [
        consult_all([prompt.session(ep, False).consult(None)], DiceConsultant(s).answer)[0]
        for s in range(8)
    ]
    assert {d.action for d in dice} <= set(range(len(ep.action_names)))
    assert len({d.action for d in dice}) > 1


def test_the_true_state_is_textworlds_facts_in_the_step_records(games_root):
    task = task_of("tw_treasure", games_root)
    ep = task.episode(100)
    fields = ep.step_fields()
    assert f"at(P, {fields['room']})" in fields["facts"]
    assert fields["commands"] == list(ep.action_names) and fields["score"] == 0
    solve(ep)
    assert ep.step_fields()["score"] == 1


def test_clean_drops_the_banner_and_the_prompt_line():
    text = "  $$  \\$$ |  \\\n\nWelcome to TextWorld!\n-= Attic =-\n>  -= Attic =-0/1"
    assert clean(text) == "Welcome to TextWorld!\n-= Attic =-"


@pytest.mark.parametrize(
    ("game", "generation", "match"),
    [
        (
            "zork",
            None,
            "unknown TextWorld task 'zork'; allowed: \\['quest', 'treasure', 'cooking'\\]",
        ),
        ("treasure", {"nb_rooms": 3}, "'treasure' takes no generation parameter \\['nb_rooms'\\]"),
        ("cooking", {"split": "test"}, "takes no generation parameter \\['split'\\]"),
        ("treasure", {"level": 31}, "generation.level=31 is invalid: allowed 1..30"),
        ("quest", {"nb_rooms": "3"}, "generation.nb_rooms='3' is invalid .* allowed a int"),
        ("cooking", {"go": 2}, "generation.go=2 is invalid: allowed 1, 6, 9 or 12"),
    ],
)
def test_bad_generation_input_fails_before_any_game_is_made(game, generation, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        TextWorldTask("t", game, generation, games_dir=str(tmp_path))
    assert not any(tmp_path.iterdir())
