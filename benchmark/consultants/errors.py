"""One error type for every consultant failure the evaluator may want to report per cell."""

from __future__ import annotations


class ConsultantError(RuntimeError):
    """A backend could not be built or could not answer (bad config, missing weights, a server
    that stays unreachable after retries). The message names the bad value or URL and the cause."""
