"""Shortest plans of a TextWorld game from its current state, planned on TextWorld's own world
model (the game's logic: facts, rules and quests), so that the text family's `optimal_actions()`
is the set of EVERY command that starts a shortest winning plan, as on the grids.

TextWorld's own `policy_commands` is one plan kept up to date by undoing detours: after a step
away it walks back, and after taking a needless object it drops it again, though neither step is
needed. Here the plan is searched from the state itself:

1. Relevance (the classical backward analysis of planning): ground every action reachable from
   the current facts with deletions ignored (a finite, polynomial closure), then keep the actions
   that add a fact the goal needs, or a precondition of an action kept, or that add or delete a
   fact of a losing condition, up to a fixpoint. Dropping every other action from a winning plan
   leaves a winning plan that is no longer (those actions add nothing a kept action or the goal
   reads, and every fact a losing condition reads changes exactly as before), so every shortest
   plan uses kept actions only. This is what makes the search small: Cooking's kitchen holds
   many objects a plain breadth-first search would shuffle (250,000 states at depth 5).
2. A layered breadth-first search over the true states (sets of facts) with the kept actions,
   which carries, for each state of a layer, the set of first actions of the shortest paths that
   reach it; the union of those sets over the first layer that wins is the answer. A state where a
   losing condition holds ends its path.

The goal is TextWorld's: every non-optional quest not yet done is won (one of its winning events'
conditions holds), each at some state of the plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# A search that grows past this many states is refused (no game of the suite's sizes comes near:
# the relevant actions of Cooking, Quest and Treasure leave a few hundred states).
MAX_STATES = 200_000


class SearchTooLarge(RuntimeError):
    """The search grew past MAX_STATES (a game larger than the sizes the planner was built for:
    the episode falls back to TextWorld's own next winning command)."""


@dataclass(frozen=True)
class ShortestPlans:
    """The commands that start a shortest winning plan now, and that plan's length (None, with
    no command, when no plan wins)."""

    commands: frozenset[str]
    length: int | None


def _pre_post(action: Any) -> tuple[frozenset, frozenset]:
    return frozenset(action.preconditions), frozenset(action.postconditions)


def _conditions(events: list[Any]) -> list[frozenset]:
    """Each event's condition (EventProgression list) as the set of facts that must hold together."""
    return [frozenset(e.event.condition.preconditions) for e in events]


def _relevant_actions(progression: Any, goal: set, lose: set) -> list[Any]:
    """The actions a shortest plan can use (the module's step 1), in a fixed order."""
    game = progression.game
    rules = list(game.kb.rules.values())
    constants = game.kb.types.constants_mapping
    relaxed = progression.state.copy()
    known: set = set(relaxed.facts)
    actions: dict[Any, None] = {}
    while True:  # delete-free reachability: facts only grow, so this ends
        new = [a for a in relaxed.all_applicable_actions(rules, constants) if a not in actions]
        added = {p for a in new for p in a.added} - known
        actions.update(dict.fromkeys(new))
        if not added:
            break
        relaxed.add_facts(added)
        known |= added
    needed, kept = set(goal) | set(lose), {}
    changed = True
    while changed:
        changed = False
        for a in actions:
            if a in kept:
                continue
            if needed.intersection(a.added) or lose.intersection(a.removed):
                kept[a] = None
                needed.update(a.preconditions)
                changed = True
    return list(kept)


def shortest_plans(progression: Any, inform7: Any) -> ShortestPlans:
    """Every command that starts a shortest winning plan from `progression`'s state.

    `progression`: TextWorld's GameProgression of the running game (`state["_game_progression"]`,
    tracking quests); `inform7`: the game's Inform7Game (turns an action into its command)."""
    quests = [
        q
        for q in progression.quest_progressions
        if q.completable and not q.done and not q.quest.optional
    ]
    if not progression.tracking_quests or progression.done or not quests:
        return ShortestPlans(frozenset(), None)
    wins = [_conditions(q.win_events) for q in quests]
    losses = [
        c
        for q in progression.quest_progressions
        if not q.quest.optional and not q.done
        for c in _conditions(q.fail_events)
    ]
    goal = {p for conditions in wins for c in conditions for p in c}
    lose = {p for c in losses for p in c}
    actions = [(a, *_pre_post(a)) for a in _relevant_actions(progression, goal, lose)]

    def won_now(facts: frozenset, won: frozenset) -> frozenset:
        return won | {i for i, cs in enumerate(wins) if any(c <= facts for c in cs)}

    def lost(facts: frozenset) -> bool:
        return any(c <= facts for c in losses)

    start = frozenset(progression.state.facts)
    layer: dict[tuple, set] = {(start, won_now(start, frozenset())): set()}
    seen = set(layer)
    length = 0
    while layer:
        length += 1
        nxt: dict[tuple, set] = {}
        for (facts, won), firsts in layer.items():
            for action, pre, post in actions:
                if not pre <= facts:
                    continue
                after = (facts - pre) | post
                node = (after, won_now(after, won))
                if node in seen:
                    continue  # reached by a shorter path
                nxt.setdefault(node, set()).update(firsts or {action})
        seen.update(nxt)
        if len(seen) > MAX_STATES:
            raise SearchTooLarge(
                f"shortest-plan search past {MAX_STATES} states at depth {length}: the game is "
                "larger than the suite's TextWorld sizes"
            )
        winning = [firsts for (_, won), firsts in nxt.items() if len(won) == len(wins)]
        if winning:
            firsts = set().union(*winning)
            return ShortestPlans(frozenset(inform7.gen_commands_from_actions(firsts)), length)
        layer = {
            node: firsts
            for node, firsts in nxt.items()
            if not lost(node[0])  # a lost game ends its path
        }
    return ShortestPlans(frozenset(), None)
