"""Teacher beliefs from the environment's ground truth (the SFT targets of Agent-BRACE's belief
model; the paper distils them from GPT-5.4-mini, the suite knows the true state).

Certainty follows what was observed and when: in view now -> confirmed; seen earlier and static
since (MiniGrid's goal, a key or door only change by the agent's own actions) -> almost certain;
never seen -> unknown; a HigherLower prediction -> the label of its probability from the
remaining deck (card counting), so the labels spread over the scale as the paper's diversity
reward asks. The claims themselves are the env family's (Family.brace_teacher)."""

from __future__ import annotations

from benchmark.envs.truth import Truth


def teacher_claims(truth: Truth) -> list[str]:
    """The teacher's belief at `truth`, as '- <claim> [<label>]' lines."""
    return truth.brace.brace_teacher(truth)
