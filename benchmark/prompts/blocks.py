"""Text blocks of the ASK / ASK+ prompt family (ASK+ paper, appendix 9).

Six blocks: (i) role, (ii) valid actions, (iii) rules, (iv) state, (v) examples, (vi) output
format. As in the paper, (i), (ii), (v) and (vi) are static per environment, (iii) changes only
with the rationale instruction, and (iv) is the only block the levels extend, cumulatively:
basic -> enriched (derived features, previews) -> stateful_min (episodic memory, no map) ->
stateful (+ the known-map window). Rules and examples are the paper's full-template text at every
level, also where a line refers to state a lower level does not show (docs/protocol.md).
The autopilot (the PPO suggestion) is part of the state block; without it (SLM-only, or
prompt.autopilot=false) the rule text that refers to it is dropped too.
The belief variant reuses the basic state block as its "current view".

The blocks of each env family (grid, cards, ...) live in its module, benchmark/envs/<family>.py
(benchmark.envs.family); this module holds what every family shares."""

from __future__ import annotations

from collections.abc import Sequence


def or_list(actions: Sequence[str]) -> str:
    return " or ".join(actions)


def output_format(actions: Sequence[str], rationale: bool) -> str:
    if rationale:
        return f"OUTPUT FORMAT:\nReason: <short>\nAction: {or_list(actions)}"
    return f"OUTPUT FORMAT: exactly one token: {or_list(actions)}"


def render_line(rationale: bool):
    """The answer writer for the oracle/dice consultants, in the ASK output format."""

    def render(action_name: str, reason: str) -> str:
        if rationale:
            return f"Reason: {reason.strip() or 'best option'}\nAction: {action_name}"
        return action_name

    return render
