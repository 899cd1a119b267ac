"""The belief prompt of Agent-BRACE's training: BeliefPrompt whose oracle answer to the update
round is the teacher's belief (benchmark.brace.teacher) instead of `observed_claims`, so the
fine-tuning machinery (benchmark.finetune, which answers each query with `render_answer`) learns
the teacher's certainty labels. Queries, parsing and acting are BeliefPrompt's: one model serves
both roles (belief update, then policy) through two prompts, named by its weights like any
consultant (slm=finetuned prompt=brace). `BraceSummaryPrompt` does the same for the summary
prompt (the Summary-Belief ablation)."""

from __future__ import annotations

from benchmark.brace.teacher import teacher_claims
from benchmark.envs import Episode
from benchmark.envs.truth import snapshot
from benchmark.prompts.belief import BeliefPrompt, BeliefSession
from benchmark.prompts.summary import SummaryPrompt, SummarySession, as_summary
from benchmark.vocabulary import on_scale


class BraceBeliefPrompt(BeliefPrompt):
    def session(self, episode: Episode, with_expert: bool) -> BraceSession:
        return BraceSession(self, episode, with_expert)


class BraceSession(BeliefSession):
    def render_belief(self, action_name: str, reason: str) -> str:
        """The teacher's belief at the current state, on the prompt's certainty scale (the
        binary-label ablation's SFT targets: `vocabulary.binary_label`; the action name is
        ignored)."""
        claims = on_scale(teacher_claims(snapshot(self.episode)), self.v.labels)
        return "<belief_state>\n" + "\n".join(claims) + "\n</belief_state>"


class BraceSummaryPrompt(SummaryPrompt):
    """The summary prompt (prompt=mem1) whose oracle answer to the update round is the teacher's
    belief as sentences, labels dropped: the SFT targets of the Summary-Belief ablation's belief
    model (`brace=summary_belief`). Queries and parsing are SummaryPrompt's, so a cell with
    prompt=mem1 asks the trained model exactly what it trained on."""

    def session(self, episode: Episode, with_expert: bool) -> BraceSummarySession:
        return BraceSummarySession(self, episode, with_expert)


class BraceSummarySession(SummarySession):
    def render_belief(self, action_name: str, reason: str) -> str:
        """The teacher's belief at the current state as a summary (the action name is ignored)."""
        return as_summary(teacher_claims(snapshot(self.episode)))
