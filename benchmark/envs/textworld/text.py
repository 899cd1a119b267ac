"""The TextWorld family's prompt blocks (ASK/ASK+ levels), belief-state lines and reasons.

Block (iv), cumulative over the levels: basic = the game's last answer, the inventory and the
objective (what the authors of Agent-BRACE show a TextWorld player each turn; the `inventory`
command is not offered, so the view must hold it); enriched adds the room's description and the
score; stateful_min adds the episodic memory (the last commands with the first line of their
answers, the rooms entered); stateful adds the known map (the exits walked, room -> command ->
room)."""

from __future__ import annotations

import re
from pathlib import Path

from benchmark.envs.family import Family
from benchmark.envs.textworld import brace
from benchmark.envs.textworld.task import TextMemory, TextView

RATIONALE_RULE = (
    "- Line 1: Reason: <one short line, max 15 words>.   Line 2: Action: <one valid command>."
)
RECENT = 5  # commands the stateful levels show


class TextWorldFamily(Family):
    """TextWorld Quest, Treasure and Cooking games: text observation, admissible commands."""

    name = "textworld"
    kinds = ("text_game",)
    prompt_version = 3  # 2: the basic view had no inventory

    def vocabulary(self) -> str:
        """TextWorld's own words, from the installed package's data: every phrase of its text
        grammars (rooms, objects, adjectives, instructions; the cooking challenge's too) and every
        command and fact template of its game logic, placeholders removed. Deterministic for a
        TextWorld version (the lock pins it), offline, and it covers the games' words, so a
        command is a few tokens, not a spelling."""
        import textworld

        root = Path(textworld.__file__).parent
        lines: list[str] = []
        for path in sorted(root.glob("**/text_grammars/*.twg")):
            for raw in path.read_text().splitlines():
                if raw.startswith("#") or ":" not in raw:
                    continue
                for phrase in re.split(r"[;|]", raw.split(":", 1)[1]):
                    phrase = re.sub(r"#[^#]*#|\(.*?\)|[\[\]{}<>]", " ", phrase)
                    phrase = " ".join(phrase.split())
                    if phrase:
                        lines.append(phrase)
        for path in sorted(root.glob("**/logic/*.twl")):
            for text in re.findall(r'"([^"]+)"', path.read_text()):
                phrase = " ".join(re.sub(r"\{[^}]*\}", " ", text).split())
                if phrase:
                    lines.append(phrase)
        return "\n".join(dict.fromkeys(lines))

    def system(self, task, actions, level, rationale, autopilot):
        """Blocks (i)-(iii): role, the commands valid now, rules."""
        kind = getattr(task, "game", "text")
        lines = [
            "ROLE: You advise a reinforcement-learning agent playing a TextWorld text adventure "
            f"({kind} game): it reads what the game says and types one command per turn. Pick the "
            "single next command that brings it closest to completing the objective.",
            "",
            "VALID ACTIONS (the commands the game accepts now):",
            *(f"- {a}" for a in actions),
            "",
            "RULES:",
            "- Output only the command line required below, copied exactly (no markdown).",
            *([RATIONALE_RULE] if rationale else []),
            "- Follow the objective's steps in order; do not take objects it does not name.",
            "- Follow autopilot when it serves the objective."
            if autopilot
            else "- Explore rooms you have not entered when the objective's object is not here.",
        ]
        return "\n".join(lines)

    def state(
        self,
        view: TextView,
        memory: TextMemory,
        actions,
        level,
        autopilot,
        map_radius=5,
        planner_hint="frontier",
    ):
        """Block (iv) at `level` (cumulative)."""
        lines = [
            f"OBSERVATION: {view.observation or '(nothing)'}",
            f"INVENTORY: {view.inventory}",
            f"OBJECTIVE: {view.objective}",
        ]
        if autopilot is not None:
            lines.append(f"Autopilot: {autopilot}")
        if level == "basic":
            return "\n".join(lines)
        lines += [
            f"ROOM ({view.room}): {view.description}",
            f"Score {view.score}/{view.max_score}   Moves {view.moves}/{view.max_steps}",
        ]
        if level == "enriched":
            return "\n".join(lines)
        recent = memory.transcript[-RECENT:]
        lines += [
            "RECENT COMMANDS (oldest first): "
            + (" | ".join(f"{c} -> {a}" for c, a in recent) if recent else "(none yet)"),
            f"Rooms entered: {', '.join(memory.rooms) or '(none)'}",
        ]
        if level == "stateful_min":
            return "\n".join(lines)
        walked = [f"{r} -{c}-> {to}" for r, ex in memory.exits.items() for c, to in ex.items()]
        lines.append(f"KNOWN MAP: {'; '.join(walked) if walked else '(no exit walked yet)'}")
        return "\n".join(lines)

    def examples(self, task, actions, level):
        """Block (v)."""
        return "\n".join(
            [
                "EXAMPLES:",
                "objective: head north, then take the key; exit north here -> go north",
                "the key is on the floor here                               -> take key",
            ]
        )

    def belief_task(self, task):
        return (
            f"TASK: a TextWorld {getattr(task, 'game', 'text')} game. The agent reads the game's "
            "text and types one command per turn to complete the objective."
        )

    def belief_claims(self, episode):
        view = episode.view()
        return [
            f"- the agent is in the {view.room} [confirmed]",
            f"- the agent carries: {view.inventory} [confirmed]",
            f"- score {view.score} of {view.max_score} [confirmed]",
        ]

    def belief_steps(self, episode, since, limit):
        return [f"{c} -> {a}" for c, a in episode.memory.transcript[since:][-limit:]]

    def reason(self, episode, action):
        return "the next step of the objective"

    # Agent-BRACE: the teacher's belief and the claim rules (benchmark.envs.textworld.brace)
    brace_teacher = staticmethod(brace.brace_teacher)
    brace_rules = staticmethod(brace.brace_rules)
