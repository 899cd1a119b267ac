"""Agent-BRACE's SFT bootstrap of the belief role: teacher trajectories from the ground truth,
supervised fine-tuning with the suite's machinery (benchmark.finetune.train.fine_tune), and the
held-out measurement the paper reports (format compliance) with R_belief's terms.

States come from a PPO policy's rollouts through the one Evaluator (PPO acting alone), on
TRAINING seeds for the data (a validation or test seed is refused, as in benchmark.finetune) and
on validation seeds for the measurement. At each step the belief session is teacher-forced: its
update is answered with the teacher's belief (benchmark.brace.teacher), so b(t-1) in every
example is the teacher's previous belief."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.brace.rewards import (
    DEFAULT_WEIGHTS,
    MAX_CLAIMS,
    BeliefReward,
    BeliefWeights,
    belief_reward,
    episode_rewards,
)
from benchmark.brace.teacher import teacher_claims
from benchmark.consultants import Answer, Decoding
from benchmark.envs import Task
from benchmark.envs.truth import Truth, snapshot
from benchmark.finetune.dataset import Example
from benchmark.seeds import Splits, check_training_seeds


@dataclass
class BeliefState:
    """One belief update to make: the evaluator's messages, the true state, b(t-1), the
    teacher's belief at t and (filled after the episode) the episode's success."""

    messages: list[dict[str, str]]
    decoding: Decoding
    actions: tuple[str, ...]
    truth: Truth
    previous: list[str]
    teacher: list[str]
    seed: int
    step: int
    success: float = 0.0
    answer: str = field(default="", repr=False)  # the teacher's update text

    def example(self) -> Example:
        """A supervised example for benchmark.finetune.train (the teacher's update as target)."""
        return Example(
            self.messages, self.answer, self.decoding, self.actions, self.seed, self.step
        )


def collect_states(
    task: Task,
    prompt: Any,
    policy: Any,
    seeds: Sequence[int],
    *,
    splits: Splits,
    split_ok: bool = False,
    eval_seed: int = 0,
) -> list[BeliefState]:
    """Every step's belief update on `seeds` while PPO plays (training seeds only unless
    `split_ok`, for held-out measurement)."""
    from benchmark.evaluate import Evaluator
    from benchmark.gates import NeverGate

    if not split_ok:
        check_training_seeds(seeds, splits)
    sessions: dict[int, Any] = {}
    states: list[BeliefState] = []

    def hook(event: Any) -> None:
        ep = event.episode
        session = sessions.get(ep.seed)
        if session is None:
            session = sessions[ep.seed] = prompt.session(ep, True)
        previous = list(session.belief)
        gen = session.consult(None)
        (query,) = next(gen)
        truth = snapshot(ep)
        teacher = teacher_claims(truth)
        text = "<belief_state>\n" + "\n".join(teacher) + "\n</belief_state>"
        states.append(
            BeliefState(
                messages=[dict(m) for m in query.messages],
                decoding=query.decoding,
                actions=tuple(query.actions),
                truth=truth,
                previous=previous,
                teacher=teacher,
                seed=ep.seed,
                step=ep.steps,
                answer=text,
            )
        )
        gen.send([Answer(text)])  # the session takes the teacher's belief, then asks to act
        gen.close()

    evaluator = Evaluator(task=task, gate=NeverGate(), policy=policy, seed=int(eval_seed))
    rows = evaluator.run(list(seeds), mode="lockstep", on_step=hook)
    outcome = episode_rewards(rows)
    for s in states:
        s.success = outcome[s.seed]
    return states


def measure(
    model_dir: str | Path,
    states: Sequence[BeliefState],
    weights: BeliefWeights = DEFAULT_WEIGHTS,
    max_claims: int = MAX_CLAIMS,
) -> dict[str, Any]:
    """The model's belief updates on `states` (greedy, as a cell asks them): format compliance
    (R_belief's gate), the rate of updates the evaluator accepts (at least one valid claim) and
    the mean of R_belief and its terms; the teacher's own scores for scale."""
    from benchmark.finetune.store import answer_all

    answers, seconds = answer_all(model_dir, states)
    return score([a.text for a in answers], states, weights, max_claims) | {
        "seconds": round(seconds, 2),
        "examples": [a.text for a in answers[:3]],
    }


def rewards_at(
    texts: Sequence[str | None],
    states: Sequence[BeliefState],
    weights: BeliefWeights = DEFAULT_WEIGHTS,
    max_claims: int = MAX_CLAIMS,
) -> list[BeliefReward]:
    """R_belief (with its terms) of each update `texts[i]` made at `states[i]`."""
    return [
        belief_reward(t, s.previous, s.truth, s.teacher, s.success, weights, max_claims)
        for t, s in zip(texts, states, strict=True)
    ]


def score(
    texts: Sequence[str | None],
    states: Sequence[BeliefState],
    weights: BeliefWeights = DEFAULT_WEIGHTS,
    max_claims: int = MAX_CLAIMS,
) -> dict[str, Any]:
    """Mean R_belief terms of the updates `texts` at `states`."""
    from benchmark.prompts.belief import parse_belief

    n = len(states)
    if not n:
        return {"states": 0}
    rewards = rewards_at(texts, states, weights, max_claims)
    mean = {
        k: round(sum(getattr(r, k) for r in rewards) / n, 4)
        for k in ("total", "gate", "correctness", "tracking", "diversity", "success")
    }
    return {
        "states": n,
        "format_compliance": mean.pop("gate"),
        "accepted": round(sum(bool(parse_belief(t, max_claims)) for t in texts) / n, 4),
        "reward": mean,
    }


def bootstrap(
    task: Task,
    prompt: Any,
    policy: Any,
    base_dir: str | Path,
    out_dir: Path,
    *,
    train_seeds: Sequence[int],
    held_out_seeds: Sequence[int],
    splits: Splits,
    settings: Any,
    max_examples: int | None = None,
    seed: int = 0,
    measure_base: bool = True,
) -> dict[str, Any]:
    """SFT the belief role of `base_dir` on teacher updates from `train_seeds` into `out_dir`;
    measure the result (and the base, unless `measure_base` is False: generation is the slow
    part on a CPU) on the updates of `held_out_seeds` (validation)."""
    import random

    from benchmark.finetune.train import fine_tune

    start = time.perf_counter()
    train = collect_states(task, prompt, policy, train_seeds, splits=splits)
    if max_examples is not None and len(train) > max_examples:
        train = random.Random(seed).sample(train, max_examples)
    held = collect_states(task, prompt, policy, held_out_seeds, splits=splits, split_ok=True)
    data_seconds = time.perf_counter() - start
    teacher = score([s.answer for s in held], held)
    before = measure(base_dir, held) if measure_base else None
    stats = fine_tune(base_dir, [s.example() for s in train], out_dir, settings, seed=seed)
    after = measure(out_dir, held)
    report = {
        "train": {"states": len(train), "seeds": sorted({s.seed for s in train}), **stats},
        "data_seconds": round(data_seconds, 2),
        "held_out": {
            "seeds": list(held_out_seeds),
            "teacher": teacher,
            "base": before,
            "sft": after,
        },  # fmt: skip
    }
    (out_dir / "brace_sft.json").write_text(json.dumps(report, indent=1, default=str))
    return report
