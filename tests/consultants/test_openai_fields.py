"""A decoding field the server refuses fails the cell before any work (the openai backend's
`check_decoding`), or is sent where the server takes it (`transformers serve`'s
generation_config). The suite's vLLM-compatible test server on the tiny model plays a server that
takes only `transformers serve`'s fields (tests/vllm_server.py, `fields`); the last test runs the
real `transformers serve` as docs/cluster.md's one-machine recipe starts it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.consultants import ConsultantError, make_consultant
from benchmark.consultants.base import Decoding, Query
from benchmark.consultants.hf import HFConsultant
from benchmark.job import run_job
from tests.conftest import REPO, compose_cfg
from tests.test_served_model import job as served_job
from tests.vllm_server import TRANSFORMERS_FIELDS, VLLMServer

STRICT = TRANSFORMERS_FIELDS - {"generation_config"}  # a server that takes OpenAI's fields only


@pytest.fixture
def server(request, tiny_model):
    """The test server taking `request.param` fields (None: every field, as vLLM)."""
    fields = getattr(request, "param", None)
    srv = VLLMServer(str(tiny_model()), fields=fields)
    yield srv
    srv.stop()


def job(root: Path, url: str, *overrides: str) -> dict | None:
    """A consultant-only cell under the default protocol (paper: repetition_penalty 1.1)."""
    return served_job(root, root / "job", url, "slm.backend.max_retries=0", *overrides)


def chats(srv: VLLMServer) -> list[dict]:
    return [body for path, body in srv.bodies if path == "/v1/chat/completions"]


def filed(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name in ("summary.json", "episodes.jsonl")]


@pytest.mark.parametrize("server", [STRICT], indirect=True)
def test_a_refused_field_fails_the_cell_before_any_episode(tmp_path, server) -> None:
    """max_tokens=1 requests only, then one line naming the field, the URL, the model and the
    setting that stops sending it; no episode ran and nothing is filed. (Before, every episode's
    first batch was sent and refused with HTTP 422.)"""
    with pytest.raises(ConsultantError) as err:
        job(tmp_path, server.url)
    message = str(err.value)
    assert "\n" not in message
    for part in ("repetition_penalty=1.1", server.url, server.name, "HTTP 422"):
        assert part in message
    assert "slm.decoding.repetition_penalty=1.0" in message
    # the probe, and again with the penalty in generation_config (which this server refuses)
    probes = chats(server)
    assert [body["max_tokens"] for body in probes] == [1, 1]
    assert "generation_config" in probes[1] and "repetition_penalty" not in probes[1]
    assert filed(tmp_path) == []


@pytest.mark.parametrize("server", [STRICT], indirect=True)
def test_the_cell_runs_with_the_setting_the_refusal_names(tmp_path, server) -> None:
    with pytest.raises(ConsultantError) as err:
        job(tmp_path / "refused", server.url)
    [setting] = re.findall(r"set (slm\.decoding\.\w+=[\w.]+)", str(err.value))
    refused = len(chats(server))
    summary = job(tmp_path, server.url, setting)
    assert summary is not None and summary["cell_hash"]
    bodies = chats(server)[refused:]
    assert len(bodies) > 1 and all("repetition_penalty" not in body for body in bodies)
    assert any(p.name == "summary.json" for p in filed(tmp_path))


def test_a_server_that_takes_every_field_is_unaffected(tmp_path, server) -> None:
    """vLLM: every request carries the penalty where it always did; the probe is one request."""
    summary = job(tmp_path, server.url)
    assert summary is not None and summary["cell_hash"]
    bodies = chats(server)
    assert bodies[0]["max_tokens"] == 1 and len(bodies) > 1
    assert all(body["repetition_penalty"] == pytest.approx(1.1) for body in bodies)
    assert all("generation_config" not in body for body in bodies)


@pytest.mark.parametrize("server", [TRANSFORMERS_FIELDS], indirect=True)
def test_transformers_serve_gets_the_penalty_in_generation_config(tmp_path, server, tiny_model):
    """A server that refuses `repetition_penalty` at the top level but takes generation_config
    (`transformers serve`) gets it there, and answers as the hf backend does with it."""
    cfg = compose_cfg(
        tmp_path, "slm=openai", f"slm.backend.base_url={server.url}", "slm.cache=false"
    )
    remote = make_consultant(cfg.slm, cfg.paths)
    assert remote.nested == ("repetition_penalty",)
    decoding = Decoding(max_new_tokens=12, repetition_penalty=1.5)
    queries = [
        Query([{"role": "user", "content": text}], (), lambda a, _r: a, decoding)
        for text in ("Wall ahead.", "Goal north, goal north.")
    ]
    got = remote.answer(queries)
    remote.close()
    body = chats(server)[-1]
    assert "repetition_penalty" not in body
    assert json.loads(body["generation_config"]) == {"repetition_penalty": 1.5}
    local = HFConsultant(path=str(tiny_model()), num_threads=1)
    want = local.answer(queries)
    off = local.answer([Query(q.messages, (), q.render_answer, Decoding(12)) for q in queries])
    local.close()
    assert [a.text for a in got] == [a.text for a in want]
    assert [a.generated_tokens for a in got] == [a.generated_tokens for a in want]
    # the penalty changes the tiny model's answers: it was applied, not dropped
    assert [a.text for a in off] != [a.text for a in want]


SERVE = Path(sys.executable).parent / "transformers"


@pytest.mark.slow  # starts `transformers serve` (~15 s) and runs a cell through it
def test_the_one_machine_recipe_runs_as_written(tmp_path, tiny_model) -> None:
    """docs/cluster.md, "One engine for a sweep", on one machine: `python -m benchmark.serve
    --model <tiny> --device cpu --threads 1 --url-file F`, then a cell with `slm=openai
    slm.backend.url_file=F slm.backend.wait_timeout=300` under the default protocol."""
    if not SERVE.exists():
        pytest.skip(f"{SERVE} missing: install the [serving] extra (transformers[serving])")
    url_file = tmp_path / "slm.url"
    cmd = [sys.executable, "-m", "benchmark.serve", "--model", str(tiny_model()), "--device"]
    cmd += ["cpu", "--threads", "1", "--url-file", str(url_file)]
    log = (tmp_path / "serve.log").open("w")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        cfg = compose_cfg(
            tmp_path / "root",
            "method=slm_only",
            "env=empty5x5_random",
            "eval.n_episodes=2",
            "slm=openai",
            f"slm.backend.url_file={url_file}",
            "slm.backend.wait_timeout=300",
        )
        summary = run_job(cfg, tmp_path / "job", multirun=False)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    assert summary is not None and summary["cell_hash"], (tmp_path / "serve.log").read_text()
    assert "Unexpected fields" not in (tmp_path / "serve.log").read_text()
