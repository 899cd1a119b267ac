"""The openai backend's config checks (`OpenAIConsultant.check_config`, called by
consultants.check_slm before any work): how a cell finds a shared server and waits for it to
restart, and which decoding settings a server can serve. Every message names the bad value
and what is allowed."""

from __future__ import annotations

import math
from typing import Any

from omegaconf import OmegaConf

CHOICES_NO_PENALTY = (
    "slm.decoding.mode=choices with the openai backend scores the server's raw "
    "log-probabilities, which no repetition penalty acts on; set "
    "slm.decoding.repetition_penalty=1.0 or slm.decoding.mode=generate"
)
CHOICES_NEED_LOGPROBS = (
    "slm.decoding.mode=choices needs log-probabilities of given tokens from the server: set "
    "slm.backend.prompt_logprobs=true for a vLLM server (its /tokenize and /v1/completions "
    "logprob_token_ids or prompt_logprobs), or use slm.decoding.mode=generate with this server"
)


def check_openai_config(slm: Any) -> None:
    """slm.backend.base_url without credentials (benchmark.redact.url_credentials: the key goes
    in the variable api_key_env names); wait_timeout / restart_wait_s (seconds >= 0), url_file
    (null or a path), choice_logprobs (one of CHOICE_LOGPROBS); slm.decoding.mode=choices only
    on a server that returns prompt log-probabilities and without a repetition penalty."""
    from benchmark.consultants.remote_choices import CHOICE_LOGPROBS
    from benchmark.redact import refuse_url_credentials

    for key in ("base_url", "url_file"):  # the command line's are refused before Hydra writes
        refuse_url_credentials(f"slm.backend.{key}", OmegaConf.select(slm, f"backend.{key}"))
    for key, zero in (("wait_timeout", "probe the server once"), ("restart_wait_s", "no wait")):
        wait = OmegaConf.select(slm, f"backend.{key}")
        if wait is not None and (
            not isinstance(wait, (int, float)) or isinstance(wait, bool) or not 0 <= wait < math.inf
        ):
            raise ValueError(
                f"slm.backend.{key}={wait!r} is invalid: allowed a number of seconds >= 0 "
                f"(0 = {zero})"
            )
    how = OmegaConf.select(slm, "backend.choice_logprobs")
    if how is not None and how not in CHOICE_LOGPROBS:
        raise ValueError(
            f"slm.backend.choice_logprobs={how!r} is invalid: allowed {', '.join(CHOICE_LOGPROBS)}"
        )
    url_file = OmegaConf.select(slm, "backend.url_file")
    if url_file is not None and (not isinstance(url_file, str) or not url_file.strip()):
        raise ValueError(
            f"slm.backend.url_file={url_file!r} is invalid: allowed null or the path of the file "
            "python -m benchmark.serve --url-file writes"
        )
    if OmegaConf.select(slm, "decoding.mode") != "choices":
        return
    if not OmegaConf.select(slm, "backend.prompt_logprobs"):
        raise ValueError(CHOICES_NEED_LOGPROBS)
    if OmegaConf.select(slm, "decoding.repetition_penalty") not in (None, 1.0):
        raise ValueError(CHOICES_NO_PENALTY)
