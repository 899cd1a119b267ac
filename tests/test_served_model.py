"""A served model is part of the cell: the model id an OpenAI-compatible server reports and,
where `python -m benchmark.serve` started it, the weights' identity it publishes beside its URL
file. Real HTTP servers on 127.0.0.1 (stdlib, in a thread) play the server; jobs run whole."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from benchmark import results
from benchmark.consultants import ModelNotBuilt
from benchmark.consultants.base import Decoding, Query
from benchmark.consultants.errors import ConsultantError, ServerNotUp
from benchmark.consultants.fingerprint import resolve_source
from benchmark.consultants.openai_compat import OpenAIConsultant
from benchmark.consultants.openai_server_checks import served_file, served_record
from benchmark.job import run_job
from benchmark.plan import plan_sweep
from benchmark.serve import remove_url_file, weights_of, write_url_file
from tests.conftest import compose_cfg

ANSWER = "Action: FORWARD\nReason: the path is clear."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeServer:
    """/v1/models lists `model` (with vLLM's `root` when given); every chat completion answers
    FORWARD, or with `refuse_key` HTTP 401 echoing the request's Authorization header (a proxy
    that repeats the key it refuses). `posts` counts the completions asked."""

    def __init__(
        self, port: int, model: str, root: str | None = None, refuse_key: bool = False
    ) -> None:
        self.port, self.model, self.root, self.posts = port, model, root, 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, body: dict, status: int = 200) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                card = {"id": fake.model, "owned_by": "fake"}
                if fake.root:
                    card["root"] = fake.root
                self._send({"object": "list", "data": [card]})

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                fake.posts += 1
                if refuse_key:
                    self._send({"error": f"invalid {self.headers['Authorization']}"}, 401)
                    return
                message = {"role": "assistant", "content": ANSWER}
                usage = {"prompt_tokens": 10, "completion_tokens": 5}
                choice = {"index": 0, "message": message, "finish_reason": "stop"}
                self._send({"choices": [choice], "usage": usage})

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def port() -> Iterator[int]:
    yield free_port()


def job(root: Path, out: Path, url: str, *overrides: str) -> dict:
    cfg = compose_cfg(
        root,
        "method=slm_only",
        "slm=openai",
        "env=empty5x5_random",
        "eval.n_episodes=2",
        f"slm.backend.base_url={url}",
        *overrides,
    )
    return run_job(cfg, out, multirun=False)


def test_two_models_served_at_one_url_are_two_cells(tmp_path, port) -> None:
    """The same command against a server now serving another model is a new cell, computed;
    the same model again is the cell already there, skipped."""
    a = FakeServer(port, "model-a")
    try:
        first = job(tmp_path / "root", tmp_path / "a", a.url)
    finally:
        a.stop()
    assert a.posts > 0
    b = FakeServer(port, "model-b")  # same port: the URL a cell sees is the same
    try:
        second = job(tmp_path / "root", tmp_path / "b", b.url)
        asked = b.posts
        again = job(tmp_path / "root", tmp_path / "b2", b.url)
    finally:
        b.stop()
    assert asked > 0, "model-b's cell was not computed (model-a's was reused)"
    assert second["cell_hash"] != first["cell_hash"]
    assert again["cell_hash"] == second["cell_hash"] and b.posts == asked  # skipped
    cells = tmp_path / "root" / "cells"
    served = {
        h: results.read_json(cells / h / "cell.json")["identity"]["slm"]["backend"]["weights"]
        for h in (first["cell_hash"], second["cell_hash"])
    }
    assert served == {first["cell_hash"]: "served:model-a", second["cell_hash"]: "served:model-b"}


def test_server_down_while_the_identity_is_computed_names_the_url(tmp_path, port) -> None:
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(ServerNotUp, match=rf"unreachable at {url}/models") as err:
        OpenAIConsultant.weights_identity(base_url=url, timeout=2)
    assert isinstance(err.value, ModelNotBuilt)  # the plan says "not known yet" and goes on
    with pytest.raises(Exception, match=rf"{url}/models"):  # the job fails naming it
        job(tmp_path / "root", tmp_path / "j", url, "slm.backend.timeout=2")
    error = results.read_json(tmp_path / "j" / "error.json")
    assert f"{url}/models" in error["message"]


def test_published_weights_and_root_are_part_of_the_identity(tmp_path, port) -> None:
    """benchmark.serve's record beside the URL file adds the weights' identity (the cache's
    identity too); a record for another address or model says nothing; vLLM's `root` counts."""
    url_file = tmp_path / "slm.url"
    server = FakeServer(port, "m", root="/models/m-v2")
    try:
        url_file.write_text(server.url + "\n")

        def identity() -> str | None:
            return OpenAIConsultant.weights_identity(url_file=str(url_file))

        assert identity() == "served:m@/models/m-v2"
        served_file(url_file).write_text(served_record(server.url, "m", "hf-local:aaa"))
        assert identity() == "served:m@/models/m-v2#hf-local:aaa"
        remote = OpenAIConsultant(url_file=str(url_file))
        assert remote.identity == f"openai:m@{url_file}#hf-local:aaa"
        served_file(url_file).write_text(served_record(server.url, "m", "hf-local:bbb"))
        assert identity() == "served:m@/models/m-v2#hf-local:bbb"  # re-trained in place
        for url, model in (("http://127.0.0.1:1/v1", "m"), (server.url, "other")):
            served_file(url_file).write_text(served_record(url, model, "hf-local:ccc"))
            assert identity() == "served:m@/models/m-v2"
    finally:
        server.stop()


def test_serve_publishes_the_weights_it_serves(tmp_path) -> None:
    """`python -m benchmark.serve` names a local directory's weights as the hf backend does,
    writes the record before the URL and removes both (only its own) when it stops."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"weights")
    assert weights_of(str(model)) == resolve_source(None, str(model), None)[2]
    assert weights_of(str(tmp_path / "nothing-here")) is None
    url_file, url = tmp_path / "slm.url", "http://127.0.0.1:5/v1"
    write_url_file(url_file, url, "m", "hf-local:aaa")
    assert json.loads(served_file(url_file).read_text())["weights"] == "hf-local:aaa"
    remove_url_file(url_file, "http://elsewhere:5/v1")  # a newer server's: kept
    assert url_file.exists() and served_file(url_file).exists()
    remove_url_file(url_file, url)
    assert not url_file.exists() and not served_file(url_file).exists()


def test_a_served_model_without_weights_identity_is_named_at_plan_and_at_job_start(
    tmp_path, port, caplog
) -> None:
    """With base_url alone the cell knows the served model by its name only: the plan (once per
    sweep) and each job say so in one line naming the URL, the model and how to give the
    weights an identity. The weights published beside a url_file, or slm.backend.identity,
    silence it."""
    server = FakeServer(port, "model-a")
    over = [
        f"paths.root={tmp_path / 'root'}",
        "method=slm_only",
        "slm=openai",
        "env=empty5x5_random",
        f"slm.backend.base_url={server.url}",
    ]

    def warnings() -> list[str]:
        lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        caplog.clear()
        return [line for line in lines if "no weights identity" in line]

    url_file = tmp_path / "slm.url"
    try:
        with caplog.at_level(logging.WARNING):
            base = plan_sweep([*over, "seed=0,1"])  # two cells, one warning
            [planned] = warnings()
            job(tmp_path / "root", tmp_path / "j", server.url)
            [started] = warnings()
            named = plan_sweep([*over, "slm.backend.identity=model-a-v1"])
            assert warnings() == []
            url_file.write_text(server.url + "\n")
            served_file(url_file).write_text(served_record(server.url, "model-a", "hf-local:aaa"))
            plan_sweep([*over, f"slm.backend.url_file={url_file}"])
            assert warnings() == []
    finally:
        server.stop()
    for line in (planned, started):
        assert "\n" not in line
        assert f"'model-a' served at {server.url}" in line
        assert "slm.backend.url_file=F" in line and "slm.backend.identity=<name>" in line
    assert len(base.cells) == 2 and named.cells[0].hash is not None
    assert named.cells[0].hash not in {c.hash for c in base.cells}  # a name is part of the cell


@pytest.mark.slow  # a cell against the suite's vLLM-compatible server on two tiny models
def test_a_server_restarted_on_other_weights_mid_cell_fails_the_cell(
    tmp_path, port, tiny_model
) -> None:
    """`python -m benchmark.serve`'s record beside the URL file names the weights; the server
    (tests/vllm_server.py on the tiny model, seed 0) is restarted at the same address under the
    same model id on other weights (seed 1) while a cell runs: the cell fails with one line
    naming both identities, and nothing of it is written as complete."""
    from tests.vllm_server import VLLMServer

    first, other = tiny_model(seed=0), tiny_model(seed=1)
    assert weights_of(str(first)) != weights_of(str(other))
    url_file = tmp_path / "slm.url"
    servers = [VLLMServer(str(first), port=port, name="tiny")]
    write_url_file(url_file, servers[0].url, "tiny", weights_of(str(first)))

    def restart_after_two_answers() -> None:
        while sum(path == "/v1/chat/completions" for path, _ in servers[0].bodies) < 2:
            time.sleep(0.01)
        servers[0].stop()  # an engine restart: connections refused meanwhile
        write_url_file(url_file, servers[0].url, "tiny", weights_of(str(other)))
        servers.append(VLLMServer(str(other), port=port, name="tiny"))

    restarter = threading.Thread(target=restart_after_two_answers, daemon=True)
    restarter.start()
    try:
        with pytest.raises(Exception, match="now serves") as err:
            job(
                tmp_path / "root",
                tmp_path / "j",
                "http://unused/v1",
                f"slm.backend.url_file={url_file}",
                "slm.backend.restart_wait_s=120",
                "eval.n_episodes=4",
            )
        restarter.join(timeout=60)
    finally:
        for server in servers:
            server.stop()
    was, now = (f"served:tiny#{weights_of(str(m))}" for m in (first, other))
    message = str(err.value)
    assert f"now serves {now}, not {was}" in message and "\n" not in message
    error = results.read_json(tmp_path / "j" / "error.json")
    assert f"now serves {now}" in error["message"]
    cell = tmp_path / "root" / "cells" / error["cell_hash"]
    assert (cell / "cell.json").exists()  # it had started
    assert not (cell / "summary.json").exists() and results.complete_cell(cell) is None


def test_a_reconnect_asks_the_server_which_model_it_serves(tmp_path, port, tiny_model) -> None:
    """A request that found the server down and gets through again asks it once more: the same
    weights come back elsewhere (the URL file's new address) and the answers go on; other
    weights published there, or a server that no longer lists the model (base_url alone), fail
    the batch naming both."""
    from tests.vllm_server import VLLMServer

    first, other = tiny_model(seed=0), tiny_model(seed=1)
    url_file = tmp_path / "slm.url"
    servers = [VLLMServer(str(first), name="tiny")]

    def restart(model: Path) -> str:
        servers[-1].stop()
        servers.append(VLLMServer(str(model), name="tiny"))
        write_url_file(url_file, servers[-1].url, "tiny", weights_of(str(model)))
        return servers[-1].url

    query = Query(
        messages=[{"role": "user", "content": "Wall ahead."}],
        actions=("TURN_LEFT", "FORWARD"),
        render_answer=lambda a, r: a,
        decoding=Decoding(max_new_tokens=4),
    )
    try:
        write_url_file(url_file, servers[0].url, "tiny", weights_of(str(first)))
        remote = OpenAIConsultant(url_file=str(url_file), restart_wait_s=60)
        [said] = remote.answer([query])
        restart(first)  # the same weights, elsewhere
        assert remote.answer([query])[0].text == said.text
        url = restart(other)
        with pytest.raises(ConsultantError, match=f"at {url} now serves served:tiny#hf-local:"):
            remote.answer([query])
        direct = OpenAIConsultant(base_url=url, restart_wait_s=60)
        servers[-1].stop()  # a request finds it down, then another model id at that address
        failed: list[BaseException] = []

        def ask() -> None:
            try:
                direct.answer([query])
            except ConsultantError as exc:
                failed.append(exc)

        asking = threading.Thread(target=ask)
        asking.start()
        time.sleep(0.5)
        servers.append(VLLMServer(str(other), name="tiny-b", port=servers[-1].port))
        asking.join(timeout=60)
        assert len(failed) == 1 and "a model list without 'tiny' (tiny-b)" in str(failed[0])
    finally:
        servers[-1].stop()
