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


def misstated(logs: list[rollout.StepLog], tok: Any, per_state: int = 2) -> list[list[str]]:
    """Per belief update of `logs`: the teacher's text, then up to `per_state` copies with one
    digit of a bullet changed (a coordinate or count made false: a lower R_belief), each as
    many tokens long as the teacher's and with an R_belief of its own, so an untrained
    model's log-probs of a state's completions are comparable."""
    from benchmark.brace.rewards import belief_reward

    out = []
    for s in logs:
        for t in s.turns:
            if t.role != BELIEF_ROLE:
                continue
            size = len(tok.encode(t.text, add_special_tokens=False))
            seen = {belief_reward(t.text, s.previous, s.truth, s.teacher, s.success).total}
            texts, lines = [t.text], t.text.split("\n")
            for i, line in enumerate(lines):
                found = None
                for c, other in ((c, d) for c, ch in enumerate(line) if ch.isdigit()
                                 for d in "0123456789" if d != ch):  # fmt: skip
                    text = "\n".join(
                        lines[:i] + [line[:c] + other + line[c + 1 :]] + lines[i + 1 :]
                    )
                    r = belief_reward(text, s.previous, s.truth, s.teacher, s.success).total
                    if r not in seen and len(tok.encode(text, add_special_tokens=False)) == size:
                        found = text, r
                        break
                if found and line.lstrip().startswith("-"):
                    seen.add(found[1])
                    texts.append(found[0])
                if len(texts) > per_state:
                    break
            out.append(texts)
    return out


def expected_reward(model: Any, tok: Any, states: list[list[tuple[tuple, float]]]) -> float:
    """The batch's expected reward under `model` restricted to the batch's completions: per
    state, its completions' rewards weighted by the model's probabilities of them (normalised
    over the state's completions), averaged over the states (`states`: per state, (prompt ids,
    completion ids) with the completion's reward)."""
    import numpy as np

    total = 0.0
    for completions in states:
        lp = np.array(log_probs(model, tok, [pair for pair, _ in completions]))
        p = np.exp(lp - lp.max())
        total += float((p / p.sum()) @ np.array([r for _, r in completions]))
    return total / len(states)
