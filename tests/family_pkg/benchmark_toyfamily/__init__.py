"""A tiny env family outside the suite: MiniGrid Empty-5x5 with its own prompt blocks.

The task reuses the suite's MiniGrid machinery (episodes, BFS expert); the family gives short
ASK/ASK+ texts of its own. The suite finds it by the name `toy` through this package's entry
point in the group `benchmark.families`."""

from __future__ import annotations

from benchmark.envs.family import Family
from benchmark.envs.minigrid_nav import MiniGridTask
from benchmark.vocabulary import ACTION_MEANING


class ToyTask(MiniGridTask):
    """MiniGrid Empty-5x5 under the `toy` family."""

    family = "toy"


class ToyFamily(Family):
    """Reach the goal in a small empty room: one line of state per level."""

    name = "toy"
    kinds = ("toy",)

    def system(self, task, actions, level, rationale, autopilot):
        valid = "\n".join(f"- {a}: {ACTION_MEANING[a]}" for a in actions)
        return (
            f"ROLE: guide the agent to the goal 'G' in a small empty room.\nVALID ACTIONS:\n{valid}"
        )

    def state(self, view, memory, actions, level, autopilot, map_radius=5, planner_hint="frontier"):
        lines = [f"STATE: Pos={view.pos} Facing={view.facing} Ahead='{view.front}'"]
        if level != "basic":
            lines.append(f"Goal: {view.goal_pos or 'not visible'}")
        if level in ("stateful_min", "stateful"):
            lines.append(f"Recent actions: {' '.join(memory.actions[-4:]) or '(none)'}")
        if autopilot is not None:
            lines.append(f"Autopilot: {autopilot}")
        return "\n".join(lines)

    def examples(self, task, actions, level):
        return "EXAMPLES:\ngoal ahead -> FORWARD"


FAMILY = ToyFamily()
