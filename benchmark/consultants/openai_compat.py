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
empty file counts as "not up yet". The file is read at start-up, and again only while a request
finds the server down (below). 401/403 and a reply that is not a model list fail at once: waiting would not fix them.

A batch's queries run concurrently in a thread pool; each request retries with exponential
backoff (shared helper, benchmark.consultants.retry) and a request that keeps failing raises
ConsultantError with the URL and the cause.

Faulty replies (HTTP 200 that is not a chat completion: a body that is not JSON, or JSON without
`choices[0].message`) are failures, retried like a 5xx and then raised as ConsultantError naming
the URL, so a cell never completes on a broken server's replies and nothing of them reaches the
response cache.

A completion without answer text (`content` null, empty or whitespace only, or only a thinking
block; also one cut by max_tokens before any answer text) is the model's own outcome, as the
local backend's empty answer is: it comes back as an empty answer, which the parser counts
invalid, in every backend alike. Decoding the same request again would give the same, so it is not
retried. It is marked `complete=False`, which the response cache never stores (a server, unlike
the model in this process, may be broken: the query is asked again in the next run), and the
first one of a consultant is named in a warning, so a server that answers nothing is seen.

Thinking: `chat_template_kwargs: {enable_thinking: ...}` is sent in the body (vLLM, SGLang and
`transformers serve` honour it). A remote server cannot be stopped mid-thought, so the thinking
budget is approximate here: max_tokens = max_new_tokens + thinking_budget when thinking is on,
and any thinking left in the content is stripped.

Choice scoring (`slm.decoding.mode=choices`, docs/choices.md): needs a vLLM server, declared with
`slm.backend.prompt_logprobs: true` (without it the config is refused at validation); how it
scores is benchmark.consultants.remote_choices (`slm.backend.choice_logprobs`).

An engine that dies and is restarted (`python -m benchmark.serve --restarts`, docs/cluster.md):
a request that finds no server (connection refused or reset, HTTP 502/503/504) is retried, with
backoff, until the server has been unavailable for `slm.backend.restart_wait_s` seconds; then it
fails naming that setting and the URL. Meanwhile the `url_file` is read again at each attempt, so a
server that comes back elsewhere is found. Other faults keep their `max_retries`.

What the server is asked besides answers lives in benchmark.consultants.openai_server_checks:
which model it serves (the cell's `weights_identity`, checked again while a cell runs) and
which sampling fields every request carries and where (`check_decoding`, the probe before any
work; `generation_config` for a server that takes some only there)."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmark.consultants.base import Answer, Consultant, Query, query_seed, scores_choices
from benchmark.consultants.errors import ConsultantError
from benchmark.consultants.hf import strip_thinking
from benchmark.consultants.openai_config import (
    CHOICES_NEED_LOGPROBS,
    CHOICES_NO_PENALTY,
    check_openai_config,
)
from benchmark.consultants.openai_server_checks import (
    PROBE_TIMEOUT,
    RequestRefused,
    ServedModelChecks,
    nest_fields,
    read_url_file,
)
from benchmark.consultants.remote_choices import RemoteChoiceScoring
from benchmark.consultants.retry import Retryable, Unavailable, with_retries
from benchmark.redact import redact, register
from benchmark.vocabulary import released_answer

# httpx logs every request at INFO: thousands of lines per cell in a job's log. Failures still
# show (retry warnings, ConsultantError).
logging.getLogger("httpx").setLevel(logging.WARNING)
log = logging.getLogger(__name__)
DOWN_STATUS = (502, 503, 504)  # no engine behind the address (yet): waited for, restart_wait_s


class OpenAIConsultant(ServedModelChecks, RemoteChoiceScoring, Consultant):
    """Chat completions at `base_url` (e.g. http://127.0.0.1:8000/v1); what it checks of the
    server is ServedModelChecks' (benchmark.consultants.openai_server_checks)."""

    _warned_empty = False  # an answer without text was named in a warning (module docstring)
    label = "openai"
    # how long it waits for its server, the file its address is read from, whether the server
    # returns log-probabilities and which of its two ways choice scoring takes them (the same raw
    # log-probabilities), how long a request waits for a restart: none changes an answer
    execution_keys = (
        "wait_timeout",
        "url_file",
        "prompt_logprobs",
        "choice_logprobs",
        "restart_wait_s",
    )

    @classmethod
    def check_config(cls, slm: Any) -> None:
        check_openai_config(slm)  # benchmark.consultants.openai_config

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
        choice_logprobs: str = "auto",
        restart_wait_s: float = 0.0,
    ) -> None:
        """`prompt_logprobs`: the server is vLLM and scores given tokens, so
        slm.decoding.mode=choices can score the actions, the way `choice_logprobs` says
        (benchmark.consultants.remote_choices); `restart_wait_s`: how long a request waits for
        a server that is down (module docstring)."""
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
        self._init_choices(choice_logprobs)
        if isinstance(restart_wait_s, bool) or not (
            isinstance(restart_wait_s, (int, float)) and 0 <= restart_wait_s < float("inf")
        ):
            raise ConsultantError(
                f"slm.backend.restart_wait_s={restart_wait_s!r} is invalid: allowed a number of "
                "seconds >= 0 (0 = no wait for a server that is down)"
            )
        self.restart_wait_s = float(restart_wait_s)
        headers = {}
        if api_key_env:
            check_key_variable(api_key_env)
            key = os.environ.get(api_key_env)
            if not key:
                raise ConsultantError(
                    f"slm.backend.api_key_env={api_key_env!r}: environment variable "
                    f"{api_key_env} is not set (or empty); export it, or set "
                    "slm.backend.api_key_env=null for a server without authentication"
                )
            register(key)  # redacted wherever a server echoes it (benchmark.redact)
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
            model = next(iter(models))
        self.model = model
        card = models.get(model) or next(iter(models.values()), {})
        self.owned_by = card.get("owned_by")
        weights = self._init_served(models.get(model) or {})  # ServedModelChecks
        # with url_file the address changes with every server job; the file names the deployment
        where = redact(str(url_file or self.base_url))  # never a URL's user:password
        self._identity = identity or f"openai:{model}@{where}" + (f"#{weights}" if weights else "")

    def __repr__(self) -> str:  # never shows the key, nor a URL's credentials
        return f"OpenAIConsultant(base_url={redact(str(self.base_url))!r}, model={self.model!r})"

    @property
    def identity(self) -> str:
        return self._identity

    def _wait_healthy(self) -> dict[str, dict[str, Any]]:
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
                last, cause = str(exc), exc
            if time.monotonic() >= deadline:
                break
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        where = self.base_url or "(no URL yet)"
        if self.url_file is not None:
            where += f" from url_file {self.url_file}"
        if self.wait_timeout <= 0:  # caused by the Retryable: not up (weights_identity)
            raise ConsultantError(
                f"OpenAI-compatible server {last}; start it first, fix slm.backend.base_url (it "
                "should end in /v1) or url_file, or set slm.backend.wait_timeout to wait for it"
            ) from cause
        raise ConsultantError(
            f"OpenAI-compatible server at {where} not healthy after "
            f"slm.backend.wait_timeout={self.wait_timeout:g} s (last: {last}); start it "
            "(python -m benchmark.serve), check its log, or raise the timeout"
        ) from cause

    def _probe(self, timeout: float) -> dict[str, dict[str, Any]]:
        """GET /models once: model id -> its model card (`owned_by`, vLLM's `root`, ...),
        Retryable while the server is not (yet) up."""
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
            return {str(m["id"]): dict(m) for m in r.json().get("data", [])}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConsultantError(f"{url} did not return an OpenAI model list: {exc}") from exc

    def _body(self, q: Query) -> dict[str, Any]:
        d = q.decoding
        max_tokens = d.max_new_tokens + (d.thinking_budget if d.enable_thinking else 0)
        body: dict[str, Any] = {
            "model": self.model,
            "messages": q.messages,
            "max_tokens": max_tokens,
            **self.sampling_keys(d),
        }
        if d.sampling:
            seed = query_seed(q)
            if seed is not None:
                body["seed"] = seed % 2**31
        nest_fields(body, self.nested)  # where the server takes them only (check_decoding)
        body.update(self.extra_body)
        kwargs = dict(body.get("chat_template_kwargs") or {})
        kwargs["enable_thinking"] = d.enable_thinking
        body["chat_template_kwargs"] = kwargs
        return body

    def _one(self, q: Query) -> Answer:
        released = q.decoding.answer_text == "released"
        return self._post(
            "/chat/completions",
            self._body(q),
            lambda r: self._parse(r, released),
        )

    def _parse(self, r: Any, released: bool = False) -> Answer:
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
        if not self._warned_empty:  # the first one is named: a server may answer nothing
            self._warned_empty = True
            log.warning(
                "%s answered HTTP 200 with no answer text (message.content=%.80r, "
                "finish_reason=%r): counted as an invalid answer and never cached; further ones "
                "are not named (the invalid rate counts them)",
                redact(str(self.base_url)),
                content,
                finish,
            )
        # the model's outcome: an invalid answer (module docstring), not cached
        return Answer("", prompt_tokens, generated_tokens, complete=False)

    def answer(self, queries: list[Query]) -> list[Answer]:
        if not queries:
            return []
        if any(scores_choices(q) and q.decoding.repetition_penalty != 1.0 for q in queries):
            raise ConsultantError(CHOICES_NO_PENALTY)
        if not self.prompt_logprobs and any(scores_choices(q) for q in queries):
            raise ConsultantError(CHOICES_NEED_LOGPROBS)
        self.check_served(probe=False)  # a restart between requests, published beside url_file
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(queries))) as pool:
            answers = list(
                pool.map(lambda q: self._scored(q) if scores_choices(q) else self._one(q), queries)
            )
        per = (time.perf_counter() - t0) / len(queries)
        for a in answers:
            a.seconds = per
        return answers

    def _url(self, endpoint: str) -> str:
        """`endpoint` under the base URL; vLLM's /tokenize is at the server's root."""
        if endpoint == "/tokenize":
            return f"{self.base_url.removesuffix('/v1')}/tokenize"  # type: ignore[union-attr]
        return f"{self.base_url}{endpoint}"

    def _post(
        self, endpoint: str, body: dict[str, Any], read: Callable[[Any], Any] | None = None
    ) -> Any:
        """POST to `endpoint` with retries (module docstring: 429 and 5xx retried, a server that
        is down waited for up to restart_wait_s; other errors fail at once); `read(reply)` turns
        an HTTP 200 reply into the result (default: its JSON)."""
        import httpx

        down = (
            httpx.ConnectError,
            httpx.ConnectTimeout,
            httpx.RemoteProtocolError,
            httpx.ReadError,
            httpx.WriteError,
        )
        was_down = False

        def call() -> Any:
            nonlocal was_down
            if was_down and self.url_file is not None:  # it may come back elsewhere
                try:
                    self.base_url = read_url_file(self.url_file)
                except Retryable as exc:
                    raise Unavailable(str(exc)) from None
            url = self._url(endpoint)
            try:
                r = self._client.post(url, json=body)
            except down as exc:
                was_down = True
                raise Unavailable(f"{type(exc).__name__}: {exc}") from exc
            except httpx.TransportError as exc:
                raise Retryable(f"{type(exc).__name__}: {exc}") from exc
            if r.status_code in DOWN_STATUS:
                was_down = True
                raise Unavailable(f"HTTP {r.status_code}: {r.text[:200]}")
            if was_down:  # reconnected: the same weights as at connect? (check_served)
                try:
                    self.check_served(probe=True)
                except Retryable as exc:
                    raise Unavailable(str(exc)) from None
            was_down = False
            if r.status_code == 429 or r.status_code >= 500:
                raise Retryable(f"HTTP {r.status_code}: {r.text[:200]}")
            if r.status_code != 200:
                raise RequestRefused(url, r.status_code, redact(r.text[:300]))
            return (read or _json_of)(r)

        return with_retries(
            call,
            what=f"POST {self._url(endpoint)}",
            max_retries=self.max_retries,
            down_wait=self.restart_wait_s,
            down_setting="slm.backend.restart_wait_s",
        )

    def close(self) -> None:
        self._client.close()


KEY_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_key_variable(name: str) -> None:
    """`slm.backend.api_key_env` is the NAME of a variable: a value that is not one (a key
    pasted there by mistake) is refused without being repeated."""
    if not KEY_VARIABLE.fullmatch(str(name)):
        raise ConsultantError(
            "slm.backend.api_key_env must be the NAME of an environment variable holding the "
            "key (letters, digits, _), not the key itself: export MY_KEY=<key> and set "
            "slm.backend.api_key_env=MY_KEY (the value given is not shown: it may be a secret)"
        )


def _json_of(reply: Any) -> Any:
    """An HTTP 200 reply's JSON; a body that is not JSON is retried."""
    try:
        return reply.json()
    except ValueError as exc:
        raise Retryable(f"HTTP 200 with a body that is not JSON: {reply.text[:200]!r}") from exc
