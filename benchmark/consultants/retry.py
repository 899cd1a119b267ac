"""Retries with exponential backoff, in one helper used by every network backend."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from benchmark.consultants.errors import ConsultantError

T = TypeVar("T")
log = logging.getLogger(__name__)


class Retryable(Exception):
    """Raise inside a retried call to ask for another attempt (e.g. HTTP 429 or 5xx)."""


def with_retries(
    fn: Callable[[], T],
    *,
    what: str,
    max_retries: int = 3,
    base_delay: float = 0.5,
    max_delay: float = 20.0,
    retry_on: tuple[type[BaseException], ...] = (Retryable,),
) -> T:
    """Call `fn`; on an exception in `retry_on` wait base_delay * 2**attempt (capped, with +-25%
    jitter so parallel workers do not retry in lockstep) and try again, at most `max_retries`
    more times. When every attempt fails, raise ConsultantError naming `what` (e.g. the URL)
    and the last cause."""
    if max_retries < 0:
        raise ValueError(f"max_retries={max_retries} must be >= 0")
    for attempt in range(max_retries + 1):
        try:
            return fn()
        except retry_on as exc:
            if attempt == max_retries:
                raise ConsultantError(
                    f"{what}: failed after {max_retries + 1} attempt(s): "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            delay = min(max_delay, base_delay * 2**attempt) * random.uniform(0.75, 1.25)
            log.warning("%s: %s (attempt %d), retrying in %.1fs", what, exc, attempt + 1, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")
