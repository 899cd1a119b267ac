"""The OpenAI-compatible backend end to end against a real `transformers serve` process serving
the tiny model, plus its start-up errors (missing API key variable, unreachable server), its wait
for a server that comes up late (slm.backend.wait_timeout / url_file) and `python -m
benchmark.serve`, the one server of a sweep."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from benchmark.consultants import ConsultantError
from benchmark.consultants.base import Decoding, Query
from benchmark.consultants.hf import HFConsultant
from benchmark.consultants.openai_compat import OpenAIConsultant
from benchmark.consultants.tiny import SPECIAL_TOKENS
from benchmark.serve import stop_process
from tests.conftest import REPO, compose_cfg
from tests.consultants.test_prefix import ask_queries

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


class LateServer:
    """A stdlib OpenAI-ish server that starts listening `delay` s after start() and then answers
    /v1/models with HTTP 503 `loading` times (a model still loading) before 200."""

    def __init__(self, delay: float, loading: int) -> None:
        self.delay, self.loading, self.gets = delay, loading, 0
        self.port = free_port()
        self.httpd: ThreadingHTTPServer | None = None
        self.ready = threading.Event()

    def start(self) -> None:
        def run() -> None:
            time.sleep(self.delay)
            late = self

            class Handler(BaseHTTPRequestHandler):
                def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                    late.gets += 1
                    up = late.gets > late.loading
                    body = json.dumps({"data": [{"id": "late"}]} if up else {"error": "loading"})
                    self.send_response(200 if up else 503)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body.encode())

                def log_message(self, *args: object) -> None:
                    pass

            self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
            self.ready.set()
            self.httpd.serve_forever()

        threading.Thread(target=run, daemon=True).start()

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()


@pytest.mark.slow  # waits for a late server (~5 s)
def test_waits_for_a_server_that_comes_up_late(tmp_path) -> None:
    """The cell starts first; the URL file appears and the server answers 503 before it is up."""
    late = LateServer(delay=1.5, loading=2)
    url_file = tmp_path / "slm.url"
    late.start()
    threading.Timer(1.0, url_file.write_text, [f"http://127.0.0.1:{late.port}/v1\n"]).start()
    t0 = time.monotonic()
    try:
        remote = OpenAIConsultant(url_file=str(url_file), wait_timeout=30)
    finally:
        late.stop()
    assert time.monotonic() - t0 >= 1.5
    assert late.gets == 3  # two 503s, then the model list
    assert remote.model == "late"
    assert remote.base_url == f"http://127.0.0.1:{late.port}/v1"
    assert remote.identity == f"openai:late@{url_file}"  # not the address: it moves per job


@pytest.mark.slow  # waits out a timeout (~2 s)
def test_never_healthy_fails_after_the_timeout_naming_url_and_timeout() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    t0 = time.monotonic()
    with pytest.raises(ConsultantError) as err:
        OpenAIConsultant(base_url=url, wait_timeout=1.5)
    waited = time.monotonic() - t0
    assert 1.5 <= waited < 10
    msg = str(err.value)
    assert f"at {url} not healthy after slm.backend.wait_timeout=1.5 s" in msg
    assert f"unreachable at {url}/models" in msg  # the last cause


@pytest.fixture
def black_hole():
    """A 127.0.0.1 server that accepts connections (the kernel's backlog does) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"


@pytest.mark.slow  # waits out a deadline (~2 s)
def test_wait_timeout_is_a_deadline_against_a_server_that_never_answers(black_hole) -> None:
    """Each probe waited up to 10 s whatever the deadline (wait_timeout=5: ~16 s)."""
    t0 = time.monotonic()
    with pytest.raises(ConsultantError) as err:
        OpenAIConsultant(base_url=black_hole, wait_timeout=2)
    waited = time.monotonic() - t0
    assert 2 <= waited < 3, waited
    assert f"at {black_hole} not healthy after slm.backend.wait_timeout=2 s" in str(err.value)


@pytest.mark.slow  # waits out a deadline (~2 s)
def test_serve_start_timeout_is_a_deadline_too(black_hole) -> None:
    from benchmark.serve import wait_healthy

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        t0 = time.monotonic()
        with pytest.raises(SystemExit, match=f"server at {black_hole} not healthy after 2 s"):
            wait_healthy(black_hole, proc, 2.0)
        waited = time.monotonic() - t0
    finally:
        stop_process(proc)
    assert 2 <= waited < 3, waited


@pytest.mark.parametrize("offline", ["0", "1"])
def test_serve_fails_fast_on_a_model_neither_local_nor_cached(tmp_path, offline) -> None:
    """With no network the server retried the hub for minutes (unless offline)."""
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env |= {"HF_HUB_CACHE": str(tmp_path / "hf"), "HF_HUB_OFFLINE": offline}
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "benchmark.serve", "--model", "someone/unknown-model"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    waited = time.monotonic() - t0
    assert proc.returncode != 0 and waited < 20, (waited, proc.stderr[-2000:])
    assert "--model 'someone/unknown-model' is neither a local path nor in the Hugging Face " in (
        proc.stderr
    )
    assert ("HF_HUB_OFFLINE" if offline == "1" else "the hub is unreachable") in proc.stderr
    assert "starting:" not in proc.stderr  # no server was started


def test_serve_names_a_missing_local_path(tmp_path) -> None:
    from benchmark.serve import check_model

    with pytest.raises(SystemExit, match="--model '/nonexistent/model' is not a local path"):
        check_model("/nonexistent/model")


def test_missing_url_file_fails_after_the_timeout_naming_the_file(tmp_path) -> None:
    url_file = tmp_path / "never.url"
    with pytest.raises(ConsultantError) as err:  # the config's base_url is not what it waits for
        OpenAIConsultant(
            base_url="http://127.0.0.1:8000/v1", url_file=str(url_file), wait_timeout=1
        )
    assert str(err.value).startswith(
        f"OpenAI-compatible server at (no URL yet) from url_file {url_file} not healthy after "
        f"slm.backend.wait_timeout=1 s (last: not up yet: url_file {url_file} does not exist)"
    )


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("slm.backend.wait_timeout=-1", "slm.backend.wait_timeout=-1 is invalid"),
        ("slm.backend.wait_timeout=soon", "slm.backend.wait_timeout='soon' is invalid"),
        ("slm.backend.wait_timeout=true", "slm.backend.wait_timeout=True is invalid"),
        ("slm.backend.url_file=''", "slm.backend.url_file='' is invalid"),
        ("slm.backend.restart_wait_s=-5", "slm.backend.restart_wait_s=-5 is invalid"),
        ("slm.backend.choice_logprobs=echo", "slm.backend.choice_logprobs='echo' is invalid"),
    ],
)
def test_bad_wait_settings_are_refused(tmp_path, override, expected) -> None:
    from benchmark.validate import validate

    cfg = compose_cfg(tmp_path, "slm=openai", "gate=always", override)
    with pytest.raises(ValueError, match="allowed") as err:
        validate(cfg)
    assert expected in str(err.value)


def test_wait_settings_are_not_part_of_the_cell(tmp_path) -> None:
    """How long a cell waits and where it reads the address do not change its answers."""
    from benchmark.cell import CellSpec

    def cell_hash(*overrides: str) -> str:
        cfg = compose_cfg(tmp_path, "slm=openai", "method=slm_only", *overrides)
        return CellSpec.from_config(cfg).with_inputs(model=None).hash

    assert cell_hash() == cell_hash(
        "slm.backend.wait_timeout=600",
        f"slm.backend.url_file={tmp_path / 'a.url'}",
        "slm.backend.restart_wait_s=0",
        "slm.backend.choice_logprobs=prompt_logprobs",
    )
    assert cell_hash() != cell_hash("slm.backend.model=other")


def start_serve(model_dir: Path, url_file: Path, log) -> subprocess.Popen:
    """`python -m benchmark.serve` (the sweep recipe's server: `transformers serve` with
    continuous batching) on a free 127.0.0.1 port."""
    cmd = [sys.executable, "-m", "benchmark.serve", "--model", str(model_dir), "--device", "cpu"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(
        [*cmd, "--url-file", str(url_file)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_model):
    """The tiny model behind `python -m benchmark.serve`; yields its URL, model dir and process."""
    if not SERVE.exists():
        pytest.skip(f"{SERVE} missing: install the [serving] extra (transformers[serving])")
    base_dir = tmp_path_factory.getbasetemp()
    model_dir = tiny_model()
    url_file = base_dir / "served.url"
    log = (base_dir / "serve.log").open("w")
    proc = start_serve(model_dir, url_file, log)
    try:
        deadline = time.time() + 120
        while not url_file.exists():
            if proc.poll() is not None:
                pytest.fail(f"benchmark.serve exited with {proc.returncode}; see {log.name}")
            if time.time() > deadline:
                pytest.fail(f"benchmark.serve not ready after 120 s; see {log.name}")
            time.sleep(0.25)
        yield url_file.read_text().strip(), model_dir, proc
    finally:
        stop_process(proc)
        log.close()


LOCKSTEP_CASES = [  # (env, prompt variant, overrides): real prompts, no thinking
    ("fourrooms", "basic", ()),
    ("fourrooms", "stateful", ()),
    ("higherlower", "enriched", ()),
    ("doorkey8", "belief", ("prompt.belief_max_new_tokens=48",)),  # 192: minutes on this CPU
]


@pytest.mark.slow
@pytest.mark.parametrize(("env", "prompt", "overrides"), LOCKSTEP_CASES)
def test_lockstep_step_through_the_server_equals_the_hf_backend(
    served, tmp_path, env, prompt, overrides
) -> None:
    """A lockstep step's queries (the first consultation of 8 episodes) sent concurrently to
    `transformers serve` get, under greedy decoding, the in-process hf backend's answers: the same
    prompt tokens (same chat template), generated tokens and text. One known difference, in the
    server: for Qwen-type models it parses the raw decode (special tokens kept) with a response
    template instead of decoding with skip_special_tokens, so a special token the random tiny
    model emits mid-answer (`<|im_start|>`) stays in its text; a real model ends at `<|im_end|>`,
    which that template cuts. docs/cluster.md, "One engine for a sweep"."""
    base, model_dir, _ = served
    queries = ask_queries(tmp_path, env, prompt, *overrides)
    assert len(queries) == 8
    remote = OpenAIConsultant(base_url=base, concurrency=8, max_retries=1, timeout=900)
    local = HFConsultant(path=str(model_dir), num_threads=1)
    got = remote.answer(queries)
    want = local.answer(queries)
    assert [a.prompt_tokens for a in got] == [a.prompt_tokens for a in want]
    assert [a.generated_tokens for a in got] == [a.generated_tokens for a in want]
    assert [without_special(a.text) for a in got] == [a.text for a in want]
    remote.close()


def without_special(text: str) -> str:
    for token in SPECIAL_TOKENS:
        text = text.replace(token, "")
    return text


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
    # the server dies mid-run (so this test stays the last one on `served`): retries are exhausted, the error names the URL and the cause
    proc.terminate()
    proc.wait(timeout=15)
    with pytest.raises(ConsultantError, match=rf"POST {base}/chat/completions.*attempt"):
        remote.answer([q("Anyone there?")])


@pytest.mark.slow
def test_serve_started_after_the_cell_hands_it_the_url(tmp_path, tiny_model) -> None:
    """`python -m benchmark.serve` started after the cell: the cell waits for the URL file, gets
    the tiny model's answers; SIGTERM stops the server and removes the file."""
    model_dir = tiny_model()
    url_file = tmp_path / "serve" / "slm.url"
    log = (tmp_path / "serve.log").open("w")
    procs: list[subprocess.Popen] = []

    def start() -> None:
        procs.append(start_serve(model_dir, url_file, log))

    threading.Timer(2.0, start).start()
    try:
        remote = OpenAIConsultant(url_file=str(url_file), wait_timeout=120, max_retries=1)
        assert remote.model == str(model_dir)
        [answer] = remote.answer([q("Wall ahead.", max_new_tokens=8)])
        assert answer.prompt_tokens > 0 and 0 < answer.generated_tokens <= 8
        remote.close()
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=60)
        log.close()
    assert procs[0].returncode == 0
    assert not url_file.exists()  # no cell may find a dead address
    text = (tmp_path / "serve.log").read_text()
    assert f"export BENCHMARK_SLM_URL={remote.base_url}" in text


@pytest.mark.slow
def test_sbatch_recipe_serves_the_sweep(tmp_path) -> None:
    """launchers/serve/serve.sbatch run as its batch script would be (bash, no SLURM needed):
    it binds 0.0.0.0, writes this node's URL to $BENCHMARK_ROOT/serve/<job name>.url, and SIGTERM
    (scancel) stops the server and removes the file."""
    env = {
        **os.environ,
        "BENCHMARK_ROOT": str(tmp_path),
        "ENGINE": "transformers",
        "SLURM_SUBMIT_DIR": str(REPO),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    env.pop("URL_FILE", None)
    url_file = tmp_path / "serve" / "ask-serve.url"
    script = REPO / "launchers" / "serve" / "serve.sbatch"
    log = (tmp_path / "sbatch.log").open("w")
    proc = subprocess.Popen(
        ["bash", str(script), "tiny", "--device", "cpu", "--threads", "1"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        remote = OpenAIConsultant(url_file=str(url_file), wait_timeout=120, max_retries=1)
        assert remote.base_url.startswith(f"http://{socket.gethostname()}:")
        assert remote.model == str(tmp_path / "models" / "tiny-qwen3-s0")  # the slm option
        [answer] = remote.answer([q("Goal north.", max_new_tokens=4)])
        assert 0 < answer.generated_tokens <= 4
        remote.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        log.close()
    assert proc.returncode == 0, (tmp_path / "sbatch.log").read_text()[-2000:]
    assert not url_file.exists()


def test_server_command_per_engine() -> None:
    from benchmark.serve import advertised_url, server_command

    base = ["/x", "serve", "m", "--host", "0.0.0.0", "--port", "9"]
    cpu = server_command("transformers", "m", "0.0.0.0", 9, "cpu", "/x", ["--dtype", "float32"])
    assert cpu == [*base, "--device", "cpu", "--dtype", "float32"]  # no 90%-of-RAM KV pool
    gpu = server_command("transformers", "m", "0.0.0.0", 9, "cuda:0", "/x", [])
    assert gpu == [*base, "--device", "cuda:0", "--continuous-batching"]
    vllm = server_command("vllm", "m", "0.0.0.0", 9, "auto", "/x", ["--max-model-len", "8192"])
    assert vllm == [*base, "--enable-prefix-caching", "--max-model-len", "8192"]
    with pytest.raises(
        SystemExit, match="--engine 'sglang' is invalid: allowed transformers, vllm"
    ):
        server_command("sglang", "m", "0.0.0.0", 9, "auto", "/x", [])
    assert advertised_url("0.0.0.0", 9) == f"http://{socket.gethostname()}:9/v1"
    assert advertised_url("127.0.0.1", 9) == "http://127.0.0.1:9/v1"


@pytest.mark.slow  # two engine starts (~15 s)
def test_serve_restarts_an_engine_that_dies_and_cells_wait_for_it(tmp_path, tiny_model) -> None:
    """`python -m benchmark.serve --engine vllm --restarts 1` with the small vLLM-compatible
    server (tests/vllm_server.py) as the engine: the engine is killed mid-run; serve starts it
    again on the same address and the cell's next request, waiting (restart_wait_s), gets its
    answer. Killed once more, past its last restart, serve exits with the engine's code and
    removes the URL file."""
    model_dir = tiny_model()
    engine = tmp_path / "vllm"
    engine.write_text(f'#!/bin/sh\ncd {REPO} && exec {sys.executable} -m tests.vllm_server "$@"\n')
    engine.chmod(0o755)
    pids, url_file = tmp_path / "pids", tmp_path / "slm.url"
    log = (tmp_path / "serve.log").open("w")
    cmd = [sys.executable, "-m", "benchmark.serve", "--engine", "vllm", "--bin", str(engine)]
    cmd += ["--model", str(model_dir), "--url-file", str(url_file), "--restarts", "1"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_TEST_PIDS": str(pids)}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)

    def engines() -> list[int]:
        return [int(p) for p in pids.read_text().split()] if pids.exists() else []

    try:
        remote = OpenAIConsultant(url_file=str(url_file), wait_timeout=120, restart_wait_s=120)
        assert remote.vllm_like  # owned_by "vllm": every sampling key goes
        [first] = remote.answer([q("Wall ahead.", max_new_tokens=4)])
        os.kill(engines()[0], signal.SIGKILL)
        [again] = remote.answer([q("Wall ahead.", max_new_tokens=4)])  # waits for the restart
        assert again.text == first.text and len(engines()) == 2
        assert url_file.read_text().strip() == remote.base_url  # the same address, written again
        os.kill(engines()[1], signal.SIGKILL)
        assert proc.wait(timeout=60) != 0  # past its last restart: the engine's failure
    finally:
        stop_process(proc)
        log.close()
    assert not url_file.exists()
    text = (tmp_path / "serve.log").read_text()
    assert "the server exited with code -9: restart 1 of 1" in text
