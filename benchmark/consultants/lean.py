"""Lean greedy decode (`slm.backend.lean_max_new_tokens`; docs/choices.md): short greedy answers
take the prefill of choice scoring and a plain argmax loop instead of `generate`, only where
generation would apply no logits processor (`plain_greedy`) but the decoding's own repetition
penalty, applied here as generate applies it: the same tokens
(tests/consultants/test_choices.py)."""

from __future__ import annotations

import time
from typing import Any

from benchmark.consultants.finite import nonfinite_rows, raise_nonfinite
from benchmark.consultants.penalty import penalize
from benchmark.consultants.prefix import Prompt, next_positions

DEFAULT_LEAN_MAX_NEW_TOKENS = 16  # greedy answers up to this long take the lean decode loop

# generation settings under which greedy `generate` would transform the logits before argmax
_PROCESSOR_FIELDS = {
    "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "bad_words_ids": (None,),
    "min_length": (None, 0),
    "min_new_tokens": (None, 0),
    "suppress_tokens": (None,),
    "begin_suppress_tokens": (None,),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "sequence_bias": (None,),
    "exponential_decay_length_penalty": (None,),
    "guidance_scale": (None, 1.0),
    "watermarking_config": (None,),
    "num_beams": (None, 1),
    "diversity_penalty": (None, 0.0),
    "low_memory": (None, False),
    "max_time": (None,),
    "stop_strings": (None,),
    "assistant_model": (None,),
    "prompt_lookup_num_tokens": (None,),
}


def plain_greedy(gc: Any) -> bool:
    """Is greedy generation under `gc` the argmax of the raw logits (no logits processor, no
    beam search, no extra stopping rule)? Then the lean decode loop gives its tokens."""
    return all(getattr(gc, k, None) in allowed for k, allowed in _PROCESSOR_FIELDS.items())


class LeanDecoder:
    """The lean greedy loop, one part of the hf backend: built on its `ModelRuntime`
    (benchmark.consultants.runtime) and its `PrefixReuse` prefill (benchmark.consultants.prefix).
    `max_new_tokens` (`slm.backend.lean_max_new_tokens`; settable) caps the answers it takes;
    `enabled` says whether it takes any: a cap above 0, and greedy generation under the runtime's
    generation config that applies no logits processor (`plain_greedy`)."""

    def __init__(
        self, runtime: Any, prefix: Any, max_new_tokens: int = DEFAULT_LEAN_MAX_NEW_TOKENS
    ) -> None:
        self.runtime, self.prefix = runtime, prefix
        self.max_new_tokens = int(max_new_tokens)
        self.enabled = self.max_new_tokens > 0 and plain_greedy(runtime.generation_config)

    def takes(self, decoding: Any, max_new: int) -> bool:
        """Does a generation of at most `max_new` tokens under `decoding` (a
        benchmark.consultants.base.Decoding) go through `decode` instead of `generate`?"""
        return not decoding.sampling and self.enabled and max_new <= self.max_new_tokens

    def decode(
        self,
        seqs: list[list[int]],
        max_new: int,
        stop: list[int],
        prompts: list[Prompt],
        penalty: float = 1.0,
    ) -> list[list[int]]:
        """Greedy decoding without `generate`: the prompts prefilled on the shared prefix
        (`PrefixReuse.prefill_groups`: one left-padded group, or one unpadded group per length),
        then one forward per new token on the group's own cache, the attention mask growing by a
        column and each row's position following its last (`next_positions`); a row leaves the
        batch at its stop token (each row's tokens up to and including it). Only for what
        `takes` (greedy generation would apply no logits processor), so argmax of the logits is
        its choice: the same tokens as `generate` (tests/consultants/test_choices.py,
        tests/consultants/test_batching.py). A repetition `penalty` other than 1 is applied to each
        row's logits over its prompt and answer so far, as `generate` applies it
        (benchmark.consultants.penalty). Non-finite logits in any row raise a ConsultantError
        (benchmark.consultants.finite), their flags copied with the step's tokens."""
        import torch

        out: list[list[int]] = [[] for _ in seqs]
        rt = self.runtime
        stops = torch.tensor(stop, device=rt.device)
        with torch.inference_mode():
            for members, cache, last, mask in self.prefix.prefill_groups(seqs, prompts):
                t0 = time.perf_counter()
                alive = list(members)
                for step in range(max_new):
                    bad = nonfinite_rows(last)  # the model's logits, before any penalty
                    if penalty != 1.0:
                        last = penalize(last.float(), [seqs[r] + out[r] for r in alive], penalty)
                    token = last.argmax(-1)
                    tokens, flags = torch.stack([token, bad.long()]).tolist()  # one copy
                    rows = [r for r, f in zip(alive, flags, strict=True) if f]
                    raise_nonfinite(rt, self.prefix.batching, "lean decode", rows, seqs)
                    for r, t in zip(alive, tokens, strict=True):
                        out[r].append(t)
                    keep = ~torch.isin(token, stops)
                    if step == max_new - 1 or not bool(keep.any()):
                        break
                    if not bool(keep.all()):
                        index = keep.nonzero().flatten()
                        cache.reorder_cache(index)
                        alive = [alive[k] for k in index.tolist()]
                        token = token[index]
                        mask = None if mask is None else mask[index]
                    kwargs: dict[str, Any] = {rt.cache_arg: cache}
                    if mask is not None:  # left-padded: the mask and the positions go along
                        mask = torch.cat([mask, mask.new_ones((len(alive), 1))], dim=1)
                        kwargs.update(attention_mask=mask, position_ids=next_positions(mask, 1))
                    last = rt.model(input_ids=token[:, None], use_cache=True, **kwargs).logits
                    last = last[:, -1]
                rt.stats["decode_seconds"] += time.perf_counter() - t0
        return out
