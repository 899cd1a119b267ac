"""What the openai backend (benchmark.consultants.openai_compat) asks of its server besides
answers: which model it serves (part of a cell's identity, checked again while the cell runs)
and which decoding fields it takes (the `check_decoding` probe, and the fields sent inside
`generation_config` where a server takes them only there). Kept apart from the HTTP client so
that each reads as one concern; `python -m benchmark.serve` writes the record read here.

Decoding: every request carries every sampling key of its decoding, also when it is off, so a
server never fills one from the model's generation config (vLLM does, for each key a request
leaves out: a Qwen2.5 greedy request would get that model's repetition_penalty 1.05) while the hf
backend does not. What is sent depends on the server, told by `owned_by` in its /v1/models list:
vLLM and SGLang get `temperature`, `top_p` (1.0 = off), `top_k` (-1 = off: every vLLM version takes
it), `min_p` 0.0 and `repetition_penalty` (1.0 = off); any other server (`transformers serve`, a
hosted API) only the OpenAI fields `temperature` and `top_p`, plus `top_k` and
`repetition_penalty` when they are on (such a server may refuse them). `extra_body` is merged last
and can add or override any key. Sampled requests (temperature > 0) also carry `seed`: the query's
own seed (benchmark.consultants.base.query_seed, from the decoding seed, rng_key and messages),
mod 2^31; the same query thus sends the same seed in lockstep and sequential evaluation.

A field the server refuses fails the cell before any work, not at its first episode: when the job
builds the consultant (make_consultant), `check_decoding` sends one request with max_tokens=1 and
exactly the fields the cell's decoding sends. An HTTP 400/422 that names sent fields is tried once
more with the non-OpenAI ones (`top_k`, `repetition_penalty`) inside `generation_config`, the JSON
of generate() arguments `transformers serve` takes (it refuses them at the top level): where that is
answered, every request sends them there, and the decoding is the same. Otherwise the cell fails
with one line naming the fields, the URL and model, and the setting that stops sending each.

Which model answers is part of a cell (`weights_identity`, module benchmark.cell): the model id
the server reports at /v1/models (and vLLM's `root`, the weights it loaded under that name), plus,
where the server is ours, the weights' fingerprint that `python -m benchmark.serve` publishes
beside its URL file (`served_file`: read only for the URL and model id it names). The same
command against a server that now serves another model, or re-fine-tuned weights under the same
name, is another cell; the response cache's identity carries the fingerprint too. A server that
does not answer while the identity is computed makes it unknown (ServerNotUp): the job then waits
for it as at start-up, and fails naming the URL. With base_url alone and no slm.backend.identity
nothing names the weights: the plan and each job warn (`identity_warning`).

The served model is checked again while a cell runs, so that a cell never mixes two models'
answers: after a request that found the server down gets through again (a reconnect), the model
card at /v1/models and the record beside the url_file are read again; before each batch, the
record alone. Another identity than at connect fails the request with ConsultantError naming
both (a missing record, as during a restart, says nothing). A restart that no request sees, on
other weights under the same id and with nothing published, cannot be told apart."""

from __future__ import annotations

import json
import logging
import re
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmark.consultants.base import Decoding, Query
from benchmark.consultants.errors import ConsultantError, ServerNotUp
from benchmark.consultants.retry import Retryable
from benchmark.redact import redact

log = logging.getLogger(__name__)
PROBE_TIMEOUT = 10.0  # seconds one start-up probe may take (less when wait_timeout ends sooner)
VLLM_LIKE = ("vllm", "sglang")  # `owned_by` of servers that take every sampling key (docstring)
# sampling keys outside OpenAI's API that `transformers serve` takes inside `generation_config`
NESTABLE = ("top_k", "repetition_penalty")
# a refused field -> the setting that stops sending it (check_decoding's message)
FIELD_FIXES = {
    "repetition_penalty": "set slm.decoding.repetition_penalty=1.0 (off; protocol=suite has it)",
    "top_k": "set slm.decoding.top_k=0 (off)",
    "seed": "set slm.decoding.temperature=0 (greedy requests carry no seed)",
}
SERVE_VLLM = "serve the model with vLLM (python -m benchmark.serve --engine vllm)"


class RequestRefused(ConsultantError):
    """A request answered with an HTTP status that sending it again does not change (a 4xx other
    than 429): `status` and `detail` (the reply's text, redacted) say why."""

    def __init__(self, url: str, status: int, detail: str) -> None:
        super().__init__(f"{url} answered HTTP {status}: {detail}")
        self.status, self.detail = status, detail


class ServedModelChecks:
    """The served model's identity and the decoding fields its server takes, for
    OpenAIConsultant (a mixin); the host sets `model`, `base_url`, `url_file`, `timeout` and
    `extra_body`, and provides `_probe(timeout)` (GET /models), `_post(endpoint, body, read)`
    and `_body(query)` (a request's JSON)."""

    owned_by: str | None = None  # the server's `owned_by` for the model (/v1/models)
    nested: tuple[str, ...] = ()  # sampling keys sent inside generation_config (check_decoding)

    def _init_served(self, card: dict[str, Any]) -> str | None:
        """Record what the server serves at connect (`card`, its model card for `model`, and
        the weights published beside the url_file); the published weights, None without."""
        url_file, url, model = self.url_file, self.base_url, self.model
        weights = read_served_weights(url_file, url, model) if url_file else None
        self.served = served_identity(model, card, weights)
        self._weights, self._card = weights, card  # at connect: check_served
        self._served_lock = threading.Lock()  # one re-check at a time after a reconnect
        return weights

    @classmethod
    def weights_identity(cls, digests: str | None = None, **backend_args: Any) -> str | None:
        """The served model (module docstring), asked of the server once, without waiting for
        it: ServerNotUp (a ModelNotBuilt) while it does not answer. No other backend asks a
        server: this is the only one whose weights lie behind an address."""
        try:
            probe = cls(**{**backend_args, "wait_timeout": 0})
        except ConsultantError as exc:
            if isinstance(exc.__cause__, Retryable):  # not up (_wait_healthy)
                raise ServerNotUp(str(exc)) from exc
            raise
        probe.close()
        return probe.served

    @classmethod
    def identity_warning(cls, weights: str | None, **backend_args: Any) -> str | None:
        """A served model whose weights identity is only its name (no `#<weights>`: nothing
        published beside a url_file) and no slm.backend.identity: its cells would be reused
        after the server is restarted on other weights under the same URL and model id."""
        if not weights or not weights.startswith("served:") or "#" in weights:
            return None
        if backend_args.get("identity"):
            return None
        url_file, where = backend_args.get("url_file"), backend_args.get("base_url")
        if url_file:
            try:
                where = read_url_file(str(url_file))
            except Retryable:
                where = f"url_file {url_file}"
        return (
            f"the model {weights.removeprefix('served:')!r} served at {redact(str(where))} has "
            "no weights identity: its cells are reused for any weights served under that name "
            "at that address; serve it with python -m benchmark.serve --url-file F and set "
            "slm.backend.url_file=F (the weights' fingerprint is published beside F), or name "
            "these weights with slm.backend.identity=<name>"
        )

    @classmethod
    def make_weights(cls, **backend_args: Any) -> None:
        """A served model is not made here: wait for its server as a start-up would
        (`wait_timeout`), failing naming the URL, so the identity that follows can be known."""
        cls(**backend_args).close()

    def check_served(self, probe: bool) -> None:
        """Fail when the server now serves other weights than at connect (module docstring):
        the weights published beside the url_file (a record for this URL and model; none while
        a restart is under way) and, with `probe` (a reconnect), the model card at /v1/models.
        Retryable while the server does not answer the probe."""
        with self._served_lock:
            card = self._card
            if probe:
                models = self._probe(min(self.timeout, PROBE_TIMEOUT))
                if self.model not in models:
                    self._changed(f"a model list without {self.model!r} ({', '.join(models)})")
                card = models[self.model]
            weights = None
            if self.url_file is not None:
                weights = read_served_weights(self.url_file, self.base_url, self.model)
            now = served_identity(self.model, card, weights or self._weights)  # none: no news
            if now != self.served:
                self._changed(now)

    def _changed(self, now: str) -> None:
        raise ConsultantError(
            f"the server at {redact(str(self.base_url))} now serves {now}, not {self.served} "
            "as when this cell started (restarted on other weights): the cell fails rather "
            "than mix two models' answers; run it again to compute the new weights' cell"
        )

    @property
    def vllm_like(self) -> bool:
        return str(self.owned_by).lower() in VLLM_LIKE

    def sampling_keys(self, d: Decoding) -> dict[str, Any]:
        """Every sampling key of the decoding, explicitly, also when off (module docstring); the
        seed of a sampled query is the query's own (`_body`)."""
        # greedy: the neutral filters (hf ignores top_p/top_k when it does not sample)
        top_p, top_k = (d.top_p, d.top_k) if d.sampling else (1.0, 0)
        keys: dict[str, Any] = {"temperature": d.temperature, "top_p": top_p}
        if self.vllm_like:
            keys |= {"top_k": top_k or -1, "min_p": 0.0}
            keys["repetition_penalty"] = d.repetition_penalty
        else:  # OpenAI's fields; the others only when on
            if top_k > 0:
                keys["top_k"] = top_k
            if d.repetition_penalty != 1.0:
                keys["repetition_penalty"] = d.repetition_penalty
        return keys

    def check_decoding(self, decoding: Decoding) -> None:
        """Send one max_tokens=1 request with the fields `decoding` sends; a server that refuses
        some fails here, before the policy or any episode, or takes the non-OpenAI ones inside
        generation_config (module docstring)."""
        probe = Query(
            [{"role": "user", "content": "OK?"}],
            (),
            lambda action, _reason: action,
            replace(decoding, max_new_tokens=1, enable_thinking=False, mode="generate"),
        )
        body = self._body(probe)
        try:
            self._post("/chat/completions", body, _ignore)
            return
        except RequestRefused as exc:
            refused = exc
            named = refused_fields(exc, body)
            if not named:
                raise
        if set(named) <= set(NESTABLE) and "generation_config" not in body:
            self.nested = tuple(key for key in NESTABLE if key in body)
            try:
                self._post("/chat/completions", self._body(probe), _ignore)
            except RequestRefused:
                self.nested = ()
            else:
                log.info(
                    "%s refuses %s at the top level of a request: sent inside "
                    "generation_config (transformers serve's generate() arguments)",
                    redact(str(self.base_url)),
                    ", ".join(self.nested),
                )
                return
        sent = ", ".join(f"{key}={body[key]!r}" for key in named)
        fixes = [
            f"remove {key} from slm.backend.extra_body"
            if key in self.extra_body
            else FIELD_FIXES.get(key, "")
            for key in named
        ]
        fix = "; ".join(dict.fromkeys(f for f in fixes if f))
        if not self.vllm_like:
            fix = f"{fix}, or {SERVE_VLLM}" if fix else SERVE_VLLM
        detail = " ".join(refused.detail.split())[:200]
        raise ConsultantError(
            f"the server at {redact(str(self.base_url))} (model {self.model!r}) refuses "
            f"{sent}, which this cell's decoding sends in every request (HTTP {refused.status}: "
            f"{detail}); nothing was run: {fix}"
        )


def nest_fields(body: dict[str, Any], nested: tuple[str, ...]) -> None:
    """Move the `nested` keys of a request's `body` into its `generation_config` (a JSON
    string), where a server that refuses them at the top level takes them (check_decoding)."""
    inner = {key: body.pop(key) for key in nested if key in body}
    if inner:
        body["generation_config"] = json.dumps(inner, sort_keys=True)


SERVED_SUFFIX = ".served.json"  # beside the URL file: what benchmark.serve serves there


def served_file(url_file: str | Path) -> Path:
    """Where `python -m benchmark.serve --url-file F` publishes the served model: F.served.json."""
    return Path(f"{url_file}{SERVED_SUFFIX}")


def served_record(url: str, model: str, weights: str | None) -> str:
    """The served file's text: the URL and model id it speaks for, and the weights' identity
    (benchmark.consultants.fingerprint: a local directory by the bytes of its files, a hub
    model by its snapshot commit)."""
    return json.dumps({"url": url, "model": model, "weights": weights}, sort_keys=True) + "\n"


def read_served_weights(url_file: str, url: str | None, model: str) -> str | None:
    """The weights' identity published beside `url_file`, when it speaks for this URL and model
    id (a file left by another server, or a model named otherwise, says nothing); None without
    one (a server not started by benchmark.serve)."""
    try:
        record = json.loads(served_file(url_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or (record.get("url"), record.get("model")) != (url, model):
        return None
    weights = record.get("weights")
    return str(weights) if weights else None


def served_identity(model: str, card: dict[str, Any], weights: str | None) -> str:
    """`served:<model id>`, `@<root>` when the server names the weights it loaded under that id
    otherwise (vLLM's --served-model-name), `#<weights identity>` when published (module doc)."""
    root = card.get("root")
    out = f"served:{model}" + (f"@{root}" if root and str(root) != model else "")
    return out + (f"#{weights}" if weights else "")


def read_url_file(path: str) -> str:
    """The base URL a server launcher wrote; Retryable while the file is missing or empty."""
    try:
        url = open(path, encoding="utf-8").read().strip()
    except FileNotFoundError:
        raise Retryable(f"not up yet: url_file {path} does not exist") from None
    if not url:
        raise Retryable(f"not up yet: url_file {path} is empty")
    return url.rstrip("/")


def refused_fields(refused: RequestRefused, body: dict[str, Any]) -> list[str]:
    """The fields of `body` (not the model or the messages) that an HTTP 400/422 names: what a
    server that refuses a field or its value answers (`transformers serve`: "Unexpected fields
    in the request: {'repetition_penalty'}"; vLLM: "top_k must be ...")."""
    if refused.status not in (400, 422):
        return []
    return [
        key
        for key in body
        if key not in ("model", "messages") and re.search(rf"\b{re.escape(key)}\b", refused.detail)
    ]


def _ignore(reply: Any) -> None:
    """A reply that only has to be accepted (check_decoding's probe)."""
