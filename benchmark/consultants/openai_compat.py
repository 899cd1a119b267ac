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
unchanged: `temperature: 0` and no other sampling field."""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmark.consultants.base import Answer, Consultant, Query, query_seed
from benchmark.consultants.errors import ConsultantError
from benchmark.consultants.hf import strip_thinking
from benchmark.consultants.retry import Retryable, with_retries

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
    ) -> None:
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
        import httpx

        url = f"{self.base_url}/chat/completions"
        body = self._body(q)

        def call() -> Answer:
            try:
                r = self._client.post(url, json=body)
            except httpx.TransportError as exc:
                raise Retryable(f"{type(exc).__name__}: {exc}") from exc
            if r.status_code == 429 or r.status_code >= 500:
                raise Retryable(f"HTTP {r.status_code}: {r.text[:200]}")
            if r.status_code != 200:
                raise ConsultantError(f"{url} answered HTTP {r.status_code}: {r.text[:300]}")
            return self._parse(r)

        return with_retries(call, what=f"POST {url}", max_retries=self.max_retries)

    @staticmethod
    def _parse(r: Any) -> Answer:
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
        text = strip_thinking(content or "")
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
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(queries))) as pool:
            answers = list(pool.map(self._one, queries))
        per = (time.perf_counter() - t0) / len(queries)
        for a in answers:
            a.seconds = per
        return answers

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
