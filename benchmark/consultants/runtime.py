"""The loaded model as the parts of the hf backend share it (`ModelRuntime`): the model and its
tokenizer, the weights' identity, the tokens that stop and pad an answer, the greedy generation
config, how the model's forward takes a cache, and the prefill counters every part adds to.

The hf backend (benchmark.consultants.hf) is composed of parts that each get this object, and
nothing else of the backend: prefix reuse (benchmark.consultants.prefix.PrefixReuse), choice
scoring (benchmark.consultants.choices.ChoiceScorer) and the lean greedy loop
(benchmark.consultants.lean.LeanDecoder). The functions below render prompts and read stops as
the backend does; fine-tuning and Agent-BRACE's RL call them too, so they train on what the
backend asks (benchmark.consultants.hf re-exports them)."""

from __future__ import annotations

import copy
import inspect
import time
from typing import Any

from benchmark.consultants.errors import ConsultantError

# what `ModelRuntime.stats` counts (the backend's `prefill_stats()`)
PREFILL_STATS = (
    "prompt_tokens",
    "prefill_tokens",
    "prefill_tokens_without_reuse",
    "prefix_hits",
    "prefix_misses",
    "prefill_seconds",  # choice scoring and the lean path: time in prefill
    "decode_seconds",  # ... and in scoring the continuations / the greedy decode loop
)


class ModelRuntime:
    """One loaded causal LM, shared (not copied) by the backend and its parts: closing the backend
    drops the model for all of them. `stats` holds the counts of `PREFILL_STATS`, which every
    part adds to and `reset_stats` zeroes in place (the parts keep the same dict)."""

    def __init__(self, model: Any, tokenizer: Any, identity: str) -> None:
        """Reads the stops, the pad token and the forward's cache argument from the model;
        a tokenizer without an end-of-text token is refused (answers would never stop)."""
        self.model, self.tokenizer, self.identity = model, tokenizer, identity
        eos = stop_ids(model, tokenizer)
        if not eos:
            raise ConsultantError(f"{identity}: the tokenizer defines no end-of-text token")
        self.eos_ids = eos
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
        self.generation_config = neutral_generation_config(model, self.pad_id, eos)
        params = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"  # renamed in 5.x
        self.logits_to_keep = "logits_to_keep" in params  # whether a forward can skip logits
        self.stats: dict[str, float] = dict.fromkeys(PREFILL_STATS, 0)

    @property
    def device(self) -> Any:
        return self.model.device

    def reset_stats(self) -> None:
        for key in self.stats:
            self.stats[key] = 0

    def clock(self) -> float:
        """perf_counter once the device has run what was queued: CUDA kernels run
        asynchronously, so without the sync a prefill's time would be counted in the decode that
        first waits for its result (the prefill/decode split of the stats). A no-op sync on a
        CPU."""
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def new_cache(self) -> Any:
        """An empty key/value cache of the model's layer kinds (batch size set by its first
        forward)."""
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)


def chat_prompt(
    tokenizer: Any, messages: list[dict[str, str]], enable_thinking: bool, generation: bool = True
) -> str:
    """`messages` as the backend renders them: the model's own chat template, the assistant's
    turn opened (`generation`), the query's thinking mode. Fine-tuning and Agent-BRACE's RL
    train on exactly this text, so a trained model is asked what it learnt."""
    return tokenizer.apply_chat_template(
        messages, add_generation_prompt=generation, tokenize=False, enable_thinking=enable_thinking
    )


def prompt_ids(tokenizer: Any, messages: list[dict[str, str]], enable_thinking: bool) -> list[int]:
    """The token ids of `chat_prompt` (the template already holds the special tokens)."""
    text = chat_prompt(tokenizer, messages, enable_thinking)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def neutral_generation_config(model: Any, pad_id: int, eos_ids: list[int]) -> Any:
    """The model's generation config with sampling and the repetition penalty reset (greedy, no
    warper, penalty 1), `pad_id` and the stops `eos_ids` set: the caller's decoding owns
    sampling and the penalty, so the checkpoint's own values (Qwen2.5's generation config has
    repetition_penalty 1.05) never apply unasked. The evaluation's generation and Agent-BRACE's
    RL sampler (benchmark.brace.joint.Sampler, which adds only its own row sampler) start here."""
    gc = copy.deepcopy(model.generation_config)
    gc.update(
        temperature=None,
        top_p=None,
        top_k=None,
        min_p=None,
        do_sample=False,
        repetition_penalty=1.0,
    )
    gc.pad_token_id, gc.eos_token_id = pad_id, eos_ids
    return gc


def stop_ids(model: Any, tokenizer: Any) -> list[int]:
    """The tokens that end an answer: the generation config's eos, the tokenizer's and ChatML's
    `<|im_end|>`, without repeats, in that order (the first is the pad fallback)."""
    gen_eos = model.generation_config.eos_token_id
    ends = [*(gen_eos if isinstance(gen_eos, list) else [gen_eos]), tokenizer.eos_token_id]
    eos: list[int] = []
    for e in [*ends, tokenizer.get_vocab().get("<|im_end|>")]:
        if e is not None and int(e) not in eos:
            eos.append(int(e))
    return eos
