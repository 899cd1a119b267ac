"""The authors' evaluation loop (github jrzmnt/ask-pomdp, `eval_ppo_slm.py` with
`src/ask/slm/model.py`), rebuilt from its description on the suite's parts so that `make bench`
can time it side by side with the suite's paths on the same model, prompts and episodes.

What it does per decision, as the released code does: one episode at a time; the gate's
uncertainty from N separate dropout passes (`mc_dropout_sequential`, the reference the suite's
batched MC dropout is tested against: the same masks, so the same entropies and gate decisions;
set as the evaluation's `mc_dropout_fn`);
and for each query the chat template rendered to text, tokenized, and
`model.generate(max_new_tokens=10, return_dict_in_generate=True, output_scores=True)` under
`no_grad`, batch 1, no prefix reuse, the reply decoded. Two things are the suite's, so that both
sides compute the same thing: the prompt's messages (the suite's system + user messages; the
released code sends one user message, which changes a few template tokens, not the cost) and
greedy decoding (the released code takes the checkpoint's generation_config)."""

from __future__ import annotations

import time
from typing import Any

AUTHORS_MAX_NEW_TOKENS = 10  # the released code's DECODING["max_tokens"] without rationale


class AuthorsConsultant:
    """The released code's consultant call on an hf backend's model and tokenizer (module
    docstring); everything else (prefill_stats, close, needs_expert, ...) is the wrapped one's."""

    def __init__(self, inner: Any, max_new_tokens: int = AUTHORS_MAX_NEW_TOKENS) -> None:
        self.inner, self.max_new_tokens = inner, int(max_new_tokens)

    def answer(self, queries: list) -> list:
        from benchmark.consultants import Answer

        return [Answer(*self._one(q)) for q in queries]

    def _one(self, query: Any) -> tuple[str, int, int, float]:
        import torch

        t0 = time.perf_counter()
        from benchmark.consultants.hf import chat_prompt

        tok, model = self.inner.tokenizer, self.inner.model
        text = chat_prompt(tok, query.messages, query.decoding.enable_thinking)
        inputs = tok([text], return_tensors="pt").to(model.device)
        gc = self.inner.greedy_config(  # greedy, the backend's stop and pad tokens
            max_new_tokens=self.max_new_tokens, return_dict_in_generate=True, output_scores=True
        )
        with torch.no_grad():
            out = model.generate(**inputs, generation_config=gc)
        n = inputs["input_ids"].shape[-1]
        new = out.sequences[:, n:]
        reply = tok.decode(new[0], skip_special_tokens=True).strip()
        return reply, int(n), int(new.numel()), time.perf_counter() - t0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
