"""The token-level plumbing of Agent-BRACE's RL trainers (PPO and GRPO): log-probabilities of
the completion tokens only, a value head on the model's last hidden state, and the memory
options a 3-4B model needs on one GPU (LoRA, gradient checkpointing, bf16 autocast).

`completion_forward` runs the model's decoder once over prompt+completion, then takes the
hidden states at the positions that predict completion tokens, and only there applies the LM
head and the log-softmax over the vocabulary: the (positions x vocabulary) tensor is as long as
the completions, not the whole padded batch (for a 4B model with 150k tokens of vocabulary, a
batch of 8 x 2k positions in fp32 would be ~10 GB)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from benchmark.finetune import lm


def prepare(model: Any, *, lora_rank: int = 0, lora_alpha: int = 16,
            gradient_checkpointing: bool = False) -> Any:  # fmt: skip
    """The model ready to train: LoRA adapters on every linear layer (`lora_rank` > 0, needs
    peft: pip install -e '.[lora]'), gradient checkpointing of the decoder layers."""
    if gradient_checkpointing:  # active in train mode only: generation keeps its cache
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x's name
            model.activation_checkpointing_enable({"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable({"use_reentrant": False})
    if lora_rank > 0:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError as exc:
            raise ImportError("rl lora_rank > 0 needs peft: pip install -e '.[lora]'") from exc
        config = LoraConfig(r=int(lora_rank), lora_alpha=int(lora_alpha), lora_dropout=0.0,
                            target_modules="all-linear", task_type="CAUSAL_LM")  # fmt: skip
        model = get_peft_model(model, config)
    return model


def plain(model: Any) -> Any:
    """The model to save as a plain folder: LoRA adapters merged into the weights."""
    if hasattr(model, "merge_and_unload"):
        return model.merge_and_unload()
    return model


def autocast(model: Any, bf16: bool) -> Any:
    """bf16 autocast of the forward pass on the model's device (a no-op context when off)."""
    import torch

    if not bf16:
        return contextlib.nullcontext()
    return torch.autocast(device_type=model.device.type, dtype=torch.bfloat16)


def hidden_size(model: Any) -> int:
    return int(model.config.get_text_config().hidden_size)


def value_head(model: Any) -> Any:
    """The critic's head: a linear map of the last hidden state to a value, zero at start (the
    first advantages are the returns), in float32 on the model's device."""
    import torch

    head = torch.nn.Linear(hidden_size(model), 1)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    return head.to(model.device)


def completion_forward(
    model: Any,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    pad: int,
    *,
    temperature: float = 1.0,
    head: Any = None,
    bf16: bool = False,
) -> tuple[list[Any], list[Any] | None]:
    """Per (prompt ids, completion ids) pair: the completion tokens' log-probabilities under
    `model` (logits / `temperature`, the distribution they were sampled from) and, with a
    value `head`, the value at each completion token's position (the state before it)."""
    import torch

    seqs = [list(p) + list(c) for p, c in pairs]
    width = max(map(len, seqs))
    device = model.device
    x = torch.tensor([s + [pad] * (width - len(s)) for s in seqs], device=device)
    att = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs], device=device)
    rows, cols, targets = [], [], []
    for i, (p, c) in enumerate(pairs):
        if not p or not c:
            raise ValueError(f"pair {i}: a prompt and a completion of >= 1 token each")
        start = len(p) - 1  # the position whose logits predict the first completion token
        rows += [i] * len(c)
        cols += range(start, start + len(c))
        targets += list(c)
    rows_t, cols_t = torch.tensor(rows, device=device), torch.tensor(cols, device=device)
    with autocast(model, bf16):
        decoder = model.get_decoder()
        hidden = decoder(input_ids=x, attention_mask=att, use_cache=False).last_hidden_state
        h = hidden[rows_t, cols_t]  # (completion tokens, hidden): only these reach the LM head
        logits = model.get_output_embeddings()(h)
    logp = torch.log_softmax(logits.float() / float(temperature), -1)
    tok = logp.gather(-1, torch.tensor(targets, device=device)[:, None])[:, 0]
    sizes = [len(c) for _, c in pairs]
    values = None
    if head is not None:
        values = list(head(h.float())[:, 0].split(sizes))
    return list(tok.split(sizes)), values


def full_logprobs(model: Any, prompt: Sequence[int], completion: Sequence[int]) -> Any:
    """The reference the completion-only path must equal: the full log-softmax of every
    position of one sequence, gathered at its completion tokens (tests)."""
    import torch

    x = torch.tensor([list(prompt) + list(completion)], device=model.device)
    logp = torch.log_softmax(model(input_ids=x).logits.float()[0, :-1], -1)
    tok = logp.gather(-1, x[0, 1:, None])[:, 0]
    return tok[len(prompt) - 1 :]


def load_for_rl(directory: Any, *, dtype: str = "float32", lora_rank: int = 0,
                lora_alpha: int = 16, gradient_checkpointing: bool = False,
                train: bool = True) -> tuple[Any, Any]:  # fmt: skip
    """(model, tokenizer) of a model folder on its device (the GPU when there is one), in
    `dtype`; a model to train gets LoRA / gradient checkpointing as asked, a frozen one none
    and no gradients."""
    model, tok = lm.load(directory, dtype=dtype)
    if train:
        model = prepare(model, lora_rank=lora_rank, lora_alpha=lora_alpha,
                        gradient_checkpointing=gradient_checkpointing)  # fmt: skip
    else:
        model.requires_grad_(False)
    return model, tok
