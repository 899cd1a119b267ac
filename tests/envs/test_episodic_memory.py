"""Episodic memory sigma: the known map is exactly the union of what was in view, visits and
the action history match the trajectory, and card decisions/streaks match the game."""

from __future__ import annotations

from collections import Counter

import numpy as np

from benchmark.envs import make_task
from benchmark.envs.minigrid_nav import cell_char


def _visible_world_cells(sim) -> set[tuple[int, int]]:
    """Visible cells computed with MiniGrid's own world -> view mapping (relative_coords)."""
    _, vis = sim.gen_obs_grid()
    out = set()
    for x in range(sim.grid.width):
        for y in range(sim.grid.height):
            rel = sim.relative_coords(x, y)
            if rel is not None and vis[rel[0], rel[1]]:
                out.add((x, y))
    return out


def _run_script(name: str, seed: int, script: list[str]) -> None:
    ep = make_task(name).episode(seed)
    seen = _visible_world_cells(ep.sim)
    positions = [tuple(int(v) for v in ep.sim.agent_pos)]
    for action in script:
        ep.step(ep.action_names.index(action))
        seen |= _visible_world_cells(ep.sim)
        positions.append(tuple(int(v) for v in ep.sim.agent_pos))
        assert set(ep.memory.known_map) == seen
        if ep.done:
            break
    mem = ep.memory
    assert mem.positions == positions
    assert mem.visits == dict(Counter(positions))
    assert mem.actions == script[: ep.steps]
    assert len(mem.rewards) == ep.steps and sum(mem.rewards) == ep.total_reward
    # walls and the goal never change, so their remembered characters must be the true ones
    for pos, ch in mem.known_map.items():
        true = cell_char(ep.sim.grid.get(*pos))
        if true in "#G":
            assert ch == true, (pos, ch, true)
    goals = [p for p, ch in mem.known_map.items() if ch == "G"]
    assert mem.goal_pos == (goals[0] if goals else None)


def test_known_map_is_the_union_of_views_fourrooms() -> None:
    script = ["FORWARD", "FORWARD", "TURN_LEFT", "FORWARD", "FORWARD", "FORWARD"]
    script += ["TURN_RIGHT", "TURN_RIGHT", "FORWARD", "FORWARD", "TURN_LEFT"] * 3
    for seed in range(3):  # validation seeds: memory tests never touch the test split
        _run_script("fourrooms", seed, script)


def test_known_map_follows_doorkey_expert_with_pickup_and_toggle() -> None:
    task = make_task("doorkey8")
    ep = task.episode(0)
    script = [ep.action_names[a] for a in ep.expert_plan()]
    _run_script("doorkey8", 0, script)
    # after the expert opened the door and took the key, the map says so
    ep = task.episode(0)
    for a in ep.expert_plan():
        ep.step(a)
    door = [p for p, ch in ep.memory.known_map.items() if ch in "DLo"]
    assert door and all(ep.memory.known_map[p] == "o" for p in door)
    assert "k" not in ep.memory.known_map.values() and ep.memory.goal_pos is not None


def test_ego_to_world_agrees_with_minigrid_relative_coords() -> None:
    ep = make_task("fourrooms").episode(4)
    for action in [0, 2, 2, 1, 2, 1, 1, 2]:
        ep.step(action)
        sim = ep.sim
        e2w = ep.ego_to_world()
        assert len(e2w) == 49 and e2w[(6, 3)] == tuple(int(v) for v in sim.agent_pos)
        for (row, col), (x, y) in e2w.items():
            if 0 <= x < sim.grid.width and 0 <= y < sim.grid.height:
                assert sim.relative_coords(x, y) == (col, row)


def test_card_memory_records_decisions_and_streaks() -> None:
    task = make_task("higherlower")
    ep = task.episode(3)
    rng = np.random.default_rng(0)
    cards = [ep.card()]
    wins = losses = 0
    while not ep.done:
        action = int(rng.integers(2))
        reward, _ = ep.step(action)
        cards.append(ep.card())
        last = ep.memory.decisions[-1]
        assert (last["card"], last["next_card"]) == (cards[-2], cards[-1])
        assert last["action"] == ep.action_names[action]
        expected = "WIN" if reward > 0 else "LOSS" if reward < 0 else "PUSH"
        assert last["outcome"] == expected
        wins = wins + 1 if expected == "WIN" else 0
        losses = losses + 1 if expected == "LOSS" else 0
        assert (ep.memory.win_streak, ep.memory.loss_streak) == (wins, losses)
    assert len(ep.memory.decisions) == 51 == len(ep.memory.actions)
    assert ep.view().seen == cards
