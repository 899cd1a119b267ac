"""Secrets are never written: a URL with credentials (user:password@, ?api_key=...) and a key
pasted where its variable's name belongs are refused before Hydra writes anything; an API key
(registered when read, pasted into another field, or echoed by a server's 401 body) and a URL's
credentials are redacted in error.json, the cell identity and cell.json, the response cache's
identity, Hydra's .hydra/ files and logs, and the W&B run, by the one helper benchmark.redact."""

from __future__ import annotations

import io
import json
import logging

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
    assert redact("http://h/v1?api_key=QS3cr3t&x=1#f") == f"http://h/v1?api_key={REDACTED}&x=1#f"
    assert redact("http://h/v1?model=a&access_token=QS3cr3t") == (
        f"http://h/v1?model=a&access_token={REDACTED}"
    )
    assert redact("http://h/v1?monkey=1&keyboard=2") == "http://h/v1?monkey=1&keyboard=2"
    assert redact_data({"a": [f"https://{CREDS}@h/v1", ("x",)], 3: None}) == {
        "a": ["https://h/v1", ("x",)],
        3: None,
    }


@pytest.mark.parametrize(
    ("url", "what"),
    [
        (f"http://{CREDS}@h/v1", "a user:password@"),
        ("http://h/v1?api_key=QS3cr3t", "the query parameter api_key"),
        ("https://h/v1?model=m&Token=QS3cr3t", "the query parameter Token"),
        ("http://h/v1?key=QS3cr3t", "the query parameter key"),
        ("http://h:8000/v1", None),
        ("http://h/v1?model=monkey", None),
    ],
)
def test_url_credentials_are_named_without_repeating_them(url, what) -> None:
    assert redaction.url_credentials(url) == what
    if what is None:
        redaction.refuse_url_credentials("slm.backend.base_url", url)  # accepted
        return
    with pytest.raises(ValueError, match="slm.backend.api_key_env") as err:
        redaction.refuse_url_credentials("slm.backend.base_url", url)
    assert "QS3cr3t" not in str(err.value) and "hunter2" not in str(err.value)
    assert what in str(err.value)


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
        f"slm.backend.base_url=http://127.0.0.1:{free_port()}/v1",
    )
    with pytest.raises(Exception, match="NAME of an environment variable") as err:
        run_job(cfg, tmp_path / "job", multirun=False)
    assert PASTED not in str(err.value)
    written = (tmp_path / "job" / "error.json").read_text()
    assert "api_key_env" in written  # the config is recorded, its secrets are not
    assert PASTED not in written


@pytest.mark.parametrize(
    "url", [f"http://{CREDS}@127.0.0.1:9/v1", "http://127.0.0.1:9/v1?api_key=hunter2hunter2"]
)
def test_a_url_with_credentials_is_refused_by_validation(tmp_path, url) -> None:
    """A URL from a config file reaches the job: refused before any work, not repeated."""
    cfg = compose_cfg(
        tmp_path, "slm=openai", "method=slm_only", "env=empty5x5_random", "tracking=wandb"
    )
    cfg.slm.backend.base_url = url
    with pytest.raises(ValueError, match="slm.backend.base_url holds a URL with credentials"):
        run_job(cfg, tmp_path / "job", multirun=False)
    assert "hunter2" not in (tmp_path / "job" / "error.json").read_text()
    assert not (tmp_path / "wandb").exists()  # refused before the W&B run starts


def test_a_url_with_credentials_in_the_composed_config_is_refused(tmp_path) -> None:
    """A preset's or the local config's URL is checked before Hydra writes (benchmark.__main__)."""
    from benchmark.__main__ import refuse_config_secrets

    cfg = compose_cfg(tmp_path, "slm=openai")
    refuse_config_secrets(cfg)  # the default URL has none
    cfg.slm.backend.base_url = "http://127.0.0.1:9/v1?token=hunter2hunter2"
    with pytest.raises(SystemExit, match="slm.backend.base_url holds a URL with credentials"):
        refuse_config_secrets(cfg)


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


@pytest.mark.parametrize(
    "secret",
    [
        f"slm.backend.base_url=http://{CREDS}@127.0.0.1:9/v1",
        'slm.backend.base_url="http://127.0.0.1:9/v1?api_key=hunter2hunter2"',
        f"slm.backend.api_key_env={PASTED}",
    ],
    ids=["userinfo", "query", "pasted-key"],
)
def test_a_secret_on_the_command_line_is_refused_before_anything_is_written(
    tmp_path, secret
) -> None:
    """Hydra writes .hydra/ and a sweep's multirun.yaml before any job runs: the command line
    is checked before Hydra starts, so nothing at all is written, and the error is one line
    that does not repeat the secret."""
    proc = run_cli(tmp_path, "-m", "method=slm_only", "slm=openai", secret, check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("Error: slm.backend.") and proc.stderr.count("\n") == 1
    assert "slm.backend.api_key_env" in proc.stderr
    for out in (proc.stdout, proc.stderr):
        assert PASTED not in out and "hunter2" not in out
    assert list(tmp_path.rglob("*")) == []


@pytest.mark.slow  # a two-job sweep through the CLI, with W&B offline (~15 s)
def test_a_key_planted_in_a_sweep_is_in_no_file_it_writes(tmp_path) -> None:
    """A key pasted into a field that takes any value (here a request field the server gets)
    runs a real sweep with W&B offline: the server is asked, and no file under the results root
    (run and sweep dirs, .hydra/, multirun.yaml, the job logs, cell.json, the response cache,
    the W&B run with its recorded command line) holds the key."""
    server = FakeServer(free_port(), "m")
    try:
        proc = run_cli(
            tmp_path,
            "-m",
            "method=slm_only",
            "slm=openai",
            "env=empty5x5_random",
            "eval.n_episodes=2",
            f"slm.backend.base_url={server.url}",
            f"+slm.backend.extra_body.api_key={PASTED}",
            "tracking=wandb",
            "tracking.mode=offline",
            "seed=0,1",
        )
    finally:
        server.stop()
    assert server.posts > 0  # the job ran with the key in its config
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    names = {p.name for p in written}
    assert {"multirun.yaml", "overrides.yaml", "config.yaml", "cell.json"} <= names
    assert any(p.suffix == ".wandb" for p in written)  # the offline W&B runs
    for path in written:
        assert PASTED.encode() not in path.read_bytes(), path
    assert PASTED not in proc.stdout and PASTED not in proc.stderr
