"""Any OpenAI-compatible chat completions server (vLLM, Ollama, `transformers serve`, a
hosted API), over plain httpx: no `openai` package needed.

The API key is read once, at construction, from the environment variable named by `api_key_env`;
it is never stored in the config, logged or shown by repr. The server is probed (GET /models) at
construction so a wrong URL fails at start-up, not after training.

One server for a whole sweep (docs/cluster.md, "One engine for a sweep"): the cells of a sweep may
start before the server is up, so with `wait_timeout` > 0 the probe is repeated (every second)
until the server lists its models or the timeout passes, then fails naming the URL, the timeout
and the last error. With `url_file` the base URL is read from that file (written by
`python -m benchmark.serve` once the server is healthy, wherever SLURM placed it); a missing or
empty file counts as "not up yet". The file is read at start-up only: a cell keeps the server it
found. 401/403 and a reply that is not a model list fail at once: waiting would not fix them.

A batch's queries run concurrently in a thread pool; each request retries with exponential
backoff (shared helper, benchmark.consultants.retry) and a request that keeps failing raises
ConsultantError with the URL and the cause.

Faulty replies (HTTP 200 that is not an answer) are failures, retried like a 5xx and then raised
as ConsultantError naming the URL, so a cell never completes on a broken server's replies and
nothing of them reaches the response cache:
- a body that is not JSON, or JSON without `choices[0].message`;
- no content: `content` null, empty or whitespace only (or only a thinking block), unless the
  reply was cut by max_tokens.
One case is not a fault but the model's own outcome: `finish_reason: "length"` with no answer
text left (the token budget ran out, typically inside a thinking block). Greedy decoding would
give the same again, so it is not retried; it comes back as an empty answer (the parser counts it
invalid, as the local backend's would be) marked `complete=False`, which the response cache never
stores: the query is asked again in the next run.

Thinking: `chat_template_kwargs: {enable_thinking: ...}` is sent in the body (vLLM, SGLang and
`transformers serve` honour it). A remote server cannot be stopped mid-thought, so the thinking
budget is approximate here: max_tokens = max_new_tokens + thinking_budget when thinking is on,
and any thinking left in the content is stripped.

Sampling (`slm.decoding`, Decoding.temperature > 0): the request carries `temperature`, `top_p`
(when < 1), `top_k` (when > 0; not an OpenAI field: vLLM and SGLang read it, a server that does
not know it may ignore or refuse it, so set top_k 0 there) and `seed`: the query's own seed
(benchmark.consultants.base.query_seed, from the decoding seed, rng_key and messages), mod 2^31.
The same query thus sends the same seed in lockstep and sequential evaluation; whether the answer
is then the same is the server's affair (vLLM seeds a generator per request). Greedy requests are
unchanged: `temperature: 0` and no other sampling field.

Choice scoring (`slm.decoding.mode=choices`, docs/protocol.md "Choice scoring"): needs a server
that returns prompt log-probabilities, declared with `slm.backend.prompt_logprobs: true` (vLLM:
its /tokenize endpoint applies the chat template, /v1/completions takes token ids and returns
`prompt_logprobs`); without it the config is refused at validation. A choice-scored query costs
one /tokenize of the prompt, two per action (the action alone, and the chat with the action as
the assistant's reply: the token after the action there is the end of the turn) and one /v1/completions request
with every action's sequence (max_tokens 1); the answer is the action whose continuation is most
likely, with every action's probability in `Answer.choices`, as in the hf backend."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmark.consultants.base import Answer, Consultant, Query, query_seed, scores_choices
from benchmark.consultants.errors import ConsultantError
from benchmark.consultants.hf import strip_thinking
from benchmark.consultants.retry import Retryable, with_retries
from benchmark.vocabulary import released_answer

CHOICES_NO_PENALTY = (
    "slm.decoding.mode=choices with the openai backend scores the server's prompt "
    "log-probabilities, which no repetition penalty acts on; set "
    "slm.decoding.repetition_penalty=1.0 or slm.decoding.mode=generate"
)
CHOICES_NEED_LOGPROBS = (
    "slm.decoding.mode=choices needs prompt log-probabilities from the server: set "
    "slm.backend.prompt_logprobs=true for a vLLM server (its /tokenize and /v1/completions "
    "prompt_logprobs), or use slm.decoding.mode=generate with this server"
)

# httpx logs every request at INFO: thousands of lines per cell in a job's log. Failures still
# show (retry warnings, ConsultantError).
logging.getLogger("httpx").setLevel(logging.WARNING)
PROBE_TIMEOUT = 10.0  # seconds one start-up probe may take (less when wait_timeout ends sooner)


class OpenAIConsultant(Consultant):
    """Chat completions at `base_url` (e.g. http://127.0.0.1:8000/v1)."""

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key_env: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        concurrency: int = 8,
        extra_body: dict[str, Any] | None = None,
        identity: str | None = None,
        wait_timeout: float = 0.0,
        url_file: str | None = None,
        prompt_logprobs: bool = False,
    ) -> None:
        """`prompt_logprobs`: the server returns prompt log-probabilities (vLLM), so
        slm.decoding.mode=choices can score the actions (module docstring)."""
        import httpx

        if concurrency < 1:
            raise ConsultantError(f"slm.backend.concurrency={concurrency} must be >= 1")
        if base_url is None and url_file is None:
            raise ConsultantError("slm.backend: set base_url or url_file (the server's address)")
        # with url_file, base_url is what the file says (read while waiting), not the config's
        self.base_url = None if base_url is None or url_file else str(base_url).rstrip("/")
        self.url_file = url_file
        self.wait_timeout = float(wait_timeout)
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.concurrency = int(concurrency)
        self.extra_body = dict(extra_body or {})
        if not isinstance(prompt_logprobs, bool):
            raise ConsultantError(
                f"slm.backend.prompt_logprobs={prompt_logprobs!r} must be true or false"
            )
        self.prompt_logprobs = prompt_logprobs
        headers = {}
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise ConsultantError(
                    f"slm.backend.api_key_env={api_key_env!r}: environment variable "
                    f"{api_key_env} is not set (or empty); export it, or set "
                    "slm.backend.api_key_env=null for a server without authentication"
                )
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(
            timeout=timeout,
            headers=headers,
            limits=httpx.Limits(max_connections=self.concurrency),
            trust_env=False,  # a local server must not be routed through an HTTP(S)_PROXY
        )
        models = self._wait_healthy()
        if model is None:
            if not models:
                raise ConsultantError(
                    f"{self.base_url}/models lists no model; set slm.backend.model"
                )
            model = models[0]
        self.model = model
        # with url_file the address changes with every server job; the file names the deployment
        self._identity = identity or f"openai:{model}@{url_file or self.base_url}"

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIConsultant(base_url={self.base_url!r}, model={self.model!r})"

    @property
    def identity(self) -> str:
        return self._identity

    def _wait_healthy(self) -> list[str]:
        """Probe until the server lists its models, for at most `wait_timeout` seconds (one
        probe when 0); sets base_url from `url_file` when given. No probe outlasts the deadline:
        against a server that accepts and never answers, the wait ends on time."""
        deadline = time.monotonic() + self.wait_timeout
        while True:
            probe_timeout = min(self.timeout, PROBE_TIMEOUT)
            if self.wait_timeout > 0:
                probe_timeout = min(probe_timeout, max(deadline - time.monotonic(), 0.1))
            try:
                if self.url_file is not None:
                    self.base_url = read_url_file(self.url_file)
                return self._probe(probe_timeout)
            except Retryable as exc:
                last = str(exc)
            if time.monotonic() >= deadline:
                break
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        where = self.base_url or "(no URL yet)"
        if self.url_file is not None:
            where += f" from url_file {self.url_file}"
        if self.wait_timeout <= 0:
            raise ConsultantError(
                f"OpenAI-compatible server {last}; start it first, fix slm.backend.base_url (it "
                "should end in /v1) or url_file, or set slm.backend.wait_timeout to wait for it"
            )
        raise ConsultantError(
            f"OpenAI-compatible server at {where} not healthy after "
            f"slm.backend.wait_timeout={self.wait_timeout:g} s (last: {last}); start it "
            "(python -m benchmark.serve), check its log, or raise the timeout"
        )

    def _probe(self, timeout: float) -> list[str]:
        """GET /models once: the model ids, Retryable while the server is not (yet) up."""
        import httpx

        url = f"{self.base_url}/models"
        try:
            r = self._client.get(url, timeout=timeout)
        except httpx.HTTPError as exc:
            raise Retryable(f"unreachable at {url} ({type(exc).__name__}: {exc})") from exc
        if r.status_code in (401, 403):
            raise ConsultantError(f"{url} refused the API key (HTTP {r.status_code})")
        if r.status_code != 200:
            raise Retryable(f"at {url} answered HTTP {r.status_code}: {r.text[:200]}")
        try:
            return [m["id"] for m in r.json().get("data", [])]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConsultantError(f"{url} did not return an OpenAI model list: {exc}") from exc

    def _body(self, q: Query) -> dict[str, Any]:
        d = q.decoding
        max_tokens = d.max_new_tokens + (d.thinking_budget if d.enable_thinking else 0)
        body: dict[str, Any] = {
            "model": self.model,
            "messages": q.messages,
            "max_tokens": max_tokens,
            "temperature": d.temperature,
        }
        if d.repetition_penalty != 1.0:  # vLLM's sampling parameter; off requests stay as before
            body["repetition_penalty"] = d.repetition_penalty
        if d.sampling:  # greedy requests stay exactly as before
            if d.top_p < 1.0:
                body["top_p"] = d.top_p
            if d.top_k > 0:
                body["top_k"] = d.top_k
            seed = query_seed(q)
            if seed is not None:
                body["seed"] = seed % 2**31
        body.update(self.extra_body)
        kwargs = dict(body.get("chat_template_kwargs") or {})
        kwargs["enable_thinking"] = d.enable_thinking
        body["chat_template_kwargs"] = kwargs
        return body

    def _one(self, q: Query) -> Answer:
        released = q.decoding.answer_text == "released"
        return self._post(
            f"{self.base_url}/chat/completions",
            self._body(q),
            lambda r: self._parse(r, released),
        )

    @staticmethod
    def _parse(r: Any, released: bool = False) -> Answer:
        """An HTTP 200 reply -> Answer; raises Retryable when it is not an answer (module doc)."""
        try:
            data = r.json()
        except ValueError as exc:
            raise Retryable(
                f"HTTP 200 with a body that is not JSON ({exc}): {r.text[:200]!r}"
            ) from exc
        try:
            choice = data["choices"][0]
            message = choice["message"]
            content = message.get("content")
            finish = choice.get("finish_reason")
            usage = data.get("usage") or {}
            prompt_tokens = int(usage.get("prompt_tokens") or 0)
            generated_tokens = int(usage.get("completion_tokens") or 0)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise Retryable(
                f"HTTP 200 without an OpenAI chat completion (no choices[0].message: "
                f"{type(exc).__name__}: {exc}): {r.text[:200]!r}"
            ) from exc
        if content is not None and not isinstance(content, str):
            raise Retryable(f"HTTP 200 with a non-text message.content: {content!r:.200}")
        text = released_answer(content or "") if released else strip_thinking(content or "")
        if text:
            return Answer(text, prompt_tokens, generated_tokens)
        if finish == "length":  # the model ran out of tokens: its outcome, not a fault
            return Answer("", prompt_tokens, generated_tokens, complete=False)
        raise Retryable(
            f"HTTP 200 with no answer text (message.content={content!r:.80}, "
            f"finish_reason={finish!r})"
        )

    def answer(self, queries: list[Query]) -> list[Answer]:
        if not queries:
            return []
        if any(scores_choices(q) and q.decoding.repetition_penalty != 1.0 for q in queries):
            raise ConsultantError(CHOICES_NO_PENALTY)
        if not self.prompt_logprobs and any(scores_choices(q) for q in queries):
            raise ConsultantError(CHOICES_NEED_LOGPROBS)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(queries))) as pool:
            answers = list(
                pool.map(lambda q: self._scored(q) if scores_choices(q) else self._one(q), queries)
            )
        per = (time.perf_counter() - t0) / len(queries)
        for a in answers:
            a.seconds = per
        return answers

    # ------------------------------------------------------------------ choice scoring
    def _post(
        self, url: str, body: dict[str, Any], read: Callable[[Any], Any] | None = None
    ) -> Any:
        """POST with retries (transport errors, 429 and 5xx retried; other errors fail at once);
        `read(reply)` turns an HTTP 200 reply into the result (default: its JSON)."""
        import httpx

        def call() -> Any:
            try:
                r = self._client.post(url, json=body)
            except httpx.TransportError as exc:
                raise Retryable(f"{type(exc).__name__}: {exc}") from exc
            if r.status_code == 429 or r.status_code >= 500:
                raise Retryable(f"HTTP {r.status_code}: {r.text[:200]}")
            if r.status_code != 200:
                raise ConsultantError(f"{url} answered HTTP {r.status_code}: {r.text[:300]}")
            return (read or _json_of)(r)

        return with_retries(call, what=f"POST {url}", max_retries=self.max_retries)

    def _tokenize(self, **body: Any) -> list[int]:
        root = self.base_url.removesuffix("/v1")  # type: ignore[union-attr]
        data = self._post(f"{root}/tokenize", {"model": self.model, **body})
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list):
            raise ConsultantError(f"{root}/tokenize returned no token list: {str(data)[:200]}")
        return [int(t) for t in tokens]

    def choice_sequences(self, q: Query) -> tuple[list[int], list[list[int]]]:
        """The templated prompt's token ids and each action's continuation (its tokens and the
        end-of-turn token after them, as the chat template writes the assistant's reply)."""
        kwargs = {"enable_thinking": q.decoding.enable_thinking}
        prompt = self._tokenize(
            messages=q.messages, add_generation_prompt=True, chat_template_kwargs=kwargs
        )
        conts = []
        for a in q.actions:
            full = self._tokenize(
                messages=[*q.messages, {"role": "assistant", "content": a}],
                add_generation_prompt=False,
                chat_template_kwargs=kwargs,
            )
            own = self._tokenize(prompt=a, add_special_tokens=False)
            # the reply's tokens, last occurrence (templates may drop an empty thinking block
            # from a past reply, so the rendering need not extend the generation prompt)
            at = next(
                (
                    i
                    for i in range(len(full) - len(own) - 1, -1, -1)
                    if full[i : i + len(own)] == own
                ),
                None,
            )
            if not own or at is None:
                raise ConsultantError(
                    f"slm.decoding.mode=choices: the chat template of {self.model!r} does not "
                    f"write the reply {a!r} as its own tokens; use mode=generate"
                )
            conts.append(own + [full[at + len(own)]])
        return prompt, conts

    def _scored(self, q: Query) -> Answer:
        """One choice-scored query (module docstring)."""
        import math

        prompt, conts = self.choice_sequences(q)
        url = f"{self.base_url}/completions"
        body = {
            "model": self.model,
            "prompt": [prompt + c for c in conts],
            "max_tokens": 1,
            "temperature": 0,
            "prompt_logprobs": 0,
        }
        data = self._post(url, body)
        logp = [0.0] * len(conts)
        try:
            for choice in data["choices"]:
                k = int(choice.get("index", 0))
                rows = choice["prompt_logprobs"]
                for t, token in enumerate(conts[k]):
                    logp[k] += float(rows[len(prompt) + t][str(token)]["logprob"])
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ConsultantError(
                f"{url} returned no prompt_logprobs for the choices ({type(exc).__name__}: "
                f"{exc}); the server does not support prompt log-probabilities (vLLM does): "
                "set slm.backend.prompt_logprobs=false and slm.decoding.mode=generate"
            ) from exc
        top = max(logp)
        weights = [math.exp(v - top) for v in logp]
        probs = {a: w / sum(weights) for a, w in zip(q.actions, weights, strict=True)}
        best = max(range(len(logp)), key=lambda k: (logp[k], -k))
        return Answer(q.actions[best], len(prompt), 0, choices=probs)

    def close(self) -> None:
        self._client.close()


def read_url_file(path: str) -> str:
    """The base URL a server launcher wrote; Retryable while the file is missing or empty."""
    try:
        url = open(path, encoding="utf-8").read().strip()
    except FileNotFoundError:
        raise Retryable(f"not up yet: url_file {path} does not exist") from None
    if not url:
        raise Retryable(f"not up yet: url_file {path} is empty")
    return url.rstrip("/")


def _json_of(reply: Any) -> Any:
    """An HTTP 200 reply's JSON; a body that is not JSON is retried."""
    try:
        return reply.json()
    except ValueError as exc:
        raise Retryable(f"HTTP 200 with a body that is not JSON: {reply.text[:200]!r}") from exc
