"""The supervised data of a fine-tuning: (chat messages exactly as the evaluator sends them, the
expert's answer in the prompt variant's output format), from the states a PPO policy visits.

Rollouts run through the one Evaluator (benchmark.evaluate), PPO acting alone, on TRAINING
seeds only (>= benchmark.seeds.TRAIN_SEED_MIN, drawn from `training_seeds`; a seed of a
validation or test split is refused). At every recorded step the hook gives the episode, still in
the state the action is taken in, to the prompt variant: `session(episode, with_expert=True)` and
`consult(ppo_action)` yield the very queries a cell would send (with the PPO suggestion shown, as
in ASK; `consult(None)` for the SLM-only format, no suggestion), and each query is answered by the
expert (BFS on the true grid, card counting) through `Query.render_answer`, with a short templated
reason when the variant asks for one (`prompt.rationale`). With `tau` set, only the steps the
entropy gate would send at that tau are recorded (the others are still played by PPO).

Held-out states (validation seeds, for measuring a fine-tuned model, never for training) come from
the same builder with `split_ok=True`: each example then keeps its consultation generator,
suspended at its query, so the model's answer is parsed exactly as the evaluator parses it."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from benchmark.consultants import Answer, Decoding
from benchmark.envs import Episode, Task, family_of
from benchmark.seeds import Splits, check_training_seeds

# `autopilot` modes: "ppo" = the ASK format (PPO's action shown as the autopilot suggestion),
# "none" = the SLM-only format (no suggestion), both from the same visited state
AUTOPILOT_MODES = ("ppo", "none")


@dataclass
class Example:
    """One supervised example: the messages a cell sends and the expert's answer to them."""

    messages: list[dict[str, str]]
    answer: str  # the target text, in the variant's output format
    decoding: Decoding  # the query's decoding (thinking mode decides the chat template's tail)
    actions: tuple[str, ...]
    seed: int
    step: int
    # the labels held-out measurement scores against; a target that is not an action (a belief
    # update of Agent-BRACE) leaves them empty
    expert: str = ""  # the expert's action name (the label)
    optimal: tuple[str, ...] = ()  # every optimal action name (the expert's set; () when unknown)
    ppo: str | None = None  # PPO's action name (None: SLM-only format)
    # held-out examples only: the consultation, suspended at its query (parse an answer with it)
    pending: Generator | None = field(default=None, repr=False)

    def record(self) -> dict[str, Any]:
        """A JSON line of the dataset file."""
        return {
            "seed": self.seed,
            "step": self.step,
            "messages": self.messages,
            "answer": self.answer,
            "expert": self.expert,
            "optimal": list(self.optimal),
            "ppo": self.ppo,
            "enable_thinking": self.decoding.enable_thinking,
        }


def state_key(episode: Episode) -> str:
    """What makes two steps of an episode the same state: the simulator's view with the step
    counter left out (a grid: position, facing, what is carried and seen; a card game: the
    decision index makes every step new)."""
    view = episode.view()
    if dataclasses.is_dataclass(view) and any(f.name == "step" for f in dataclasses.fields(view)):
        view = dataclasses.replace(view, step=0)
    return repr(view)


def reason(episode: Episode, action: str) -> str:
    """The templated reason line of the rationale format: what the expert's choice rests on,
    in a few words from the simulator's view."""
    return family_of(episode).reason(episode, action)


def collect(
    task: Task,
    prompt: Any,
    policy: Any,
    seeds: list[int],
    *,
    splits: Splits,
    tau: float | None = None,
    mc_samples: int = 20,
    autopilot: tuple[str, ...] = AUTOPILOT_MODES,
    unique: bool = True,
    eval_seed: int = 0,
    split_ok: bool = False,
) -> list[Example]:
    """Roll PPO out on `seeds` and label the recorded steps. `unique`: record a state once per
    episode, at its first visit (`state_key`; a policy stuck in a loop repeats the same few states
    up to the step limit). Training data (`split_ok=False`,
    the default) refuses any seed of a split; held-out data (`split_ok=True`) keeps each
    example's consultation suspended for `parse`."""
    from benchmark.evaluate import Evaluator
    from benchmark.gates import EntropyGate, NeverGate

    if not split_ok:
        check_training_seeds(seeds, splits)
    unknown = sorted(set(autopilot) - set(AUTOPILOT_MODES))
    if unknown or not autopilot:
        raise ValueError(f"autopilot modes {list(autopilot)}: allowed {list(AUTOPILOT_MODES)}")
    gate = NeverGate() if tau is None else EntropyGate(float(tau))
    evaluator = Evaluator(
        task=task, gate=gate, policy=policy, mc_samples=int(mc_samples), seed=int(eval_seed)
    )
    sessions: dict[tuple[int, str], Any] = {}
    seen: set[tuple[int, int | None, str]] = set()
    examples: list[Example] = []

    def hook(event: Any) -> None:
        if tau is not None and event.uncertainty[0] < float(tau):
            return
        ep = event.episode
        if unique:
            key = (ep.seed, event.ppo_action, state_key(ep))
            if key in seen:
                return
            seen.add(key)
        names = ep.action_names
        optimal = getattr(ep, "optimal_actions", None)
        best = tuple(names[i] for i in sorted(optimal())) if optimal else ()
        for mode in autopilot:
            session = sessions.get((ep.seed, mode))
            if session is None:
                session = sessions[(ep.seed, mode)] = prompt.session(ep, True)
            ppo = event.ppo_action if mode == "ppo" else None
            examples.extend(
                _label(
                    session.consult(ppo), ep, best, None if ppo is None else names[ppo], split_ok
                )
            )

    evaluator.run(list(seeds), mode="lockstep", on_step=hook)
    return examples


def _label(
    gen: Generator, ep: Episode, optimal: tuple[str, ...], ppo: str | None, keep: bool
) -> list[Example]:
    """Drive one consultation with the expert's answers; one example per query. `keep`: stop at
    the first round and keep the generator suspended there (held-out single-round examples)."""
    out: list[Example] = []
    queries = next(gen)
    for round_no in itertools.count():
        answers = []
        for q in queries:
            if not q.expert:
                raise ValueError(
                    "the prompt session gave a query without the expert's action: fine-tuning "
                    "needs a variant that fills Query.expert when with_expert=True"
                )
            text = q.render_answer(" ".join(q.expert), reason(ep, q.expert[0]))
            answers.append(Answer(text))
            out.append(
                Example(
                    messages=[dict(m) for m in q.messages],
                    answer=text,
                    decoding=q.decoding,
                    actions=tuple(q.actions),
                    expert=q.expert[0],
                    optimal=optimal,
                    ppo=ppo,
                    seed=ep.seed,
                    step=ep.steps,
                    pending=gen if keep and round_no == 0 and len(queries) == 1 else None,
                )
            )
        if keep:
            return out[:1] if out[0].pending is not None else []
        try:
            queries = gen.send(answers)
        except StopIteration:
            return out
    return out


class MultiRoundConsultation(ValueError):
    """The consultation asks another round after the first answer (e.g. prompt=brace: the
    belief update, then the act): one answer does not decide its action."""


def parse(example: Example, text: str) -> int | None:
    """The action a held-out example's consultation decides on `text` (None: invalid), parsed
    by the prompt session itself, exactly as in an evaluation. Consumes the suspended session.
    Raises MultiRoundConsultation when the session asks a second round instead of deciding."""
    if example.pending is None:
        raise ValueError("only held-out examples (collect(..., split_ok=True)) can be parsed")
    try:
        example.pending.send([Answer(text)])
    except StopIteration as stop:
        return stop.value.action
    finally:
        example.pending = None
    raise MultiRoundConsultation(
        f"seed {example.seed} step {example.step}: the consultation asks a second round"
    )
