"""The MiniGrid Memory family (MiniGrid-MemoryS*-v0): a POMDP on the navigation machinery.

The agent starts in a small room that holds a cue object (a key 'k' or a ball 'b'); a corridor
leads east to a junction with one object at its north end and one at its south end. Stepping next
to the object that matches the cue ends the episode with MiniGrid's reward, next to the other one
with nothing. From the junction the cue is out of sight, so a memoryless policy can do no better
than a coin flip there, while the expert (the true grid and the cue) always succeeds, and a
consultant that keeps the episodic memory (ASK+ stateful levels) can remember the cue.

Everything the suite asks about this family is declared here (task, episode, expert, prompt
blocks, belief claims); the env configs are conf/env/memory_*.yaml, docs/families.md."""

from __future__ import annotations

from collections.abc import Sequence

from minigrid.minigrid_env import MiniGridEnv

from benchmark.envs import navfeatures as nf
from benchmark.envs.base import Memory, NavView
from benchmark.envs.expert import GridPlanner
from benchmark.envs.grid import ObjectiveFamily, belief_claims
from benchmark.envs.minigrid_nav import MiniGridEpisode, MiniGridTask


class MemoryPlanner(GridPlanner):
    """Shortest paths to the cell beside the matching object; the cell beside the other object
    ends the episode, so the search treats it like lava."""

    def __init__(self, env: MiniGridEnv, allowed: Sequence[int]):
        super().__init__(env, allowed)
        self.goals = {tuple(int(v) for v in env.success_pos)}
        self.lava.add(tuple(int(v) for v in env.failure_pos))


class MemoryTask(MiniGridTask):
    """A MiniGrid Memory env id (MiniGrid-MemoryS7-v0 ... S17), the grid task machinery with the
    Memory expert and the `memory` family."""

    family = "memory"

    def __init__(self, name: str, gym_id: str, max_steps: int | None, actions: Sequence[str]):
        if not gym_id.startswith("MiniGrid-Memory"):
            raise ValueError(f"gym_id {gym_id!r} is not a MiniGrid Memory id (MiniGrid-MemoryS*)")
        super().__init__(name, gym_id, max_steps, actions)

    def episode(self, seed: int) -> MemoryEpisode:
        return MemoryEpisode(self, seed)


class MemoryEpisode(MiniGridEpisode):
    """A MiniGrid episode whose expert goes to the object that matches the cue."""

    planner_class = MemoryPlanner

    def cue_pos(self) -> tuple[int, int]:
        """The cue object's cell (MiniGrid's MemoryEnv puts it at (1, height // 2 - 1))."""
        return (1, self.sim.height // 2 - 1)


# -- the family: prompt blocks, belief claims, reasons ---------------------------------------------

OBJECT_WORDS = {"k": "key", "b": "ball"}


def cue_seen(view: NavView, memory: Memory) -> str | None:
    """The cue's kind ('key' or 'ball') if the agent has seen it this episode, else None."""
    return OBJECT_WORDS.get(memory.known_map.get((1, view.height // 2 - 1), ""))


def end_objects(view: NavView, memory: Memory) -> dict[str, tuple[tuple[int, int], str]]:
    """The objects seen at the corridor's ends: 'north'/'south' -> (cell, 'key'|'ball')."""
    mid = view.height // 2
    out = {}
    for (x, y), ch in memory.known_map.items():
        if ch in OBJECT_WORDS and x > 1 and y in (mid - 2, mid + 2):
            out["north" if y < mid else "south"] = ((x, y), OBJECT_WORDS[ch])
    return out


def cue_lines(view: NavView, memory: Memory) -> list[str]:
    """The remembered cue and the ends' objects (stateful levels: episodic memory)."""
    cue = cue_seen(view, memory)
    ends = end_objects(view, memory)
    seen = "; ".join(f"{side} {pos}={kind}" for side, (pos, kind) in sorted(ends.items()))
    match = [side for side, (_, kind) in ends.items() if kind == cue]
    lines = [
        f"CUE (start room, remembered): {cue or 'not seen yet'}",
        f"Objects at the corridor's ends (seen): {seen or '(none yet)'}",
    ]
    if cue and match:
        (pos, _), side = ends[match[0]], match[0]
        lines.append(
            f"Matching end: {side.upper()} (the {cue} at {pos}; {nf.compass_words(view, pos)})"
        )
    return lines


class MemoryFamily(ObjectiveFamily):
    """MiniGrid Memory: the grid family's view and features, plus the cue the agent must
    remember (stateful levels) and the Memory rules."""

    name = "memory"
    kinds = ("memory",)
    prompt_version = 2
    gym_id = "MiniGrid-Memory"
    world = (
        "the agent starts in a small room that holds a cue object (a key 'k' or a ball 'b'); a "
        "corridor leads east to a junction with one object at its north end and one at its "
        "south end. Stepping next to the object of the same kind as the cue wins; next to the "
        "other object loses. The agent sees only a 7x7 window in front of it. Pick the single "
        "next action that brings it closest to the matching object."
    )
    rules = (
        "- Remember the cue. At the junction turn toward the end whose object matches it.",
        "- FORWARD cannot enter '#', 'k' or 'b'.",
    )
    autopilot_rule = (
        "- Follow autopilot when it agrees with the cue.",
        "- If the cue was never seen, look back into the start room first.",
    )
    example_lines = (
        "cue not seen yet, in the start room                -> TURN_LEFT",
        "cue=key, at the junction, the key is north (left)  -> TURN_LEFT",
        "ahead=clear along the corridor                     -> FORWARD",
    )
    belief = (
        "TASK: MiniGrid Memory. A cue object (key or ball) lies in the start room; at the end "
        "of the corridor the agent must step next to the object of the same kind. The agent "
        "sees a 7x7 window in front of it."
    )

    def objective_state(self, grid_at, view, memory, level):
        text = grid_at(level)
        if level in ("basic", "enriched"):
            return text
        # the cue after the episodic memory, before the known map: each level extends the last
        memory_part = grid_at("stateful_min")
        map_part = text[len(memory_part) :]
        return "\n".join([memory_part, *cue_lines(view, memory)]) + map_part

    def belief_claims(self, episode):
        view, mem = episode.view(), episode.memory
        cue = cue_seen(view, mem)
        cue_claim = f"- the cue is a {cue} [confirmed]" if cue else "- the cue object [unknown]"
        return [*belief_claims(episode)[:2], cue_claim, *belief_claims(episode)[3:]]

    def reason(self, episode, action):
        cue = cue_seen(episode.view(), episode.memory)
        return f"go to the {cue}, it matches the cue" if cue else "find the cue, then its match"


FAMILY = MemoryFamily()
