"""Secrets are never written: the one redaction every writer applies before text leaves the
process (error.json, the job's log, cell.json and the cell identity, the response cache's model
identity, Hydra's .hydra/ files, the W&B run).

What counts as a secret:
- the API keys this process read (`register`: the openai backend registers the key it takes from
  `slm.backend.api_key_env`), wherever they appear: a server that echoes the key in its 401 body;
- anything shaped like an API key or token (`sk-...`, `hf_...`, `ghp_...`, `Bearer ...`): a key
  given by mistake where the NAME of its variable belongs (`slm.backend.api_key_env=sk-...`);
- credentials in a URL (`https://user:pass@host`): the userinfo is dropped, not masked, so a cell's
  identity is the same with or without them (they never change what a server answers); a
  credential in its query string (`?api_key=...`, `&token=...`) is masked.

A URL with credentials is refused before anything is written (`url_credentials`: the command line
in benchmark.__main__, the composed config in validation): the key belongs in the environment
variable `slm.backend.api_key_env` names. Redaction is the second line, for what gets through
(a key pasted into another field, a server's reply).

Redaction is a pure function of the text: a value without secrets comes back unchanged, so the
hash of every cell whose config holds none stays what it was."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

REDACTED = "<redacted>"
MIN_SECRET = 8  # a registered value shorter than this is not looked for (it would match words)
# key shapes: OpenAI-style sk-/pk-/rk- (sk-proj-..., sk-ant-...), Hugging Face, GitHub, Slack
KEY_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])(?:(?:sk|pk|rk)-[A-Za-z0-9_\-]{16,}|hf_[A-Za-z0-9]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|xox[abpr]-[A-Za-z0-9\-]{10,})"
)
BEARER = re.compile(r"(?i)\b(bearer\s+)[^\s'\",}]+")
USERINFO = re.compile(r"(?<=://)[^/\s@'\"<>]+@")  # scheme://user:pass@host: up to the @
# query parameters that carry a credential (api_key, key, token, access_token, password, ...)
SECRET_PARAMS = (
    r"(?:api[_-]?key|key|(?:access|auth|id|refresh|session)?[_-]?token|auth|password|passwd|pwd"
    r"|secret|client[_-]?secret|sig|signature)"
)
QUERY_SECRET = re.compile(rf"(?i)([?&]{SECRET_PARAMS}=)[^&#\s'\"<>]+")

_known: set[str] = set()


def register(secret: str | None) -> None:
    """A secret this process holds (an API key read from the environment): redacted wherever it
    appears from now on."""
    if secret and len(secret) >= MIN_SECRET:
        _known.add(secret)


def redact(text: str) -> str:
    """`text` without secrets (module docstring); unchanged when it holds none."""
    if not isinstance(text, str) or not text:
        return text
    for secret in sorted(_known, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = USERINFO.sub("", text)
    text = QUERY_SECRET.sub(rf"\g<1>{REDACTED}", text)
    text = KEY_SHAPES.sub(REDACTED, text)
    return BEARER.sub(rf"\g<1>{REDACTED}", text)


def url_credentials(text: str) -> str | None:
    """What credential a URL in `text` carries, in words that do not repeat it ("a
    user:password@", "the query parameter api_key"); None when it carries none."""
    if not isinstance(text, str):
        return None
    if USERINFO.search(text):
        return "a user:password@"
    found = QUERY_SECRET.search(text)
    if found:
        return f"the query parameter {found.group(1)[1:-1]}"
    return None


def refuse_url_credentials(key: str, value: Any) -> None:
    """A URL with credentials at `key` is refused in one line that does not repeat them: written
    in a config, they would reach every file a job writes."""
    what = url_credentials(value)
    if what is not None:
        raise ValueError(
            f"{key} holds a URL with credentials ({what}; the value is not shown): they would "
            "be written in clear. Put the key in an environment variable and set "
            "slm.backend.api_key_env=<its NAME> (sent as 'Authorization: Bearer <key>')"
        )


def redact_data(value: Any) -> Any:
    """`redact` over every string (keys included) of nested dicts, lists and tuples; `value`
    itself (the same object) when it holds no secret."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        items = [(redact_data(k), redact_data(v)) for k, v in value.items()]
        changed = any(
            a is not k or b is not v for (a, b), (k, v) in zip(items, value.items(), strict=True)
        )
        return dict(items) if changed else value
    if isinstance(value, (list, tuple)):
        clean = [redact_data(v) for v in value]
        return (
            type(value)(clean)
            if any(a is not b for a, b in zip(clean, value, strict=True))
            else value
        )
    return value


def redact_file(path: str | os.PathLike) -> bool:
    """Rewrite a text file another library wrote (Hydra's .hydra/*.yaml) without secrets;
    True when it held some. A missing file is nothing to do."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    clean = redact(text)
    if clean == text:
        return False
    tmp = path.with_name(f".{path.name}.redacted")
    tmp.write_text(clean, encoding="utf-8")
    os.replace(tmp, path)
    return True


class RedactingFilter(logging.Filter):
    """Log records without secrets (a retry warning naming a URL with credentials)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def redact_logging() -> None:
    """Every handler of the root logger (Hydra's job log file, the console) gets the filter."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
