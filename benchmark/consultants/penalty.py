"""Repetition penalty (`slm.decoding.repetition_penalty`) in the hf backend: transformers' own
RepetitionPenaltyLogitsProcessor, applied per row over that row's tokens only (its prompt and
what it generated so far), never over the padding of a batch. A row's answer is therefore what
`generate` gives for that prompt alone, whatever it is batched with; the lean greedy loop and
choice scoring apply the same function, so they agree with `generate` token for token."""

from __future__ import annotations

from typing import Any


def penalize(scores: Any, contexts: list[list[int]], penalty: float) -> Any:
    """`scores` [n, V] (float) with row r's logits of every token in contexts[r] penalized as
    RepetitionPenaltyLogitsProcessor(penalty) would over contexts[r] alone."""
    import torch
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    width = max(len(c) for c in contexts)
    ids = torch.empty((len(contexts), width), dtype=torch.long)
    for r, c in enumerate(contexts):
        ids[r, : len(c)] = torch.tensor(c, dtype=torch.long)
        ids[r, len(c) :] = c[-1]  # repeats a token of the row: penalized once all the same
    return RepetitionPenaltyLogitsProcessor(penalty)(ids.to(scores.device), scores)


def row_penalty(penalty: float, mask: Any) -> Any:
    """A logits processor for `generate` that penalizes each row over its own tokens: `mask`
    [n, width] marks the prompt positions that hold a token of the row (1) or padding (0);
    every generated position holds one."""
    import torch
    from transformers import LogitsProcessor
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    inner = RepetitionPenaltyLogitsProcessor(penalty)

    class RowPenalty(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            real = mask.to(input_ids.device).bool()
            grown = input_ids.shape[1] - real.shape[1]
            if grown:
                real = torch.cat([real, real.new_ones((real.shape[0], grown))], dim=1)
            # padding replaced by the row's last token (always its own): no pad id is penalized
            ids = torch.where(real, input_ids, input_ids[:, -1:])
            return inner(ids, scores)

    return RowPenalty()
