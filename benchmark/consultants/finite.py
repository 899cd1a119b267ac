"""Finite logits, checked on every path of the hf backend (lean decode, generate, choice scoring):
a row whose logits hold a NaN or an infinity would still give an answer (argmax of NaN is token
0, a NaN choice score loses every comparison, so `choice_answer` picks the first action) and
nothing would say so. A GPU attention kernel that returns NaN for fully masked rows is the known
cause (benchmark.consultants.attention zeroes those rows); a bf16 overflow would be another. Any
such batch raises a ConsultantError naming the path, the batch and the bad rows instead
(tests/consultants/test_finite.py).

The flags are computed on the device beside the values each path already copies to the host
(`nonfinite_rows`), so the check adds no device sync of its own."""

from __future__ import annotations

from typing import Any

from benchmark.consultants.errors import ConsultantError


def nonfinite_rows(logits: Any) -> Any:
    """[n] bool: does row r of `logits` [n, ...] hold a NaN or an infinity anywhere?"""
    import torch

    return ~torch.isfinite(logits).flatten(1).all(-1)


def raise_nonfinite(
    runtime: Any, batching: str, path: str, bad: list[int], seqs: list[list[int]]
) -> None:
    """Raise the ConsultantError of a batch of prompts `seqs` (token ids) whose rows `bad`
    (indices into `seqs`) got non-finite logits on `path` ("lean decode", "generate", "choice
    scoring"); `runtime` is the backend's model (benchmark.consultants.runtime.ModelRuntime:
    identity, device, attention), `batching` how its rows shared the forward. No-op when `bad`
    is empty."""
    if not bad:
        return
    lengths = [len(s) for s in seqs]
    config = getattr(runtime.model, "config", None)
    attention = getattr(config, "_attn_implementation", None)
    dtype = getattr(runtime.model, "dtype", None)
    shown = ", ".join(f"{r} ({lengths[r]} tokens)" for r in sorted(bad)[:8])
    more = f" and {len(bad) - 8} more" if len(bad) > 8 else ""
    raise ConsultantError(
        f"{runtime.identity}: non-finite logits (NaN or inf) in {len(bad)} of {len(seqs)} rows of a "
        f"{path} batch of {len(seqs)} prompts ({min(lengths)}-{max(lengths)} tokens, "
        f"batching={batching}, attention={attention}, dtype={dtype}, device={runtime.device}): "
        f"rows {shown}{more}. Their answers would be garbage, so none is given. A GPU attention "
        "kernel that returns NaN for fully masked (left-padding) rows is the known cause: try "
        "slm.backend.batching=by_length, or slm.backend.dtype=float32 for an overflow"
    )


def finite_watch(n: int, device: Any) -> Any:
    """A logits processor for `generate` that only watches: `bad` [n] bool on `device` marks the
    rows whose scores were non-finite at any step (kept on the device: no sync per step). It
    must come first in the list, to see the model's own logits."""
    import torch
    from transformers import LogitsProcessor

    class FiniteWatch(LogitsProcessor):
        def __init__(self) -> None:
            self.bad = torch.zeros(n, dtype=torch.bool, device=device)

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            self.bad |= nonfinite_rows(scores)
            return scores

    return FiniteWatch()
