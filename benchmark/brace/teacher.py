"""Teacher beliefs from the environment's ground truth (the SFT targets of Agent-BRACE's belief
model; the paper distils them from GPT-5.4-mini, the suite knows the true state).

Certainty follows what was observed and when: in view now -> confirmed; seen earlier and static
since (MiniGrid's goal, a key or door only change by the agent's own actions) -> almost certain;
never seen -> unknown; a HigherLower prediction -> the label of its probability from the
remaining deck (card counting), so the labels spread over the scale as the paper's diversity
reward asks."""

from __future__ import annotations

from benchmark.brace.rewards import Truth, label_for
from benchmark.envs import navfeatures as nf
from benchmark.envs.base import CardView, NavView
from benchmark.envs.minigrid_nav import is_doorkey


def teacher_claims(truth: Truth) -> list[str]:
    """The teacher's belief at `truth`, as '- <claim> [<label>]' lines."""
    view, mem = truth.view, truth.memory
    if isinstance(view, CardView):
        total = sum(view.remaining)
        claims = [
            f"- the current card is {view.card_name} [confirmed]",
            f"- {len(view.seen)} cards have been dealt; {total} remain [confirmed]",
            f"- {view.higher} remaining cards rank higher and {view.lower} lower [confirmed]",
            f"- {view.equal} remaining cards share the current rank [confirmed]",
            f"- win streak {mem.win_streak}, loss streak {mem.loss_streak} [confirmed]",
        ]
        if total:
            for side, n in (("higher", view.higher), ("lower", view.lower)):
                claims.append(f"- the next card ranks {side} [{label_for(n / total)}]")
        return claims
    assert isinstance(view, NavView)
    visible = truth.visible()
    claims = [
        f"- I am at {view.pos} facing {view.facing} [confirmed]",
        f"- the cell ahead is {nf.CELL_WORDS.get(view.front, view.front)} [confirmed]",
    ]
    if view.goal_pos is not None:
        claims.append(f"- the goal is at {view.goal_pos} [confirmed]")
    elif mem.goal_pos is not None:
        claims.append(f"- the goal is at {mem.goal_pos} [almost certain]")
    else:
        claims.append("- the goal location [unknown]")
    claims.append(f"- {len(mem.known_map)} cells of the map have been seen [confirmed]")
    if is_doorkey(truth.action_names):
        claims.append(f"- I carry {view.carrying or 'nothing'} [confirmed]")
        if view.carrying != "key":
            keys = [p for p, ch in mem.known_map.items() if ch == "k"] + list(view.keys)
            if keys:
                label = "confirmed" if keys[-1] in visible else "almost certain"
                claims.append(f"- a key lies at {keys[-1]} [{label}]")
            else:
                claims.append("- the key location [unknown]")
        doors = [(p, ch) for p, ch in mem.known_map.items() if ch in "LDo"]
        doors += [(p, ch) for p, ch in view.doors]
        if doors:
            where, ch = doors[-1]
            word = {"L": "locked", "D": "closed", "o": "open"}[ch]
            claims.append(
                f"- the door is {word} [{'confirmed' if where in visible else 'almost certain'}]"
            )
        else:
            claims.append("- the door is unseen [confirmed]")
    return claims
