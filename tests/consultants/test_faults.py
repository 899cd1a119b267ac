"""An OpenAI-compatible server that answers HTTP 200 with something that is not an answer: null,
empty or whitespace content, a reply cut by max_tokens with no text left (each an invalid answer,
as the hf backend's empty answer is), a body that is not JSON (a fault, retried). A real HTTP
server on 127.0.0.1 (stdlib, in a thread) plays scripted replies; the backend goes through the
response cache, as in a job. Nothing of such a reply may reach the cache, and once the server is
fixed the real answer is fetched."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest

from benchmark.consultants import ConsultantError, retry
from benchmark.consultants.base import Decoding, Query
from benchmark.consultants.cache import CachedConsultant
from benchmark.consultants.openai_compat import OpenAIConsultant
from benchmark.prompts.parse import parse_action

ACTIONS = ("TURN_LEFT", "FORWARD")
GOOD = "Action: FORWARD\nReason: the path is clear."


def completion(content: Any, finish: str | None = "stop") -> bytes:
    """A chat completion body as vLLM / transformers serve write it."""
    return json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": finish,
                }
            ],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        }
    ).encode()


class Scripted:
    """What the server answers: the next scripted body for each POST, then `fixed` forever."""

    def __init__(self) -> None:
        self.script: list[bytes] = []
        self.fixed: bytes = completion(GOOD)
        self.posts = 0
        self.lock = threading.Lock()

    def next_body(self) -> bytes:
        with self.lock:
            self.posts += 1
            return self.script.pop(0) if self.script else self.fixed


@pytest.fixture
def server() -> Iterator[tuple[str, Scripted]]:
    scripted = Scripted()

    class Handler(BaseHTTPRequestHandler):
        def _send(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._send(json.dumps({"object": "list", "data": [{"id": "scripted"}]}).encode())

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._send(scripted.next_body())

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", scripted
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture
def delays(monkeypatch) -> list[float]:
    """The retry helper's backoff waits, recorded instead of slept (keeps the tests fast)."""
    waited: list[float] = []
    monkeypatch.setattr(retry, "time", SimpleNamespace(sleep=waited.append))
    return waited


def q(text: str = "Wall ahead. Action?") -> Query:
    return Query(
        messages=[{"role": "user", "content": text}],
        actions=ACTIONS,
        render_answer=lambda a, r: a,
        decoding=Decoding(max_new_tokens=16),
    )


def cached_backend(base: str, tmp_path, max_retries: int = 2) -> CachedConsultant:
    remote = OpenAIConsultant(base_url=base, max_retries=max_retries, concurrency=2)
    return CachedConsultant(remote, tmp_path / "responses.sqlite")


def assert_fixed_server_answers(c: CachedConsultant, scripted: Scripted) -> None:
    """After the server is fixed: the real answer comes from the server, then from the cache."""
    before = scripted.posts
    fresh = c.answer([q()])[0]
    assert (fresh.text, fresh.cached, fresh.complete) == (GOOD, False, True)
    assert scripted.posts == before + 1
    again = c.answer([q()])[0]
    assert (again.text, again.cached) == (GOOD, True)
    assert scripted.posts == before + 1 and len(c.store) == 1


@pytest.mark.parametrize(
    "content",
    [None, "", "  \n\t", "<think>the wall is ahead</think>\n\n"],
    ids=["null", "empty", "whitespace", "thinking-only"],
)
def test_reply_without_content_is_an_invalid_answer_never_cached(
    server, tmp_path, delays, content, caplog
) -> None:
    """The model's own empty answer: counted invalid as the hf backend's is, not retried (the
    same request gives the same), not cached; the first one is named in a warning."""
    base, scripted = server
    scripted.fixed = completion(content)  # every reply is empty
    c = cached_backend(base, tmp_path, max_retries=2)
    with caplog.at_level("WARNING", logger="benchmark.consultants.openai_compat"):
        a = c.answer([q(), q("Door east. Action?")])
        c.answer([q("Goal north. Action?")])
    assert [(x.text, x.complete) for x in a] == [("", False), ("", False)]
    assert parse_action(a[0].text, ACTIONS) is None  # the evaluator counts it invalid
    assert a[0].prompt_tokens == 11 and a[0].generated_tokens == 7
    assert scripted.posts == 3 and delays == []  # one request each, no retry
    assert len(c.store) == 0
    warned = [r.getMessage() for r in caplog.records if "no answer text" in r.getMessage()]
    assert len(warned) == 1 and base in warned[0] and "finish_reason='stop'" in warned[0]
    scripted.fixed = completion(GOOD)  # the server is fixed: its real answer is fetched
    assert_fixed_server_answers(c, scripted)


@pytest.mark.parametrize("content", [None, "", "<think>still thinking about the wall"])
def test_reply_cut_by_max_tokens_without_text_is_invalid_and_never_cached(
    server, tmp_path, delays, content
) -> None:
    base, scripted = server
    scripted.fixed = completion(content, finish="length")
    c = cached_backend(base, tmp_path)
    a = c.answer([q(), q()])  # two identical queries: one request, both answers incomplete
    assert [(x.text, x.complete) for x in a] == [("", False), ("", False)]
    assert parse_action(a[0].text, ACTIONS) is None  # the evaluator counts it invalid
    assert a[0].prompt_tokens == 11 and a[0].generated_tokens == 7
    assert scripted.posts == 1 and delays == []  # greedy would repeat it: not retried
    assert len(c.store) == 0
    c.answer([q()])  # not served from the cache: asked again
    assert scripted.posts == 2 and len(c.store) == 0
    scripted.fixed = completion(GOOD)
    assert_fixed_server_answers(c, scripted)


def test_reply_cut_by_max_tokens_with_text_is_an_answer(server, tmp_path, delays) -> None:
    base, scripted = server
    scripted.fixed = completion("Action: FORWARD\nReason: the path is", finish="length")
    c = cached_backend(base, tmp_path)
    a = c.answer([q()])[0]
    assert a.complete and parse_action(a.text, ACTIONS) == "FORWARD"
    assert len(c.store) == 1 and c.answer([q()])[0].cached and scripted.posts == 1


@pytest.mark.parametrize(
    "body",
    [
        b'{"choices": [{"message": {"content": "Action: FORW',  # cut mid-body
        b"<html>502 Bad Gateway</html>",
        b'{"error": "overloaded"}',
        b'{"choices": []}',
        b'{"choices": [{"message": "Action: FORWARD"}]}',
    ],
    ids=["truncated-json", "html", "no-choices", "empty-choices", "message-not-object"],
)
def test_malformed_200_reply_is_retried_then_names_the_url(server, tmp_path, delays, body) -> None:
    base, scripted = server
    scripted.fixed = body
    c = cached_backend(base, tmp_path, max_retries=1)
    with pytest.raises(ConsultantError, match=rf"POST {base}/chat/completions.*2 attempt\(s\)"):
        c.answer([q()])
    assert scripted.posts == 2 and len(delays) == 1 and len(c.store) == 0
    scripted.fixed = completion(GOOD)
    assert_fixed_server_answers(c, scripted)


def test_one_malformed_reply_is_retried_to_the_real_answer(server, tmp_path, delays) -> None:
    base, scripted = server
    scripted.script = [b"not json at all"]
    c = cached_backend(base, tmp_path)
    assert c.answer([q()])[0].text == GOOD
    assert scripted.posts == 2 and len(delays) == 1


def test_empty_answer_from_the_test_vllm_server_is_an_invalid_answer(tiny_model, tmp_path) -> None:
    """The suite's vLLM-compatible server on the real tiny model, with a `stop` string that cuts
    the model's greedy answer before its first character: HTTP 200 with empty content and
    finish_reason "stop". The openai backend gives an empty answer, counted invalid as the hf
    backend's empty answer is, and caches nothing; the cell does not fail."""
    from tests.vllm_server import VLLMServer

    server = VLLMServer(str(tiny_model()))
    try:
        said = OpenAIConsultant(base_url=server.url).answer([q()])[0].text
        assert said.strip(), "the tiny model answered nothing to cut"
        stop = said.strip()[0]
        remote = OpenAIConsultant(base_url=server.url, extra_body={"stop": [stop]})
        c = CachedConsultant(remote, tmp_path / "responses.sqlite")
        a = c.answer([q()])[0]
        posted = [body for path, body in server.bodies if path == "/v1/chat/completions"]
    finally:
        server.stop()
    assert posted[-1]["stop"] == [stop] and len(posted) == 2  # asked once: no retry
    assert (a.text, a.complete) == ("", False) and a.generated_tokens > 0
    assert parse_action(a.text, ACTIONS) is None  # invalid, as an hf empty answer is
    assert len(c.store) == 0
