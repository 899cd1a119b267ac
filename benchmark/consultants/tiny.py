"""A tiny random Qwen3-architecture model, built locally from a seed.

Why: every part of the suite that talks to a language model (batching, thinking budget, cache,
OpenAI server, sweeps) can then be tested end to end on a CPU without downloading weights. The
model is saved with `save_pretrained` (safetensors) and loaded back through the very same
`HFConsultant` / `from_pretrained` path a real model takes. Its answers are mostly invalid
text, which the suite counts like any other invalid answer."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from benchmark.consultants.hf import HFConsultant

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
THINK_TOKENS = ("<think>", "</think>")  # added, not special: decoding keeps them, as Qwen3 does

# Qwen3-style template: `enable_thinking=false` closes an empty thinking block up front, `true`
# opens one (as Qwen3.5 does), so generation starts inside the thinking block.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}"
    "{{- '<think>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

# Small built-in corpus: the words prompts and answers are made of, so token counts stay sane.
_CORPUS = """\
You are a helpful assistant guiding an agent in a grid world. Answer with one action.
The agent is in a room. The goal is a green square. Walls are grey. A door is yellow.
You see a wall ahead, a key to the left, the goal two steps forward and one step right.
Valid actions: TURN_LEFT, TURN_RIGHT, FORWARD, PICKUP, TOGGLE, DONE, HIGHER, LOWER.
Action: TURN_LEFT
Action: TURN_RIGHT
Action: FORWARD
Action: PICKUP
Action: TOGGLE
Reason: the goal is ahead and the path is free.
Reason: a wall blocks the way, so turn.
Reason: the card is low, so the next card is likely higher.
{"action": "TURN_LEFT", "reason": "wall ahead"}
{"action": "TURN_RIGHT", "reason": "goal to the right"}
{"action": "FORWARD", "reason": "path is clear"}
{"action": "HIGHER", "reason": "low card"}
{"action": "LOWER", "reason": "high card"}
{"plan": ["FORWARD", "FORWARD", "TURN_LEFT", "FORWARD"]}
The current card is 3. Will the next card be HIGHER or LOWER? Answer: HIGHER
The current card is Q. Cards seen so far: 2 5 7 9 J K A. Answer: LOWER
Position (3, 4), facing east. Visited cells: (1, 1) (1, 2) (2, 2). Known map:
# # # # # # #
# . . . . G #
# . # # . . #
# A . . . . #
# # # # # # #
The autopilot suggests FORWARD. Do you agree? Think step by step, then answer.
<think>
The agent faces a wall. Turning left leads to the open corridor.
</think>
Action: TURN_LEFT
system user assistant north south east west left right up down step steps
0 1 2 3 4 5 6 7 8 9 10 11 12 13 A J Q K
"""


def _train_tokenizer() -> Any:
    """A byte-level BPE tokenizer trained on the built-in corpus (deterministic, offline)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        min_frequency=1,
        special_tokens=[*SPECIAL_TOKENS, *THINK_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS.splitlines(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        model_max_length=32768,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny(directory: str | os.PathLike, seed: int = 0) -> Path:
    """Build the tiny model into `directory` unless it is already there; return its path.

    Atomic (built in a temp dir beside it, then renamed) and guarded by a file lock, so
    concurrent processes of a multirun build it once and never see a half-written model."""
    from filelock import FileLock

    target = Path(directory)
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "config.json").exists():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
        try:
            _write_tiny(tmp, seed)
            if target.exists():  # a leftover without config.json: incomplete, replace it
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _write_tiny(directory: Path, seed: int) -> None:
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tokenizer = _train_tokenizer()
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        initializer_range=0.1,  # wider than 0.02 so greedy text is not one token repeated
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        eos_token_id=eos,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=eos, pad_token_id=tokenizer.pad_token_id, do_sample=False
    )
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)


class TinyConsultant(HFConsultant):
    """`HFConsultant` on the tiny model at `path`, built there from `seed` first if missing."""

    def __init__(self, path: str, seed: int = 0, **kwargs: Any) -> None:
        build_tiny(path, seed)
        kwargs.setdefault("dtype", "float32")
        kwargs.setdefault("device_map", "cpu")
        super().__init__(model=None, path=path, **kwargs)

    @classmethod
    def weights_identity(cls, path: str, seed: int = 0, **_: object) -> str | None:
        build_tiny(path, seed)  # seconds; the identity is the built files' fingerprint
        return super().weights_identity(path=path)
