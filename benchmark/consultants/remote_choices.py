"""Choice scoring on a vLLM server (slm.decoding.mode=choices with the openai backend; docs/choices.md,
"Through a server"): the same scores as the hf backend (benchmark.consultants.choices), from the
server's log-probabilities.

Each action's continuation is its own tokens and the token the chat template writes after a reply
(benchmark.consultants.turns, through the server's /tokenize), memoized per (model, action set):
/tokenize is called 1 + 2 x actions times for a new action set, then once per query (its prompt).
The score of an action is the sum of its continuation's raw log-probabilities after the prompt, as
in the hf backend; two ways to get them (`slm.backend.choice_logprobs`):

- `token_ids`: one-token requests (/v1/completions, the prompt as token ids, max_tokens 1) with
  vLLM's `logprob_token_ids`, the log-probabilities of given tokens at the generated position
  whatever their rank. The continuations form a tree (actions may share first tokens); one such
  request per inner node, with the node's next tokens: the prompt alone first (it fills vLLM's
  prefix cache), then every deeper node in one batched request that reuses it. vLLM computes these
  log-probabilities before any sampling parameter or `allowed_token_ids` acts (its default
  `--logprobs-mode raw_logprobs`), so they are the model's full-vocabulary distribution, as the hf
  backend's log_softmax; `allowed_token_ids` is not sent: it changes nothing under raw_logprobs
  and would renormalize over the listed tokens under processed_logprobs.
- `prompt_logprobs`: one request with every action's prompt + continuation and `prompt_logprobs`:
  each sequence is prefilled whole (vLLM skips its prefix cache for such requests).

`auto` (the default) takes token_ids and falls back to prompt_logprobs, for the consultant's
lifetime, the first time a server answers without the requested tokens (a vLLM from before
`logprob_token_ids` on its OpenAI routes ignores the field)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from benchmark.consultants.base import Answer, Query
from benchmark.consultants.choices import choice_answer, token_counts
from benchmark.consultants.errors import ConsultantError
from benchmark.consultants.turns import reply_turn, token_after

log = logging.getLogger(__name__)
CHOICE_LOGPROBS = ("auto", "token_ids", "prompt_logprobs")  # slm.backend.choice_logprobs
MAX_TOKEN_IDS = 20  # tokens per request at most (vLLM's default --max-logprobs)
TOKEN_ID = "token_id:"  # how vLLM names a token with return_tokens_as_token_ids


class NotOffered(Exception):
    """The server answered a token_ids request without the requested tokens' log-probabilities."""


class RemoteChoiceScoring:
    """Choice scoring for OpenAIConsultant (a mixin); the host sets `model`, `choice_logprobs`
    and provides `_post(endpoint, body)` and `sampling_keys(decoding)`."""

    def _init_choices(self, choice_logprobs: str) -> None:
        if choice_logprobs not in CHOICE_LOGPROBS:
            raise ConsultantError(
                f"slm.backend.choice_logprobs={choice_logprobs!r} is invalid: allowed "
                f"{', '.join(CHOICE_LOGPROBS)}"
            )
        self.choice_logprobs = choice_logprobs
        self._conts: dict[tuple, list[list[int]]] = {}
        self._conts_lock = threading.Lock()

    def _tokenize(self, **body: Any) -> list[int]:
        data = self._post("/tokenize", {"model": self.model, **body})  # type: ignore[attr-defined]
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list):
            raise ConsultantError(f"/tokenize returned no token list: {str(data)[:200]}")
        return [int(t) for t in tokens]

    def continuations(self, actions: tuple[str, ...]) -> list[list[int]]:
        """Each action's tokens and the end of the reply after them (module docstring)."""
        key = (self.model, tuple(actions))  # type: ignore[attr-defined]
        with self._conts_lock:  # concurrent queries of one batch tokenize an action set once
            if key not in self._conts:
                conts = []
                for a in actions:
                    own = self._tokenize(prompt=a, add_special_tokens=False)
                    rendered = self._tokenize(
                        messages=reply_turn(a),
                        add_generation_prompt=False,
                        chat_template_kwargs={"enable_thinking": False},
                    )
                    end = token_after(rendered, own)
                    if end is None:
                        raise ConsultantError(
                            f"slm.decoding.mode=choices: the chat template of "
                            f"{self.model!r} does not write the reply {a!r} as its own "  # type: ignore[attr-defined]
                            "tokens; use mode=generate"
                        )
                    conts.append([*own, end])
                self._conts[key] = conts
            return [list(c) for c in self._conts[key]]

    def choice_sequences(self, q: Query) -> tuple[list[int], list[list[int]]]:
        """The templated prompt's token ids and each action's continuation."""
        prompt = self._tokenize(
            messages=q.messages,
            add_generation_prompt=True,
            chat_template_kwargs={"enable_thinking": q.decoding.enable_thinking},
        )
        return prompt, self.continuations(q.actions)

    def _scored(self, q: Query) -> Answer:
        """One choice-scored query (module docstring)."""
        prompt, conts = self.choice_sequences(q)
        logp = None
        if self.choice_logprobs != "prompt_logprobs":
            try:
                logp = self._by_token_ids(q, prompt, conts)
            except NotOffered as exc:
                if self.choice_logprobs == "token_ids":
                    raise ConsultantError(
                        f"slm.backend.choice_logprobs=token_ids: {exc}; this server does not "
                        "offer logprob_token_ids (a recent vLLM does): set "
                        "slm.backend.choice_logprobs=prompt_logprobs or auto"
                    ) from exc
                log.warning("%s; choice scoring falls back to prompt_logprobs", exc)
                self.choice_logprobs = "prompt_logprobs"
        if logp is None:
            logp = self._by_prompt_logprobs(q, prompt, conts)
        return choice_answer(q.actions, logp, len(prompt), tokens=token_counts(q.decoding, conts))

    def _one_token_body(self, q: Query, prompts: list[list[int]], ids: list[int]) -> dict:
        return {
            "model": self.model,  # type: ignore[attr-defined]
            "prompt": prompts,
            **self.sampling_keys(q.decoding),  # type: ignore[attr-defined]
            "max_tokens": 1,
            "logprobs": len(ids),
            "logprob_token_ids": ids,
            "return_tokens_as_token_ids": True,
        }

    def _by_token_ids(self, q: Query, prompt: list[int], conts: list[list[int]]) -> list[float]:
        """Sum over each continuation of its tokens' log-probabilities, from one-token requests
        at the continuations' tree nodes: the root first, then the deeper ones batched."""
        nodes: dict[tuple[int, ...], list[int]] = {}  # a prefix -> the tokens that follow it
        for c in conts:
            for t in range(len(c)):
                following = nodes.setdefault(tuple(c[:t]), [])
                if c[t] not in following:
                    following.append(c[t])
        deeper = [n for n in nodes if n]
        requests = [[()]]
        for n in deeper:  # batches of at most MAX_TOKEN_IDS requested tokens
            batch = requests[-1] if len(requests) > 1 else None
            if batch is not None and len(_union(nodes, [*batch, n])) <= MAX_TOKEN_IDS:
                batch.append(n)
            else:
                requests.append([n])
        got: dict[tuple[int, ...], dict[int, float]] = {}
        for batch in requests:
            ids = _union(nodes, batch)
            body = self._one_token_body(q, [prompt + list(n) for n in batch], ids)
            data = self._post("/completions", body)  # type: ignore[attr-defined]
            for n, row in zip(batch, _token_logprobs(data, len(batch)), strict=True):
                missing = [t for t in nodes[n] if t not in row]
                if missing:
                    raise NotOffered(
                        f"/v1/completions answered logprob_token_ids={ids} without tokens {missing}"
                    )
                got[n] = row
        return [sum(got[tuple(c[:t])][c[t]] for t in range(len(c))) for c in conts]

    def _by_prompt_logprobs(
        self, q: Query, prompt: list[int], conts: list[list[int]]
    ) -> list[float]:
        body = {
            "model": self.model,  # type: ignore[attr-defined]
            "prompt": [prompt + c for c in conts],
            **self.sampling_keys(q.decoding),  # type: ignore[attr-defined]
            "max_tokens": 1,
            "prompt_logprobs": 0,
        }
        data = self._post("/completions", body)  # type: ignore[attr-defined]
        logp = [0.0] * len(conts)
        try:
            for choice in data["choices"]:
                k = int(choice.get("index", 0))
                rows = choice["prompt_logprobs"]
                for t, token in enumerate(conts[k]):
                    logp[k] += float(rows[len(prompt) + t][str(token)]["logprob"])
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ConsultantError(
                f"/v1/completions returned no prompt_logprobs for the choices "
                f"({type(exc).__name__}: {exc}); the server does not support prompt "
                "log-probabilities (vLLM does): set slm.backend.prompt_logprobs=false and "
                "slm.decoding.mode=generate"
            ) from exc
        return logp


def _union(nodes: dict[tuple[int, ...], list[int]], batch: list[tuple[int, ...]]) -> list[int]:
    out: list[int] = []
    for n in batch:
        out.extend(t for t in nodes[n] if t not in out)
    return out


def _token_logprobs(data: Any, n: int) -> list[dict[int, float]]:
    """Per prompt of a one-token completions reply: token id -> log-probability at the generated
    position (vLLM's `logprobs.top_logprobs[0]`, keys `token_id:<id>`); NotOffered when the reply
    has none or names tokens otherwise."""
    rows: list[dict[int, float]] = [{} for _ in range(n)]
    try:
        for choice in data["choices"]:
            top = (choice.get("logprobs") or {}).get("top_logprobs") or [{}]
            row = rows[int(choice.get("index", 0))]
            for key, value in (top[0] or {}).items():
                if not str(key).startswith(TOKEN_ID):
                    raise NotOffered(f"/v1/completions named a token {key!r}, not by its id")
                row[int(str(key)[len(TOKEN_ID) :])] = float(value)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise NotOffered(
            f"/v1/completions returned no logprobs ({type(exc).__name__}: {exc})"
        ) from exc
    return rows
