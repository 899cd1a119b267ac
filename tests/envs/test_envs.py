"""Env configs, the policy-facing gymnasium envs, and the views the prompts read."""

from __future__ import annotations

import pickle
from collections import Counter

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from minigrid.core.constants import IDX_TO_OBJECT, STATE_TO_IDX
from omegaconf import OmegaConf

from benchmark.envs import ENV_CONF_DIR, available_envs, get_family, load_env_cfg, make_task
from benchmark.envs.base import CardView, NavView
from benchmark.envs.higherlower import HigherLowerTask
from benchmark.envs.memory import MemoryTask
from benchmark.envs.minigrid_nav import ACTION_INDEX, MiniGridTask, cell_char

NAV = ["fourrooms", "doorkey8", "empty5x5_random", "empty16x16", "simplecrossing9"]
MEMORY = ["memory_s11"]
TEXTWORLD = ["tw_cooking", "tw_quest", "tw_treasure"]  # tests/envs/textworld/test_family.py
EXPECTED = {
    "fourrooms": ("MiniGrid-FourRooms-v0", 500, 3, [256, 256], [0.1, 0.3, 0.5, 0.7]),
    "doorkey8": ("MiniGrid-DoorKey-8x8-v0", 640, 7, [128, 128], [0.3, 0.5, 0.7, 0.9]),
    "empty5x5_random": ("MiniGrid-Empty-Random-5x5-v0", None, 4, [128, 128], [0.3, 0.5, 0.7, 0.9]),
    "empty16x16": ("MiniGrid-Empty-16x16-v0", None, 4, [128, 128], [0.3, 0.5, 0.7, 0.9]),
    "simplecrossing9": (
        "MiniGrid-SimpleCrossingS9N1-v0",
        None,
        4,
        [128, 128],
        [0.3, 0.5, 0.7, 0.9],
    ),
}
# feedback paper: episodes cut at 100 steps, reward on MiniGrid's default max_steps
FEEDBACK = {"empty5x5_random": 100, "empty16x16": 1024, "simplecrossing9": 324}


def test_env_configs_follow_the_schema() -> None:
    # the papers' envs and the worked examples; a family added later brings its own tests
    assert {*NAV, "higherlower", *MEMORY, *TEXTWORLD} <= set(available_envs())
    for name in available_envs():
        cfg = OmegaConf.to_container(load_env_cfg(name))
        assert {"name", "family", "metric", "net_arch", "thresholds", "task"} <= set(cfg)
        assert cfg["name"] == cfg["task"]["name"] == name
        task = make_task(cfg if name != "fourrooms" else OmegaConf.create(cfg))
        assert task.metric == cfg["metric"] and task.name == name
        if name in TEXTWORLD:  # the actions are each step's commands, in a masked slot space
            assert (cfg["family"], cfg["metric"], cfg["kind"]) == (
                "textworld",
                "success",
                "text_game",
            )
            assert len(task.action_names) == cfg["task"]["max_commands"]
            continue
        assert tuple(cfg["task"]["actions"]) == task.action_names
        assert task.family == cfg["family"] and cfg["kind"] in get_family(cfg["family"]).kinds
        if name in NAV:
            gym_id, steps, n_actions, arch, thresholds = EXPECTED[name]
            assert cfg["family"] == "grid" and cfg["metric"] == "success"
            assert (cfg["task"]["gym_id"], cfg["task"]["max_steps"]) == (gym_id, steps)
            assert task.max_steps == FEEDBACK.get(name, steps)
            assert task.step_limit == (100 if name in FEEDBACK else None)
            assert task.episode_limit == (100 if name in FEEDBACK else steps)
            assert len(task.action_names) == n_actions
            assert (cfg["net_arch"], cfg["thresholds"]) == (arch, thresholds)
            assert isinstance(task, MiniGridTask)
        elif name in MEMORY:  # benchmark/envs/memory.py, tests/envs/test_memory.py
            assert (cfg["family"], cfg["metric"]) == ("memory", "success")
            assert isinstance(task, MemoryTask) and task.gym_id.startswith("MiniGrid-Memory")
        elif name == "higherlower":
            assert (cfg["family"], cfg["metric"]) == ("cards", "accuracy")
            assert cfg["thresholds"] == [0.1, 0.2, 0.3, 0.4] and cfg["net_arch"] == [128, 128]
            assert isinstance(task, HigherLowerTask) and task.action_names == ("HIGHER", "LOWER")
            assert task.max_steps == 51
    assert (ENV_CONF_DIR / "fourrooms.yaml").is_file()


def test_doorkey_is_told_by_what_the_env_is_not_by_its_actions() -> None:
    from benchmark.prompts.ask import AskPrompt
    from benchmark.prompts.feedback import FeedbackPrompt

    doorkey = [n for n in available_envs() if getattr(make_task(n), "doorkey", False)]
    assert doorkey == ["doorkey8"]
    # FourRooms with all seven actions (PICKUP included) is still no DoorKey
    rooms = MiniGridTask("x", "MiniGrid-FourRooms-v0", 500, "all")
    assert "PICKUP" in rooms.action_names and not rooms.doorkey
    assert MiniGridTask("x", "MiniGrid-DoorKey-5x5-v0", None, ["FORWARD"]).doorkey
    for task, is_doorkey in ((rooms, False), (make_task("doorkey8"), True)):
        ep = task.episode(100)
        assert ep.view().doorkey is is_doorkey
        system, user = (
            m["content"]
            for m in AskPrompt("s", "stateful").session(ep, with_expert=False).messages(0)
        )
        assert ("STATUS: HasKey=" in user) is is_doorkey
        assert ("k=key L=door(locked)" in user) is is_doorkey
        assert ("PICKUP: only when 'k' is directly ahead" in system) is is_doorkey
        assert ("facing 'k', no key in hand -> PICKUP" in user) is is_doorkey
        hwbp = FeedbackPrompt("hwbp").session(ep, with_expert=False).messages()[-1]["content"]
        assert "Pick Up: picks up the key" in hwbp  # the action is explained wherever it exists
        assert ("'L': Locked door" in hwbp) is is_doorkey


def test_bad_configs_name_the_problem() -> None:
    with pytest.raises(ValueError, match="TURN_LEFT"):
        MiniGridTask("x", "MiniGrid-FourRooms-v0", 500, ["TURN_LEFT", "JUMP"])
    with pytest.raises(ValueError, match="MiniGrid-FourRooms-v0"):
        MiniGridTask("x", "MiniGrid-FiveRooms-v0", 500, ["FORWARD"])
    with pytest.raises(ValueError, match="'CartPole-v1' is not a registered MiniGrid id"):
        MiniGridTask("x", "MiniGrid-DoorKey-8x8-v0", 640, ["FORWARD"], ["CartPole-v1"])
    with pytest.raises(ValueError, match="train_gym_ids is empty"):
        MiniGridTask("x", "MiniGrid-DoorKey-8x8-v0", 640, ["FORWARD"], [])
    with pytest.raises(ValueError, match="step_limit must be >= 1 or null"):
        MiniGridTask("x", "MiniGrid-FourRooms-v0", None, ["FORWARD"], step_limit=0)
    with pytest.raises(ValueError, match="list of action names or 'all'"):
        MiniGridTask("x", "MiniGrid-FourRooms-v0", None, "FORWARD")
    with pytest.raises(ValueError, match="51 decisions"):
        HigherLowerTask("x", num_decks=1, max_steps=52)
    with pytest.raises(ValueError, match="available"):
        make_task("nope")


@pytest.mark.filterwarnings("ignore:.*different from the unwrapped version")
@pytest.mark.parametrize("name", available_envs())
def test_training_env_is_a_valid_gymnasium_env(name: str) -> None:
    task = make_task(name)
    if name in TEXTWORLD:  # check_env's resets fold onto a pool of two training games (a game
        # takes seconds to make; the folding itself: tests/envs/textworld/test_family.py)
        task.train_games = 2
    env = task.training_env(seed=1)
    check_env(env, skip_render_check=True)
    val = task.validation_env()
    assert env.observation_space == val.observation_space
    assert env.action_space == val.action_space == gym.spaces.Discrete(len(task.action_names))
    assert isinstance(env.observation_space, gym.spaces.Box)
    assert env.observation_space.dtype == np.float32
    pickle.loads(pickle.dumps(task))


@pytest.mark.parametrize("name", ["fourrooms", "doorkey8", "higherlower"])
def test_episode_obs_equals_training_env_obs(name: str) -> None:
    task = make_task(name)
    mixture = getattr(task, "train_gym_ids", None)  # doorkey8 trains on smaller grids too
    env = task.training_env(seed=3, index=mixture.index(task.gym_id) if mixture else 0)
    obs, info = env.reset()
    ep = task.episode(info["reset_seed"])  # same layout, built the evaluation way
    np.testing.assert_array_equal(ep.obs, obs)
    rng = np.random.default_rng(0)
    for _ in range(40):
        a = int(rng.integers(env.action_space.n))
        obs, reward, terminated, truncated, _ = env.step(a)
        r, done = ep.step(a)
        np.testing.assert_array_equal(ep.obs, obs)
        assert r == reward and done == (terminated or truncated)
        if done:
            break


def test_a_training_mixture_gives_slots_their_grids_and_never_touches_evaluation() -> None:
    ids = ["MiniGrid-DoorKey-5x5-v0", "MiniGrid-DoorKey-8x8-v0"]
    task = MiniGridTask("dk", "MiniGrid-DoorKey-8x8-v0", 640, ["FORWARD", "PICKUP"], ids)
    sizes = []
    for index in range(4):
        env = task.training_env(seed=5, index=index)
        obs, _ = env.reset()
        assert env.observation_space == task.validation_env().observation_space
        assert obs.shape == (147,)
        sizes.append((env.unwrapped.width, env.unwrapped.max_steps))
    assert sizes == [(5, 250), (8, 640), (5, 250), (8, 640)]  # other ids keep their own limit
    ep = task.episode(100)
    assert (ep.sim.width, ep.sim.max_steps) == (8, 640)
    assert make_task("doorkey8").train_gym_ids[-1] == "MiniGrid-DoorKey-8x8-v0"


def test_nav_obs_is_the_scaled_flat_egocentric_image() -> None:
    ep = make_task("doorkey8").episode(0)
    image = ep.sim.gen_obs()["image"]
    assert ep.obs.shape == (147,) and ep.obs.dtype == np.float32
    np.testing.assert_allclose(ep.obs, (image / np.array([10.0, 5.0, 2.0])).reshape(-1), atol=1e-7)
    assert 0.0 <= ep.obs.min() and ep.obs.max() <= 1.0


def test_policy_action_index_maps_to_the_named_minigrid_action() -> None:
    ep = make_task("doorkey8").episode(2)
    turns = {"TURN_LEFT": 3, "TURN_RIGHT": 1}
    for name, delta in turns.items():
        before = ep.sim.agent_dir
        ep.step(ep.action_names.index(name))
        assert ep.sim.agent_dir == (before + delta) % 4
    ep = make_task("empty16x16").episode(0)  # agent starts at (1, 1) facing east
    ep.step(ep.action_names.index("FORWARD"))
    assert tuple(ep.sim.agent_pos) == (2, 1)
    ep.step(ep.action_names.index("DONE"))
    assert tuple(ep.sim.agent_pos) == (2, 1) and not ep.done


@pytest.mark.parametrize("name", ["fourrooms", "doorkey8"])
def test_nav_view_reads_the_simulator(name: str) -> None:
    task = make_task(name)
    rng = np.random.default_rng(1)
    for seed in range(3):
        ep = task.episode(seed)
        for _ in range(25):
            v = ep.view()
            assert isinstance(v, NavView)
            sim = ep.sim
            fx, fy = (int(c) for c in sim.front_pos)
            assert v.front_pos == (fx, fy) and v.front == cell_char(sim.grid.get(fx, fy))
            assert v.pos == tuple(int(c) for c in sim.agent_pos)
            assert v.facing == ["EAST", "SOUTH", "WEST", "NORTH"][sim.agent_dir]
            assert v.full_grid[v.pos[1]][v.pos[0]] == ">v<^"[sim.agent_dir]
            assert len(v.full_grid) == v.height and {len(r) for r in v.full_grid} == {v.width}
            for y, row in enumerate(v.full_grid):
                for x, ch in enumerate(row):
                    if (x, y) != v.pos:
                        assert ch == cell_char(sim.grid.get(x, y))
            # the ego grid against the decoded image the policy saw (view x = col, view y = row)
            image = sim.gen_obs()["image"]
            assert v.ego[6][3] == "A" and len(v.ego) == 7
            for row in range(7):
                for col in range(7):
                    if (row, col) == (6, 3):
                        continue
                    obj, _, state = image[col, row]
                    kind = IDX_TO_OBJECT[int(obj)]
                    if kind == "unseen":
                        assert v.ego[row][col] == "?"
                    elif kind == "door":
                        assert v.ego[row][col] == {0: "o", 1: "D", 2: "L"}[int(state)]
                    else:
                        want = {"empty": ".", "wall": "#", "goal": "G", "key": "k"}[kind]
                        x, y = v.ego_to_world[(row, col)]
                        outside = not (0 <= x < v.width and 0 <= y < v.height)
                        assert v.ego[row][col] == ("?" if outside else want)
            assert v.goal_pos == next(
                (v.ego_to_world[(r, c)] for r in range(7) for c in range(7) if v.ego[r][c] == "G"),
                None,
            )
            assert {p for p, _ in v.doors} == {
                v.ego_to_world[(r, c)] for r in range(7) for c in range(7) if v.ego[r][c] in "DLo"
            }
            assert v.carrying == (sim.carrying.type if sim.carrying else None)
            ep.step(int(rng.integers(len(ep.action_names))))
            if ep.done:
                break
    assert STATE_TO_IDX == {"open": 0, "closed": 1, "locked": 2}


def test_card_view_counts_equal_a_recount_of_the_deck() -> None:
    task = make_task("higherlower")
    for seed in (0, 1):
        ep = task.episode(seed)
        deck = ep.game.deck
        order = deck.ranks_idx[deck.idx][::-1].tolist()  # full dealing order
        assert sorted(Counter(order).values()) == [4] * 13
        for k in range(51):
            v = ep.view()
            assert isinstance(v, CardView)
            future = Counter(order[k + 1 :])
            assert v.remaining == [future[r] for r in range(13)]
            assert v.card == order[k] and v.seen == order[: k + 1] and v.decision == k
            assert v.higher == sum(n for r, n in future.items() if r > v.card)
            assert v.lower == sum(n for r, n in future.items() if r < v.card)
            assert v.equal == future[v.card] and v.n_decisions == 51
            # POPGym's own hidden state counts the ranks seen so far
            assert v.remaining == (4 - ep.game.state.astype(int)).tolist()
            assert ep.obs.argmax() == v.card and ep.obs.sum() == 1.0
            ep.step(ep.expert_action())
        assert ep.done
    assert ep.view().card_name in {"A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K"}


def test_higherlower_follows_popgym_conventions() -> None:
    """Action 0 guesses higher; +1/52 right, -1/52 wrong, 0 on a push; the ace is low."""
    ep = make_task("higherlower").episode(5)
    seen = Counter()
    while not ep.done:
        card = ep.card()
        action = 0 if card < 6 else 1
        reward, _ = ep.step(action)
        nxt = ep.card()
        if nxt == card:
            assert reward == 0.0
        else:
            right = (nxt > card) == (action == 0)
            assert reward == pytest.approx(1 / 52 if right else -1 / 52)
        seen[ep.memory.decisions[-1]["outcome"]] += 1
    wins = seen["WIN"]
    assert ep.outcome()["accuracy"] == pytest.approx(wins / 51)
    assert ep.total_reward == pytest.approx((wins - seen["LOSS"]) / 52)
    from popgym.core.deck import RANKS

    assert RANKS[0] == "a" and RANKS[-1] == "k"


@pytest.mark.slow
def test_random_policy_success_on_fourrooms() -> None:
    """The floor any trained policy must clear: about 17% of FourRooms episodes in 500 steps."""
    task = make_task("fourrooms")
    successes = []
    for seed in range(100, 200):
        ep = task.episode(seed)
        rng = np.random.default_rng(seed)
        while not ep.done:
            ep.step(int(rng.integers(len(ep.action_names))))
        successes.append(ep.outcome()["success"])
    rate = float(np.mean(successes))
    print(f"random policy success on FourRooms test seeds: {rate:.2f}")
    assert 0.08 <= rate <= 0.30


# -- feedback-paper envs: a 100-step cap on MiniGrid's own reward --------------------------------


@pytest.mark.parametrize(("name", "default_max_steps"), sorted(FEEDBACK.items()))
def test_feedback_env_reward_is_minigrids_own_with_the_default_max_steps(
    name: str, default_max_steps: int
) -> None:
    task = make_task(name)
    gym_id = EXPECTED[name][0]
    assert gym.make(gym_id).unwrapped.max_steps == default_max_steps  # MiniGrid's default
    for seed in (100, 101, 102):
        ep = task.episode(seed)
        assert ep.sim.max_steps == default_max_steps and ep.view().max_steps == 100
        # a detour (a full turn on the spot) and then the shortest path to the goal
        for a in [0, 0, 0, 0, *ep.expert_plan()]:
            ep.step(a)
        assert ep.outcome()["success"] == 1.0 and ep.steps <= 100
        expected = 1 - 0.9 * ep.steps / default_max_steps
        assert ep.total_reward == pytest.approx(expected, abs=1e-6)
        # the same seed on the plain MiniGrid env pays the same reward
        env = gym.make(gym_id)
        env.reset(seed=seed)
        rewards = [env.step(ACTION_INDEX[a])[1] for a in ep.memory.actions]
        assert sum(rewards) == pytest.approx(ep.total_reward)


def test_feedback_step_limit_cuts_evaluation_episodes_but_not_training_ones() -> None:
    task = make_task("empty16x16")
    ep = task.episode(100)
    while not ep.done:
        ep.step(0)  # turning on the spot never reaches the goal
    assert (ep.steps, ep.truncated, ep.terminated, ep.total_reward) == (100, True, False, 0.0)
    env = task.training_env(seed=1)
    env.reset()
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = env.step(0)
        steps, done = steps + 1, terminated or truncated
    assert steps == 1024  # training plays to MiniGrid's own limit, as the paper's PPO did
    # step_limit=null: evaluation episodes also run to MiniGrid's limit (the random-row reading)
    free = MiniGridTask("x", "MiniGrid-Empty-16x16-v0", None, "all", step_limit=None)
    ep = free.episode(100)
    while not ep.done:
        ep.step(0)
    assert ep.steps == 1024 and free.episode_limit == 1024
    assert free.action_names == tuple(ACTION_INDEX)  # "all": MiniGrid's seven, in index order
    # an explicit max_steps still sets MiniGrid's own limit (and so its reward horizon)
    own = MiniGridTask("x", "MiniGrid-Empty-16x16-v0", 50, ["FORWARD"])
    assert own.max_steps == own.episode_limit == 50 and own.episode(1).sim.max_steps == 50


@pytest.mark.parametrize("env", ["empty5x5_random", "higherlower"])
def test_a_bad_action_or_a_finished_episode_is_refused(env):
    """Both families share one check (Episode.checked_action)."""
    episode = make_task(env).episode(100)
    n = len(episode.action_names)
    with pytest.raises(ValueError, match=rf"action {n} out of range: allowed 0..{n - 1}"):
        episode.step(n)
    while not episode.done:
        episode.step(episode.expert_action())
    with pytest.raises(RuntimeError, match="episode seed=100 is over"):
        episode.step(0)


def test_a_recorded_env_builds_only_a_task_class_of_conf_env(tmp_path):
    """A results file's env config is built only when it names a Task class conf/env names, and
    nothing nested is a `_target_` (Hydra would call any callable a file names)."""
    from omegaconf import OmegaConf

    from benchmark.envs import load_env_cfg, recorded_task, task_targets

    env = OmegaConf.to_container(load_env_cfg("higherlower"), resolve=True)
    assert recorded_task(env).name == "higherlower"
    assert "benchmark.envs.minigrid_nav.MiniGridTask" in task_targets()
    marker = tmp_path / "marker"
    evil = {**env, "task": {"_target_": "builtins.open", "file": str(marker), "mode": "w"}}
    with pytest.raises(ValueError, match="'builtins.open' is not a Task class of conf/env"):
        recorded_task(evil)
    nested = {**env, "task": {**env["task"], "deck": {"_target_": "builtins.open"}}}
    with pytest.raises(ValueError, match="holds another `_target_`"):
        recorded_task(nested)
    assert not marker.exists()
