"""Episodes through the suite's own Evaluator with every consultation logged: the
teacher trajectories of the SFT stage and the rollouts of the RL stage are the same loop, only
the consultant differs (the ground-truth teacher, or the models being trained, sampling).

The gate decides which steps the consultant sees: `always` (SLM-only, the paper's setting) or
the entropy gate with a PPO policy (ASK: the states the gate sends). Each consulted step is a
`StepLog`: the true state, the belief before and after, the teacher's belief, and its rounds
(update, act) with their messages and the text answered."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmark.brace.rewards import episode_rewards
from benchmark.brace.teacher import teacher_claims
from benchmark.consultants import Answer, Consultant, Decoding, Query
from benchmark.envs.truth import Truth, snapshot
from benchmark.finetune.dataset import Example
from benchmark.prompts.belief import BELIEF_ROLE, INITIAL_BELIEF


@dataclass
class Turn:
    """One round of one consultation: what was asked and answered."""

    role: str  # "belief" (the update) or "" (the policy's act round)
    messages: list[dict[str, str]]
    decoding: Decoding
    actions: tuple[str, ...]
    text: str
    expert: str = ""  # the expert's action name (act rounds; for SFT targets)
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # the sampler's token ids


@dataclass
class StepLog:
    seed: int
    step: int
    truth: Truth
    previous: list[str]  # b(t-1): the belief held before this update
    belief: list[str]  # b(t): the belief held after it
    teacher: list[str]  # the teacher's belief at t
    turns: list[Turn]
    success: float = 0.0  # the episode's R_env, filled after it ends


class Recorder(Consultant):
    """Wraps a consultant and logs every query with its answer by (seed, step, round)."""

    def __init__(self, inner: Consultant) -> None:
        self.inner = inner
        self.needs_expert = inner.needs_expert
        self.log: dict[tuple[int, ...], Turn] = {}

    @property
    def identity(self) -> str:
        return self.inner.identity

    def answer(self, queries: list[Query]) -> list[Answer]:
        answers = self.inner.answer(queries)
        for q, a in zip(queries, answers, strict=True):
            self.log[tuple(q.rng_key)] = Turn(
                q.role, [dict(m) for m in q.messages], q.decoding, tuple(q.actions), a.text,
                (q.expert or [""])[0], getattr(a, "extra", {}),
            )  # fmt: skip
        return answers


class TeacherConsultant(Consultant):
    """The ground truth as a consultant: the update round answered with the teacher's belief
    (prompt=brace's oracle answer), the act round with the expert's action."""

    needs_expert = True

    @property
    def identity(self) -> str:
        return "brace-teacher"

    def answer(self, queries: list[Query]) -> list[Answer]:
        return [Answer(q.render_answer((q.expert or [""])[0], "")) for q in queries]


class RandomTeacherConsultant(TeacherConsultant):
    """The teacher's belief with a uniformly random action: the authors' SFT data adds random
    trajectories to each game's gold one, so the belief model also sees the states a weaker
    policy reaches. Draw `k` of a step is seeded by (k, the query's rng_key): a run repeats."""

    def __init__(self, k: int) -> None:
        self.k = int(k)

    @property
    def identity(self) -> str:
        return f"brace-random-teacher-{self.k}"

    def answer(self, queries: list[Query]) -> list[Answer]:
        out = []
        for q in queries:
            if q.role == BELIEF_ROLE:
                out.append(Answer(q.render_answer((q.expert or [""])[0], "")))
                continue
            rng = np.random.default_rng([self.k, *(int(x) for x in q.rng_key)])
            out.append(Answer(q.render_answer(str(rng.choice(list(q.actions))), "")))
        return out


def teacher_examples(task: Any, prompt: Any, seeds: Sequence[int], random_per_game: int = 0
                     ) -> dict[str, list[Example]]:  # fmt: skip
    """The SFT examples of each role: the gold trajectory of every seed (the teacher's belief,
    the expert's actions) plus `random_per_game` random trajectories of the same seed, whose
    updates (the teacher's belief at the states random actions reach) join the belief role's
    examples; their random actions teach the policy nothing and are left out."""
    _, logs = run(task, prompt, TeacherConsultant(), seeds)
    examples = sft_examples(logs)
    for k in range(int(random_per_game)):
        _, more = run(task, prompt, RandomTeacherConsultant(k), seeds)
        examples["belief"] += sft_examples(more)["belief"]
    return examples


def run(
    task: Any,
    prompt: Any,
    consultant: Consultant,
    seeds: Sequence[int],
    *,
    gate: Any = None,
    policy: Any = None,
    eval_seed: int = 0,
    mc_samples: int = 20,
) -> tuple[list[dict], list[StepLog]]:
    """Run `seeds` through the Evaluator (gate: always unless given), logging every consulted
    step; returns the episode rows and the step logs (each with its episode's R_env)."""
    from benchmark.evaluate import Evaluator
    from benchmark.gates import AlwaysGate

    recorder = Recorder(consultant)
    held: dict[int, list[str]] = {}
    logs: list[StepLog] = []

    def hook(event: Any) -> None:
        d = event.decision
        if d is None:
            return
        ep = event.episode
        key = (ep.seed, ep.steps)
        turns = [recorder.log.pop((*key, r)) for r in (0, 1) if (*key, r) in recorder.log]
        if d.belief is None:  # a prompt without a belief (raw history): the act round only
            if turns:
                logs.append(StepLog(ep.seed, ep.steps, snapshot(ep), [], [], [], turns))
            return
        truth = snapshot(ep)
        previous = held.get(ep.seed, list(INITIAL_BELIEF))
        held[ep.seed] = list(d.belief)
        logs.append(StepLog(ep.seed, ep.steps, truth, previous, list(d.belief),
                            teacher_claims(truth), turns))  # fmt: skip

    evaluator = Evaluator(
        task=task,
        gate=gate if gate is not None else AlwaysGate(),
        policy=policy,
        consultant=recorder,
        prompt=prompt,
        mc_samples=mc_samples,
        seed=int(eval_seed),
    )
    rows = evaluator.run(list(seeds), mode="lockstep", on_step=hook)
    outcome = episode_rewards(rows)
    for s in logs:
        s.success = outcome[s.seed]
    return rows, logs


def rollout_batch(task: Any, prompt: Any, consultant: Consultant, seeds: Sequence[int],
                  group: int, *, gate: Any = None, policy: Any = None
                  ) -> dict[int, list[list[StepLog]]]:  # fmt: skip
    """An RL rollout batch: `seeds` each played `group` times (`run`), the step logs of each
    seed's episodes in play order (seed -> one list of step logs per episode)."""
    groups: dict[int, list[list[StepLog]]] = {s: [] for s in seeds}
    for _ in range(group):
        _, logs = run(task, prompt, consultant, seeds, gate=gate, policy=policy)
        for s in seeds:
            groups[s].append([x for x in logs if x.seed == s])
    return groups


def sft_examples(logs: Sequence[StepLog]) -> dict[str, list[Example]]:
    """The supervised examples of each role from teacher logs: the belief model's updates
    (the teacher's belief) and the policy model's actions (the expert's)."""
    out: dict[str, list[Example]] = {"belief": [], "policy": []}
    for s in logs:
        for t in s.turns:
            role = "belief" if t.role == BELIEF_ROLE else "policy"
            out[role].append(Example(t.messages, t.text, t.decoding, t.actions, s.seed, s.step,
                                     expert=t.expert))  # fmt: skip
    return out


def mean_ci(values: Sequence[float], seed: int = 0) -> dict[str, float]:
    """Mean with its 95% bootstrap CI (benchmark.metrics)."""
    from benchmark.metrics import bootstrap_ci

    low, high = bootstrap_ci(list(values), seed=seed)
    return {"mean": round(float(np.mean(values)), 4) if len(values) else float("nan"),
            "ci95": [round(low, 4), round(high, 4)], "n": len(values)}  # fmt: skip


def belief_states(logs: Sequence[StepLog]) -> list[Any]:
    """The belief updates of `logs` as benchmark.brace.sft.BeliefState (what `measure` and
    `score` read)."""
    from benchmark.brace.sft import BeliefState

    out = []
    for s in logs:
        for t in s.turns:
            if t.role == BELIEF_ROLE:
                out.append(BeliefState(t.messages, t.decoding, t.actions, s.truth, s.previous,
                                       s.teacher, s.seed, s.step, s.success, t.text))  # fmt: skip
    return out
