"""Secrets are never written: an API key (registered when read, or pasted where its variable's
name belongs, or echoed by a server's 401 body) and a URL's user:password are redacted in
error.json, the cell identity and cell.json, the response cache's identity, Hydra's .hydra/ files
and the W&B run config, by the one helper benchmark.redact."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest

from benchmark import redact as redaction
from benchmark.cell import CellSpec
from benchmark.consultants import ConsultantError
from benchmark.consultants.openai_compat import OpenAIConsultant
from benchmark.job import run_job
from benchmark.redact import REDACTED, redact, redact_data, redact_file
from benchmark.tracking import run_config
from tests.conftest import compose_cfg, run_cli
from tests.test_openai_server import q
from tests.test_served_model import FakeServer, free_port

PASTED = "sk-proj-Abc123Def456Ghi789Jkl0"  # a key given where its variable's name belongs
CREDS = "alice:hunter2hunter2"


def test_redact_keys_bearer_userinfo_and_registered_secrets() -> None:
    assert redact(f"api_key_env={PASTED} failed") == f"api_key_env={REDACTED} failed"
    assert redact("hf_" + "a" * 30) == REDACTED
    assert redact("Authorization: Bearer abc.def-ghi") == f"Authorization: Bearer {REDACTED}"
    assert (
        redact(f"POST https://{CREDS}@api.example.com/v1/x") == "POST https://api.example.com/v1/x"
    )
    assert redact("http://host:8000/v1/path@tag") == "http://host:8000/v1/path@tag"  # no userinfo
    redaction.register("plain-secret-value")
    assert redact("echo: plain-secret-value!") == f"echo: {REDACTED}!"
    text = "task-abcdefghijklmnopqrstuv and 0123456789abcdef sha, ask-x"  # nothing secret
    assert redact(text) == text
    assert redact_data({"a": [f"https://{CREDS}@h/v1", ("x",)], 3: None}) == {
        "a": ["https://h/v1", ("x",)],
        3: None,
    }


def test_log_records_are_redacted(caplog) -> None:
    handler = logging.StreamHandler(io.StringIO())
    logging.getLogger().addHandler(handler)
    try:
        redaction.redact_logging()
        logging.getLogger("benchmark.test").warning("POST %s failed", f"http://{CREDS}@h/v1")
    finally:
        logging.getLogger().removeHandler(handler)
    assert handler.stream.getvalue() == "POST http://h/v1 failed\n"


def test_redact_file_rewrites_only_files_with_secrets(tmp_path) -> None:
    clean, dirty = tmp_path / "clean.yaml", tmp_path / "dirty.yaml"
    clean.write_text("a: 1\n")
    dirty.write_text(f"- slm.backend.api_key_env={PASTED}\n")
    assert not redact_file(clean) and not redact_file(tmp_path / "missing.yaml")
    assert redact_file(dirty) and PASTED not in dirty.read_text()


def test_credentials_in_base_url_never_enter_an_identity_or_cell_json(tmp_path) -> None:
    """The cell's hash is the one without credentials; the cache's identity has none either."""

    def spec(url: str) -> CellSpec:
        cfg = compose_cfg(tmp_path, "slm=openai", "method=slm_only", f"slm.backend.base_url={url}")
        return CellSpec.from_config(cfg).with_inputs(model=None)

    port = free_port()
    with_creds = spec(f"http://{CREDS}@127.0.0.1:{port}/v1")
    assert with_creds.hash == spec(f"http://127.0.0.1:{port}/v1").hash
    assert "hunter2" not in json.dumps(with_creds.record())
    server = FakeServer(port, "m")
    try:
        remote = OpenAIConsultant(base_url=f"http://{CREDS}@127.0.0.1:{port}/v1")
    finally:
        server.stop()
    assert "hunter2" not in remote.identity and "hunter2" not in repr(remote)


def test_a_pasted_key_is_refused_without_being_repeated_nor_written(tmp_path) -> None:
    cfg = compose_cfg(
        tmp_path,
        "slm=openai",
        "method=slm_only",
        "env=empty5x5_random",
        f"slm.backend.api_key_env={PASTED}",
        f"slm.backend.base_url=http://{CREDS}@127.0.0.1:{free_port()}/v1",
    )
    with pytest.raises(Exception, match="NAME of an environment variable") as err:
        run_job(cfg, tmp_path / "job", multirun=False)
    assert PASTED not in str(err.value)
    written = (tmp_path / "job" / "error.json").read_text()
    assert "api_key_env" in written  # the config is recorded, its secrets are not
    assert PASTED not in written and "hunter2" not in written


def test_a_key_echoed_in_a_401_body_is_redacted(monkeypatch, tmp_path) -> None:
    """The key read from its variable is registered: a server that echoes it in its error body
    (some proxies do) does not get it into the error."""
    key = "key-from-the-environment-0001"
    monkeypatch.setenv("BENCH_TEST_ECHO_KEY", key)
    server = FakeServer(free_port(), "m", refuse_key=True)
    try:
        remote = OpenAIConsultant(base_url=server.url, api_key_env="BENCH_TEST_ECHO_KEY")
        with pytest.raises(ConsultantError, match="HTTP 401") as err:
            remote.answer([q("Wall ahead.", max_new_tokens=4)])
    finally:
        server.stop()
    assert key not in str(err.value) and REDACTED in str(err.value)


def test_wandb_run_config_holds_no_secret() -> None:
    config = {"slm": {"backend": {"base_url": f"https://{CREDS}@h/v1", "key": PASTED}}}
    assert "hunter2" not in json.dumps(run_config(config))
    assert PASTED not in json.dumps(run_config(config))


@pytest.mark.slow  # a CLI process (~15 s)
def test_hydra_files_of_a_refused_job_hold_no_secret(tmp_path) -> None:
    """`python -m benchmark` with a pasted key and a URL with credentials: the job is refused,
    and nothing it wrote (.hydra/, error.json, its log) holds either."""
    proc = run_cli(
        tmp_path,
        "method=slm_only",
        "slm=openai",
        "env=empty5x5_random",
        f"slm.backend.api_key_env={PASTED}",
        f"slm.backend.base_url=http://{CREDS}@127.0.0.1:9/v1",
        check=False,
    )
    assert proc.returncode != 0
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    hydra = [p for p in written if p.parent.name == ".hydra"]
    assert {p.name for p in hydra} >= {"config.yaml", "hydra.yaml", "overrides.yaml"}
    assert any(p.name == "error.json" for p in written)
    for path in written:
        text = Path(path).read_text(errors="replace")
        assert PASTED not in text and "hunter2" not in text, path
