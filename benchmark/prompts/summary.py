"""Summary-belief prompting (MEM1-style, Agent-BRACE's summary-belief baseline): the consultant
keeps a free-text summary of the past instead of claims with certainty labels. Every
consultation has the belief prompt's two rounds: the update rewrites the summary from (task,
previous summary, observations since, current view) inside <summary> tags; the act round
decides from (task, summary, current view). No claims, so nothing is scored against the true
state; the context stays near-constant as the belief prompt's does."""

from __future__ import annotations

import re

from benchmark.prompts.belief import BeliefPrompt, BeliefSession, observations_since
from benchmark.vocabulary import strip_thinking

SUMMARY_BLOCK = re.compile(r"<summary>(.*?)(?:</summary>|$)", re.IGNORECASE | re.DOTALL)
INITIAL_SUMMARY = ["nothing has happened yet"]
MAX_CHARS = 1200  # a longer summary is cut (the context stays bounded)


def as_summary(claims: list[str]) -> str:
    """A summary answer stating `claims` ('- <claim> [<label>]' lines) as plain sentences, the
    labels dropped: the oracle's update, and the teacher's for a trained summary belief."""
    sentences = [re.sub(r"\s*\[[^\]]*\]\s*$", "", c.lstrip("- ")) for c in claims]
    return "<summary>\n" + "\n".join(sentences) + "\n</summary>"


def parse_summary(text: str | None) -> list[str]:
    """The summary's lines inside <summary> tags ([] when there is none or it is empty)."""
    if not text:
        return []
    m = SUMMARY_BLOCK.search(strip_thinking(text)[0])
    body = (m.group(1) if m else "").strip()[:MAX_CHARS]
    return [line.strip() for line in body.splitlines() if line.strip()]


class SummaryPrompt(BeliefPrompt):
    """Two rounds, as the belief prompt, with a free-text summary for the belief."""

    def session(self, episode, with_expert: bool) -> SummarySession:
        return SummarySession(self, episode, with_expert)


class SummarySession(BeliefSession):
    header = "SUMMARY"
    header_meaning = "what has happened so far"

    def __init__(self, variant: SummaryPrompt, episode, with_expert: bool):
        super().__init__(variant, episode, with_expert)
        self.belief = list(INITIAL_SUMMARY)

    def update_messages(self) -> list[dict[str, str]]:
        system = (
            "You keep the memory of an agent acting under partial observability: a short "
            "summary of everything that matters from the episode so far, rewritten at every "
            "step so that the past can be forgotten.\n\n"
            "FORMAT: plain sentences inside <summary> ... </summary>, at most "
            f"{MAX_CHARS} characters."
        )
        user = "\n\n".join(
            [
                self.task_text(),
                "PREVIOUS SUMMARY:\n" + "\n".join(self.belief),
                "NEW OBSERVATIONS:\n" + observations_since(self.episode, self.last_step),
                "CURRENT VIEW:\n" + self.current_view(None),
                "Write the updated summary now.",
            ]
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def parse_update(self, text: str | None) -> list[str]:
        return parse_summary(text)

    def held_claims(self) -> list[str] | None:
        return None  # a summary has no claims to verify

    def render_belief(self, action_name: str, reason: str) -> str:
        """The oracle's summary: the observed facts as sentences."""
        return as_summary(super().render_belief(action_name, reason).splitlines()[1:-1])
