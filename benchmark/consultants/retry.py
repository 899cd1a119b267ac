"""Retries with exponential backoff, in one helper used by every network backend.

Two kinds of failure. A fault of one request (HTTP 429 or 500, a reply that is not an answer) is
retried `max_retries` times. A server that is down (connection refused or reset, HTTP 502, 503
or 504: an engine that died and is being restarted, or still loading its model) is `Unavailable`:
with `down_wait` > 0 it is waited for, with backoff capped at DOWN_DELAY seconds, for up to
`down_wait` seconds in a row, however many attempts that takes; then it fails naming the setting
that bounds the wait (`down_setting`)."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from time import monotonic
from typing import TypeVar

from benchmark.consultants.errors import ConsultantError

T = TypeVar("T")
log = logging.getLogger(__name__)
DOWN_DELAY = 5.0  # seconds between two attempts at most while a server is down


class Retryable(Exception):
    """Raise inside a retried call to ask for another attempt (e.g. HTTP 429 or 5xx)."""


class Unavailable(Retryable):
    """The server is not there (refused, reset, HTTP 502/503/504): waited for up to `down_wait`."""


def with_retries(
    fn: Callable[[], T],
    *,
    what: str,
    max_retries: int = 3,
    base_delay: float = 0.5,
    max_delay: float = 20.0,
    retry_on: tuple[type[BaseException], ...] = (Retryable,),
    down_wait: float = 0.0,
    down_setting: str = "down_wait",
) -> T:
    """Call `fn`; on an exception in `retry_on` wait base_delay * 2**attempt (capped, with +-25%
    jitter so parallel workers do not retry in lockstep) and try again, at most `max_retries`
    more times. `Unavailable` with `down_wait` > 0 is retried until the server has been down for
    `down_wait` seconds (module docstring). When the attempts fail, raise ConsultantError naming
    `what` (e.g. the URL) and the last cause."""
    if max_retries < 0:
        raise ValueError(f"max_retries={max_retries} must be >= 0")
    attempt = 0
    down_since: float | None = None
    down_tries = 0
    while True:
        try:
            return fn()
        except retry_on as exc:
            if isinstance(exc, Unavailable) and down_wait > 0:
                now = monotonic()
                down_since = now if down_since is None else down_since
                left = down_wait - (now - down_since)
                if left <= 0:
                    raise ConsultantError(
                        f"{what}: the server stayed unavailable for {down_setting}="
                        f"{down_wait:g} s ({down_tries + 1} attempt(s); last: "
                        f"{type(exc).__name__}: {exc}); check that it is running (its log), "
                        f"or raise {down_setting}"
                    ) from exc
                delay = min(DOWN_DELAY, base_delay * 2**down_tries, left)
                down_tries += 1
                log.warning("%s: %s (server down %.0fs), retrying", what, exc, now - down_since)
                time.sleep(delay * random.uniform(0.75, 1.0))
                continue
            down_since, down_tries = None, 0
            if attempt == max_retries:
                raise ConsultantError(
                    f"{what}: failed after {max_retries + 1} attempt(s): "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            delay = min(max_delay, base_delay * 2**attempt) * random.uniform(0.75, 1.25)
            log.warning("%s: %s (attempt %d), retrying in %.1fs", what, exc, attempt + 1, delay)
            attempt += 1
            time.sleep(delay)
