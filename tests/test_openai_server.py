"""The OpenAI-compatible backend end to end against a real `transformers serve` process serving
the tiny model, plus its start-up errors (missing API key variable, unreachable server)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from benchmark.consultants import ConsultantError
from benchmark.consultants.base import Decoding, Query
from benchmark.consultants.hf import HFConsultant
from benchmark.consultants.openai_compat import OpenAIConsultant
from benchmark.consultants.tiny import build_tiny

SERVE = Path(sys.executable).parent / "transformers"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def q(text: str, **decoding) -> Query:
    return Query(
        messages=[
            {"role": "system", "content": "You guide an agent."},
            {"role": "user", "content": text},
        ],
        actions=("TURN_LEFT", "FORWARD"),
        render_answer=lambda a, r: a,
        decoding=Decoding(**decoding),
    )


def test_missing_api_key_variable_is_named(monkeypatch) -> None:
    monkeypatch.delenv("BENCH_TEST_NO_SUCH_KEY", raising=False)
    with pytest.raises(ConsultantError, match="BENCH_TEST_NO_SUCH_KEY"):
        OpenAIConsultant(base_url="http://127.0.0.1:9/v1", api_key_env="BENCH_TEST_NO_SUCH_KEY")


def test_unreachable_server_fails_at_construction() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(ConsultantError, match=rf"unreachable at {url}/models"):
        OpenAIConsultant(base_url=url, timeout=2)


def test_api_key_never_in_repr(monkeypatch) -> None:
    monkeypatch.setenv("BENCH_TEST_KEY", "sk-secret-123")
    with pytest.raises(ConsultantError) as err:  # nothing listens, but the key was read first
        OpenAIConsultant(
            base_url=f"http://127.0.0.1:{free_port()}/v1", api_key_env="BENCH_TEST_KEY"
        )
    assert "sk-secret-123" not in str(err.value)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`transformers serve` on a free 127.0.0.1 port, pinned to the tiny model directory."""
    if not SERVE.exists():
        pytest.skip(f"{SERVE} missing: install the [serving] extra (transformers[serving])")
    model_dir = build_tiny(tmp_path_factory.getbasetemp() / "tiny-qwen3-s0", 0)
    port = free_port()
    log = (tmp_path_factory.getbasetemp() / "serve.log").open("w")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [str(SERVE), "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port)]
        + ["--device", "cpu"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.time() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"transformers serve exited with {proc.returncode}; see {log.name}")
            try:
                if httpx.get(f"{base}/models", timeout=1, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                pytest.fail(f"transformers serve not ready after 90 s; see {log.name}")
            time.sleep(0.25)
        yield base, model_dir, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


@pytest.mark.slow
def test_end_to_end_against_transformers_serve(served) -> None:
    base, model_dir, proc = served
    remote = OpenAIConsultant(base_url=base, concurrency=4, max_retries=1)
    assert remote.model == str(model_dir)  # taken from /v1/models
    local = HFConsultant(path=str(model_dir))
    queries = [q(t, max_new_tokens=8) for t in ["Wall ahead.", "Goal north.", "Door east."]]
    queries.append(q("Think first.", max_new_tokens=8, enable_thinking=True, thinking_budget=6))
    answers = remote.answer(queries)
    assert len(answers) == 4
    assert all(a.prompt_tokens > 0 and 0 < a.generated_tokens <= 14 for a in answers)
    assert all("<think>" not in a.text and "</think>" not in a.text for a in answers)
    # same weights, same template, greedy: the server's text equals the local backend's
    local_texts = [a.text for a in local.answer(queries[:3])]
    assert [a.text for a in answers[:3]] == local_texts
    # the server dies mid-run: retries are exhausted, the error names the URL and the cause
    proc.terminate()
    proc.wait(timeout=15)
    with pytest.raises(ConsultantError, match=rf"POST {base}/chat/completions.*attempt"):
        remote.answer([q("Anyone there?")])
