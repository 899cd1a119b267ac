"""Feedback-paper prompt strategies for MiniGrid (feedback-induced decline paper, appendix A).

The human-written base prompt (HWBP: role as an MDP policy, the environment description, the
whole grid as symbols, the available actions) extended by chain-of-thought instructions (CoT),
dynamics feedback (DF: the previous action with the previous and current state), reward
feedback (RF: the last reward), cumulative reward feedback (CRF: steps and total reward) and
policy feedback (PF: the model's own policy summary from its previous answer). PF can carry over
to the next episode (pf_across_episodes: episodes then run one after another in seed order).
HWBP_COMPLETE asks once for the whole action sequence and then executes it open loop.

Answers are JSON: {"action": "Move Forward", "reason": ...} (+ "policy" with PF); the plan
prompt answers {"actions": [...], "reason": ...}. The paper's plan prompt has no output
requirement; we add one so plans parse.

Open-loop plan (complete): the first consultation queries; if the plan does not parse, the
decision is invalid and the next consultation asks again. Later consultations return the next
planned action without a call (Decision.queried=False). When the plan runs out, the session
repeats DONE (a no-op in MiniGrid), or TURN_LEFT where DONE is not a valid action: either way
the agent stays where it is and the episode ends at its step limit."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from benchmark.consultants.base import Decoding, Query, sampling_fields
from benchmark.envs.base import Episode
from benchmark.prompts.base import Consultation, Decision, PromptSession, PromptVariant
from benchmark.prompts.parse import json_field, parse_action, parse_plan, parse_reason

DISPLAY = {
    "TURN_LEFT": "Turn Left",
    "TURN_RIGHT": "Turn Right",
    "FORWARD": "Move Forward",
    "PICKUP": "Pick Up",
    "DROP": "Drop",
    "TOGGLE": "Toggle",
    "DONE": "Done",
}


class FeedbackPrompt(PromptVariant):
    """One feedback-paper strategy, selected by its flags."""

    parts = ("feedback",)

    def __init__(
        self,
        name: str,
        cot: bool = False,
        df: bool = False,
        rf: bool = False,
        crf: bool = False,
        pf: bool = False,
        across_episodes: bool = False,
        complete: bool = False,
        rationale: bool = False,
        thinking_budget: int = 10,
        max_new_tokens: int = 128,
        map_radius: int = 5,  # unused: the feedback prompts show the whole grid
        sampling: Mapping[str, Any] | None = None,  # slm.decoding (temperature, top_p, top_k, seed)
    ):
        if across_episodes and not pf:
            raise ValueError(
                f"{name}: across_episodes carries the policy summary; it needs pf=True"
            )
        if complete and (df or rf or crf or pf or cot):
            raise ValueError(f"{name}: complete (one-shot plan) takes no feedback or CoT flags")
        self.name = name
        self.cot, self.df, self.rf, self.crf, self.pf = cot, df, rf, crf, pf
        self.across_episodes = bool(across_episodes)
        self.sequential_episodes = self.across_episodes
        self.complete = bool(complete)
        self.rationale = bool(rationale)
        self.decoding = Decoding(
            max_new_tokens=int(max_new_tokens),
            enable_thinking=self.rationale,
            thinking_budget=int(thinking_budget) if self.rationale else 0,
            **sampling_fields(sampling),
        )
        # PF across episodes: the last summary of the previous episode
        self.carried_policy: str | None = None

    def session(self, episode: Episode, with_expert: bool) -> FeedbackSession:
        return FeedbackSession(self, episode, with_expert)


class FeedbackSession(PromptSession):
    v: FeedbackPrompt

    def __init__(self, variant: FeedbackPrompt, episode: Episode, with_expert: bool):
        super().__init__(variant, episode, with_expert)
        self.env = self.family.feedback  # the family's environment text
        self.policy_summary = variant.carried_policy if variant.across_episodes else None
        self.prev: tuple[str, int] | None = None  # (grid text, step) at the previous consult
        self.plan: list[str] | None = None
        self.plan_index = 0

    # -- prompt ---------------------------------------------------------------------------------

    def env_title(self) -> str:
        return self.env.title(self.task)

    def feedback_blocks(self, grid: str) -> list[str]:
        ep, mem, v = self.episode, self.episode.memory, self.v
        out = []
        if v.df:
            if self.prev is None or not mem.actions:
                out.append(
                    "Dynamics Feedback:\nNo action has been taken yet: this is the first step."
                )
            else:
                prev_grid, prev_step = self.prev
                taken = [DISPLAY.get(a, a) for a in mem.actions[prev_step:]] or ["(none)"]
                what = (
                    f"The last action you took was {taken[0]}"
                    if len(taken) == 1
                    else f"The actions taken since your last decision were {', '.join(taken)}"
                )
                out.append(
                    f"Dynamics Feedback:\n{what}, which changed the environment state from\n"
                    f"{prev_grid}\nto\n{grid}"
                )
        if v.rf:
            r = mem.rewards[-1] if mem.rewards else 0.0
            out.append(
                f"Reward Feedback:\nThe agent received a reward of {r:g} for the last action."
            )
        if v.crf:
            out.append(
                f"Cumulative Reward Feedback:\nSo far the agent has taken {ep.steps} steps and "
                f"accumulated a total reward of {ep.total_reward:g}."
            )
        if v.pf:
            summary = self.policy_summary or "(no summary yet: this is your first decision)"
            out.append(f"Policy Feedback:\nThe previous policy is summarized as:\n{summary}")
        return out

    def instructions(self) -> str:
        if self.v.cot:
            return (
                "Chain-of-Thought (CoT) Instructions:\n"
                "1. Analyze the current situation:\n"
                "  - Work out the agent's position and facing.\n"
                "  - Identify any obstacles or challenges immediately around the agent.\n"
                "2. Decide on the best action:\n"
                "  - Consider how each action would change the agent and the environment.\n"
                "  - Choose the action that best serves the task.\n"
                "  - Consider whether taking a risk now may pay off in long-term reward."
            )
        if self.v.complete:
            return (
                "Instructions:\n1. Analyze the current situation.\n"
                "2. Decide on the full sequence of actions that reaches the goal."
            )
        return (
            "Instructions:\n1. Analyze the current situation.\n"
            "2. Decide on the best action to progress toward the goal."
        )

    def output_requirement(self) -> str:
        if self.v.complete:
            return (
                "Output Requirement: provide ONLY a JSON object (NOT LaTeX) with the fields:\n"
                '- "actions": the complete list of actions, in order, from the current state to '
                'the goal (e.g. ["Turn Right", "Move Forward", "Move Forward"]).\n'
                '- "reason": a brief explanation of the plan.'
            )
        lines = [
            "Output Requirement: provide the selected action in ONLY JSON format (NOT LaTeX) "
            "with the fields:",
            '- "action": the chosen action as a string (e.g. "Move Forward").',
            '- "reason": a brief explanation of why this action is the best choice.',
        ]
        if self.v.pf:
            lines.append('- "policy": a summary of the policy behind your action choices.')
        return "\n".join(lines)

    def messages(self) -> list[dict[str, str]]:
        view = self.episode.view()
        grid = self.env.observation(view)
        title = self.env_title()
        system = (
            f"{title} Environment Instructions:\n"
            "You act as the policy of a Markov Decision Process (MDP): you are given a state and "
            f"produce an action to execute. Your goal is to maximize reward in the {title} "
            "environment."
        )
        description = self.env.description(view, grid, self.episode.action_names, DISPLAY)
        parts = [description, *self.feedback_blocks(grid)]
        parts += [self.instructions(), self.output_requirement()]
        self.prev = (grid, self.episode.steps)
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    # -- answers --------------------------------------------------------------------------------

    def render_answer(self, action_name: str, reason: str) -> str:
        display = DISPLAY.get(action_name, action_name)
        answer = {"action": display, "reason": reason}
        if self.v.pf:
            answer["policy"] = (
                f"Head for the goal G along the shortest free path; last choice {display} ({reason})."
            )
        return json.dumps(answer)

    def render_plan(self, action_names: str, reason: str) -> str:
        """The plan answer; the oracle passes the plan as space-separated action names."""
        names = [n for n in re.split(r"[\s,]+", action_names) if n in self.episode.action_names]
        names = names or [action_names]
        return json.dumps({"actions": [DISPLAY.get(n, n) for n in names], "reason": reason})

    def consult(self, ppo_action: int | None) -> Consultation:
        ep = self.episode
        actions = tuple(ep.action_names)
        if self.v.complete and self.plan is not None:
            return self._follow_plan(actions)
        if self.v.complete:
            expert = None
            if self.with_expert:
                expert = [actions[i] for i in ep.expert_plan()] or [actions[ep.expert_action()]]
            query = Query(self.messages(), actions, self.render_plan, self.v.decoding, expert,
                          (ep.seed, ep.steps, 0))  # fmt: skip
            answers = yield [query]
            plan = parse_plan(answers[0].text, actions)
            if plan is None:
                return Decision(None, list(answers), reason="unparseable plan")
            self.plan, self.plan_index = plan, 1
            return Decision(actions.index(plan[0]), list(answers), parse_reason(answers[0].text))
        expert = [actions[ep.expert_action()]] if self.with_expert else None
        query = Query(self.messages(), actions, self.render_answer, self.v.decoding, expert,
                      (ep.seed, ep.steps, 0))  # fmt: skip
        answers = yield [query]
        text = answers[0].text
        if self.v.pf:
            summary = json_field(text, "policy")
            if summary:
                self.policy_summary = summary.strip()
                if self.v.across_episodes:
                    self.v.carried_policy = self.policy_summary
        name = parse_action(text, actions)
        return Decision(
            None if name is None else actions.index(name), list(answers), parse_reason(text)
        )

    def _follow_plan(self, actions: tuple[str, ...]) -> Decision:
        assert self.plan is not None
        if self.plan_index < len(self.plan):
            name = self.plan[self.plan_index]
            self.plan_index += 1
            return Decision(
                actions.index(name),
                [],
                f"plan step {self.plan_index}/{len(self.plan)}",
                queried=False,
            )
        idle = "DONE" if "DONE" in actions else "TURN_LEFT"
        return Decision(actions.index(idle), [], "plan exhausted", queried=False)
