"""Fixed RL batches for the update tests (test_ppo): the teacher's real episode on a
training seed, its turns carrying the token ids the RL sampler would have recorded, so the
real rewards (benchmark.brace.rewards) and the real updates read them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmark.brace import rollout
from benchmark.consultants.hf import prompt_ids
from benchmark.prompts.belief import BELIEF_ROLE

SEED = 200  # a training seed the expert wins on Empty-Random-5x5 (tests/brace/test_joint.py)


def teacher_episode() -> list[rollout.StepLog]:
    """The teacher's episode on SEED (won: R_env 1)."""
    from benchmark.brace.pipeline import brace_prompt, task_for

    _, logs = rollout.run(task_for("empty5x5_random"), brace_prompt(),
                          rollout.TeacherConsultant(), [SEED])  # fmt: skip
    return logs


def with_ids(logs: list[rollout.StepLog], tok: Any, success: float,
             text: Callable[[rollout.StepLog, rollout.Turn], str] = lambda s, t: t.text
             ) -> list[rollout.StepLog]:  # fmt: skip
    """A copy of the episode `logs` whose turns answer `text(step, turn)` (the same answers by
    default), each with its prompt and completion token ids (the completion closed by the
    end-of-sequence token, as sampled), its R_env set to `success`."""
    out = []
    for s in logs:
        turns = []
        for t in s.turns:
            answer = text(s, t)
            ids = {"prompt_ids": prompt_ids(tok, t.messages, enable_thinking=False),
                   "completion_ids": tok.encode(answer, add_special_tokens=False)
                   + [tok.eos_token_id]}  # fmt: skip
            turns.append(rollout.Turn(t.role, t.messages, t.decoding, t.actions, answer,
                                      t.expert, ids))  # fmt: skip
        out.append(rollout.StepLog(**{**s.__dict__, "turns": turns, "success": success}))
    return out


def other_command(s: rollout.StepLog, t: rollout.Turn) -> str:
    """An act turn's answer replaced by another of its allowed commands (a belief update kept)."""
    if t.role == BELIEF_ROLE:
        return t.text
    return next(a for a in t.actions if a != t.text)


def log_probs(model: Any, tok: Any, pairs: list[tuple[list[int], list[int]]]) -> list[float]:
    """Each completion's summed log-prob under `model` (no gradient)."""
    import torch

    from benchmark.brace import tokens
    from benchmark.finetune import lm

    model.eval()
    with torch.no_grad():
        logp, _ = tokens.completion_forward(model, pairs, lm.pad_id(tok))
    return [float(x.sum()) for x in logp]
