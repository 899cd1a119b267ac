"""One error type for every consultant failure the evaluator may want to report per cell."""

from __future__ import annotations


class ConsultantError(RuntimeError):
    """A backend could not be built or could not answer (bad config, missing weights, a server
    that stays unreachable after retries). The message names the bad value or URL and the cause."""


class ModelNotBuilt(LookupError):
    """The model a config names is made on first use (the tiny model, a fine-tuned one) and is
    not there yet: the content of its weights, hence a cell's identity, is not known until the
    job builds it. Computing an identity never builds anything (`python -m benchmark.plan`)."""


class ServerNotUp(ConsultantError, ModelNotBuilt):
    """An OpenAI-compatible server that does not answer (yet). Computing a cell's identity
    asks the server which model it serves: while it is down that identity is not known, as for
    a model not built yet (`python -m benchmark.plan` says so and carries on), and a job that
    needs it fails naming the URL."""
