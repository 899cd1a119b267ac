"""Sampling (Decoding.temperature > 0; temperature, top_p, top_k from `slm.decoding`, or from the
model's own generation config with `slm.decoding.source=model`: `HFConsultant.model_sampling`):
generation stays greedy on logits that a processor (`row_sampler`) has already sampled from. The
k-th new token of a query is drawn by inverse CDF with a uniform number hashed from (the query's
seed, k): no random state is shared between the rows of a batch or carried from one batch to the
next, so a query's draws do not depend on which queries it is batched with, nor on whether it ran
in a lockstep or a sequential evaluation. The query's seed is `query_seed` (decoding seed,
rng_key, messages), a fresh random one when the decoding has no seed. Sampled answers are
therefore identical between lockstep and sequential evaluation, up to the floating-point effects
of batching that greedy answers share (a draw changes only when its uniform number falls within
rounding distance of a boundary of the cumulative distribution)."""

from __future__ import annotations

import hashlib
from typing import Any

from benchmark.consultants.base import Decoding

# what transformers' generate() samples with where a generation config leaves a field unset
# (GenerationConfig._get_default_generation_params; the same in transformers 4.x)
HF_SAMPLING_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": 50}


def uniform(seed: int, k: int) -> float:
    """The uniform number in [0, 1) of draw k of the stream `seed` (stateless)."""
    digest = hashlib.blake2b(f"{seed}/{k}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def row_sampler(d: Decoding, seeds: list[int], offsets: list[int], width: int) -> Any:
    """A logits processor that samples each row's next token (temperature, top-k, top-p, as
    transformers' warpers do) from its own stateless stream and leaves only that token, so that
    greedy generation picks it. Row r's draw at generation step t is draw offsets[r] + t of the
    stream seeds[r]."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    warpers: list[Any] = [TemperatureLogitsWarper(d.temperature)]
    if d.top_k > 0:
        warpers.append(TopKLogitsWarper(d.top_k))
    if d.top_p < 1.0:
        warpers.append(TopPLogitsWarper(d.top_p))

    class RowSampler(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            step = input_ids.shape[1] - width
            for warp in warpers:
                scores = warp(input_ids, scores)
            cdf = torch.softmax(scores.double(), dim=-1).cumsum(-1)
            u = torch.tensor(
                [uniform(s, o + step) for s, o in zip(seeds, offsets, strict=True)],
                dtype=torch.float64,
                device=scores.device,
            )
            x = (u * cdf[:, -1]).unsqueeze(1)
            token = torch.searchsorted(cdf, x, right=True).clamp_(max=scores.shape[-1] - 1)
            out = torch.full_like(scores, -float("inf"))
            return out.scatter_(1, token, 0.0)

    return LogitsProcessorList([RowSampler()])
