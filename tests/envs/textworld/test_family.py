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
from benchmark.envs.textworld.games import SKIPPED
from benchmark.envs.textworld.task import COMMAND_DIM, TEXT_DIM, clean
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
    assert "INVENTORY: " in texts["basic"]  # the `inventory` command is not offered
    assert "ROOM (" in texts["enriched"] and "ROOM (" not in texts["basic"]
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
        ("treasure", {"level": 31}, "generation.level=31 is invalid .*: allowed 1..30"),
        ("quest", {"nb_rooms": "3"}, "generation.nb_rooms='3' is invalid .* allowed a int"),
        ("cooking", {"go": 2}, "generation.go=2 is invalid: allowed 1, 6, 9 or 12"),
        ("quest", {"nb_rooms": 0}, "generation.nb_rooms=0 is invalid .* allowed 1..32"),
        ("quest", {"nb_objects": -3}, "generation.nb_objects=-3 is invalid .* allowed 0..64"),
        ("cooking", {"recipe": 2, "take": 3}, "generation.take=3 is invalid with recipe=2"),
    ],
)
def test_bad_generation_input_fails_before_any_game_is_made(game, generation, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        TextWorldTask("t", game, generation, games_dir=str(tmp_path))
    assert not any(tmp_path.iterdir())


# -- generation: where games lie, what is checked, what is refused ------------------------------


def test_games_are_made_under_the_jobs_results_root_not_the_working_directory(
    tmp_path, monkeypatch
):
    from tests.conftest import compose_cfg

    monkeypatch.setattr(games, "games_root", games.games_root.unpatched)
    root, cwd = tmp_path / "results", tmp_path / "read-only"
    cwd.mkdir()
    cfg = compose_cfg(root, "env=tw_treasure")
    cwd.chmod(0o555)  # nothing may be written where the job is launched
    monkeypatch.chdir(cwd)
    try:
        path = make_task(cfg.env).game_file(100)
    finally:
        cwd.chmod(0o755)
    assert path.is_relative_to(root / "textworld") and path.is_file()
    assert not any(cwd.iterdir())


def _tiny_game(tmp_path, walkthrough: list[str] | None = None):
    """A one-room game with two apples (real TextWorld, GameMaker): its quest is to take the red
    one; `walkthrough` replaces the walkthrough the game ships with."""
    import textworld

    maker = textworld.GameMaker()
    room = maker.new_room("kitchen")
    maker.set_player(room)
    room.add(maker.new(type="o", name="red apple"), maker.new(type="o", name="green apple"))
    maker.set_quest_from_commands(["take red apple"])
    path = maker.compile(str(tmp_path / "g.z8"))
    if walkthrough is not None:
        data = json.loads((tmp_path / "g.json").read_text())
        data["metadata"]["walkthrough"] = walkthrough
        (tmp_path / "g.json").write_text(json.dumps(data))
    return path


@pytest.mark.filterwarnings("ignore:Game .* is not fully supported")
def test_the_generation_check_finds_disambiguation_questions_and_walkthroughs_that_lose(tmp_path):
    for name, walkthrough, problem in (
        ("good", None, None),
        ("ambiguous", ["take apple"], "'take apple' is answered by a disambiguation question"),
        ("losing", ["take green apple"], "does not win"),
    ):
        (tmp_path / name).mkdir()
        found, meta = games.check_game(_tiny_game(tmp_path / name, walkthrough))
        if problem is None:
            # 'take red apple', 'take green apple' (examine/look/inventory are left out)
            assert found is None and meta == {"walkthrough_steps": 1, "max_commands": 2}
        else:
            assert problem in found and meta == {}


def test_a_seed_textworld_cannot_make_is_made_from_the_next_derived_seed(tmp_path):
    """Treasure level 10's seed 8 has no quest TextWorld can place: the game of the next derived
    generator seed is published, the same one in any cache (deterministic)."""
    params = games.check_parameters("treasure", {"level": 10})
    first = games.game_meta(games.game_file(tmp_path / "a", "treasure", params, 8))
    again = games.game_meta(games.game_file(tmp_path / "b", "treasure", params, 8))
    assert first["attempt"] == 1 and first["generator_seed"] == games.generator_seed(8, 1) != 8
    assert {k: v for k, v in again.items() if k != "seconds"} == {
        k: v for k, v in first.items() if k != "seconds"
    }
    assert (
        len({games.generator_seed(8, k) for k in range(games.MAX_ATTEMPTS)}) == games.MAX_ATTEMPTS
    )


def test_generation_gives_up_after_its_attempts_with_every_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(games, "MAX_ATTEMPTS", 2)
    monkeypatch.setattr(games, "check_game", lambda path: ("its walkthrough does not win", {}))
    params = games.check_parameters("treasure", {"level": 1})
    with pytest.raises(
        RuntimeError,
        match="no playable game in 2 generator seeds: generator seed 100: its walkthrough does not win; generator seed",
    ):
        games.game_file(tmp_path, "treasure", params, 100)
    assert not list(tmp_path.rglob(games.GAME_FILE))  # nothing published


def test_a_game_with_more_commands_than_the_action_space_is_refused_when_made(tmp_path):
    task = TextWorldTask("t", "treasure", {"level": 1}, max_commands=1, games_dir=str(tmp_path))
    with pytest.raises(
        ValueError,
        match=r"offers \d+ commands on its walkthrough, more than "
        r"max_commands=1: allowed max_commands >= \d+",
    ):
        task.game_file(100)


# -- Agent-BRACE's released games under protocol=paper ------------------------------------------

RELEASED_EVAL = {  # generate_textworld_*_tasks.sh's validation and test mixtures, in their order
    "tw_quest": ["6:6:8", "6:8:10", "8:8:12", "8:10:13", "8:12:13"],
    "tw_treasure": [14, 16, 18, 20, 22, 25, 28, 30],
    "tw_cooking": ["4:4:9:octd", "5:5:9:octd", "4:4:12:oct", "4:4:12:octd", "5:5:12:octd"],
}


def released_task(env: str, root):
    from tests.conftest import compose_cfg

    cfg = compose_cfg(root, "+experiment=brace_tw", f"env={env}", "protocol=paper")
    task = make_task(cfg.env)
    task.games_dir = root
    return task, cfg


def _spec(params: dict) -> object:
    """A game's parameters in the released scripts' notation."""
    if "level" in params:
        return params["level"]
    if "nb_rooms" in params:
        return f"{params['nb_rooms']}:{params['nb_objects']}:{params['quest_length']}"
    flags = "".join(f for f, k in (("o", "open"), ("c", "cook"), ("t", "cut"), ("d", "drop"))
                    if params[k])  # fmt: skip
    return f"{params['recipe']}:{params['take']}:{params['go']}:{flags}"


@pytest.mark.parametrize("env", ENVS)
def test_paper_protocol_cycles_the_released_mixtures_per_game(env, tmp_path):
    """The k-th test game takes the released evaluation mixture's entry k mod n, the k-th
    validation game too, and the training pool the released training mixture; 1,000 training
    games, 100 steps (no game made: the parameters each seed gets)."""
    task, cfg = released_task(env, tmp_path)
    released = RELEASED_EVAL[env]
    assert [_spec(task.game_params(100 + k)) for k in range(2 * len(released))] == released * 2
    assert [_spec(task.game_params(k)) for k in range(len(released))] == released
    assert task.train_games == 1000 and task.max_steps == 100 == cfg.env.task.max_steps
    train = {
        "tw_quest": ["2:3:3", "2:4:4", "4:4:4", "4:6:6"],
        "tw_treasure": [1, 2, 4, 6, 8],
        "tw_cooking": ["3:3:9:oc", "4:4:6:oct", "4:4:6:octd", "4:4:9:oct"],
    }[env]
    assert [_spec(task.game_params(TRAIN_SEED_MIN + k)) for k in range(len(train))] == train
    from benchmark.seeds import Splits

    summary = task.content_summary(Splits())  # the plan's line
    assert (
        f"games: {env} 1,000 training (mixture of {len(train)}), 100 validation (mixture of "
        in summary
    )
    assert "100 steps per episode; 0 of 1,200 made" in summary
    from tests.conftest import compose_cfg  # the suite protocol keeps the toy size

    toy = make_task(
        compose_cfg(tmp_path, "+experiment=brace_tw", f"env={env}", "protocol=suite").env
    )
    assert toy.mixture == make_task(env).mixture and toy.train_games == 50 and toy.max_steps == 30


def _rooms(game_json: dict) -> int:
    return len({a["name"] for fact in game_json["world"] for a in fact["arguments"]
                if a["type"] == "r"})  # fmt: skip


@pytest.mark.slow  # six hard games (~1 min)
@pytest.mark.parametrize("env", ENVS)
def test_generated_evaluation_games_have_the_released_difficulty(env, tmp_path):
    """Test seeds 100 and 101 (the mixtures' first two entries) made for real: their rooms,
    quest length (Quest, Treasure) or recipe skills (Cooking) are the released ones, and their
    walkthrough states fit the protocol's command slots."""
    task, _ = released_task(env, tmp_path)
    for seed in (100, 101):
        path = task.game_file(seed)
        game = json.loads(path.with_suffix(".json").read_text())
        params, meta = task.game_params(seed), games.game_meta(path)
        assert meta["params"] == params and meta["max_commands"] <= task.max_commands
        walkthrough = game["metadata"]["walkthrough"]
        if env == "tw_quest":
            assert _rooms(game) == params["nb_rooms"]
            assert len(walkthrough) == params["quest_length"], walkthrough
        elif env == "tw_treasure":  # TextWorld's levels 11-20: 10 rooms, doors and containers
            level = params["level"]
            assert game["metadata"]["mode"] == "medium" and _rooms(game) == 10
            assert game["metadata"]["quest_length"] == round(2 + (level - 11) * 8 / 9)
        else:
            skills = "+".join(f"{k}{params[k] if not isinstance(params[k], bool) else ''}"
                              for k in ("recipe", "take", "cook", "cut", "open", "drop", "go")
                              if params[k])  # fmt: skip
            assert f"-{skills}-" in game["metadata"]["uuid"], game["metadata"]["uuid"]
            assert _rooms(game) == params["go"]


def test_a_game_too_large_for_the_search_falls_back_to_textworlds_own_command(
    games_root, monkeypatch, caplog
):
    """planner.SearchTooLarge (seen on Agent-BRACE's Cooking games) never fails an episode: the
    expert set becomes TextWorld's next winning command for the rest of it, said once."""
    from benchmark.envs.textworld import planner

    monkeypatch.setattr(planner, "MAX_STATES", 0)
    ep = task_of("tw_treasure", games_root).episode(100)
    first = ep.walkthrough()[0]
    with caplog.at_level("WARNING"):
        assert ep.optimal_actions() == {ep.action_names.index(first)}
        assert ep.expert_action() == ep.action_names.index(first)
    assert sum("TextWorld's next winning command" in r.message for r in caplog.records) == 1
