"""The oracle: answers with the environment's expert action (an upper reference, not an LM).

For a one-shot plan prompt `query.expert` holds several action names; they are passed to
`render_answer` joined by a single space ("FORWARD FORWARD TURN_LEFT"), and the plan prompt's
`render_answer` splits them again."""

from __future__ import annotations

from benchmark.consultants.base import Answer, Consultant, Query
from benchmark.consultants.errors import ConsultantError


class OracleConsultant(Consultant):
    needs_expert = True
    shards_episodes = True  # no model: each worker answers its own episodes
    label = "oracle"
    uses_lm = False  # the expert: no LM calls to count, no decoding
    cacheable = False  # the expert is cheap and its answer is not a function of the messages

    @property
    def identity(self) -> str:
        return "oracle"

    def answer(self, queries: list[Query]) -> list[Answer]:
        out = []
        for q in queries:
            if not q.expert:
                raise ConsultantError(
                    "the oracle consultant got a query without `expert` action names; the prompt "
                    "session must be created with with_expert=True (needs_expert is True)"
                )
            out.append(Answer(q.render_answer(" ".join(q.expert), "oracle")))
        return out
