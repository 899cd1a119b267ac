"""The causal-LM plumbing the suite's trainings share: supervised fine-tuning (finetune.train,
which Agent-BRACE's SFT runs through) and Agent-BRACE's joint RL (brace.joint) load a model
folder, pad a batch and save the trained model the same way, so the hf backend serves what
either made. The prompt's text and the tokens that end an answer are the hf backend's own
(benchmark.consultants.hf: `chat_prompt`, `prompt_ids`, `stop_ids`): a model is trained on what
a cell will ask it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark.consultants.fingerprint import weights_folder
from benchmark.weights import check_folder


def pad_id(tokenizer: Any) -> int:
    """The id a batch is padded with: the tokenizer's pad token, else its eos token (padded
    positions are masked out of attention and of the loss, so only its existence matters)."""
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else tokenizer.eos_token_id)


def load(
    source: str | Path, dtype: str = "float32", device: str | None = "auto", **load_kwargs: Any
) -> tuple[Any, Any]:
    """(model, tokenizer) of a model folder (or a hub id in the local cache; `load_kwargs` go to
    both from_pretrained calls: revision, local_files_only, trust_remote_code). Safetensors
    only, as the hf backend loads, and checked as it checks them (a header that lies raises
    `benchmark.weights.WeightsError`, naming file and tensor). `dtype`: float32 | bfloat16;
    `device`: "auto" (the GPU when there is one), a torch device, or None (left where it loads:
    the Trainer places it)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    load = {k: v for k, v in load_kwargs.items() if v is not None}
    # weights that lie are refused, naming file and tensor (benchmark.weights): each header
    # against the config's dtype before loading, against the loaded model after
    folder = weights_folder(str(source), load.get("revision"))
    if folder is not None:
        check_folder(folder, what=f"the model {source}")
    tokenizer = AutoTokenizer.from_pretrained(str(source), **load)
    model = AutoModelForCausalLM.from_pretrained(
        str(source), dtype=getattr(torch, dtype), use_safetensors=True, **load
    )
    if folder is not None:
        check_folder(folder, model, what=f"the model {source}")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return (model.to(device) if device is not None else model), tokenizer


def save(model: Any, tokenizer: Any, out_dir: Path, dtype: str | None = None) -> None:
    """A plain model folder (config, safetensors, tokenizer with its chat template), with the
    key/value cache switched back on for generation (training may turn it off); `dtype`
    (float32 | bfloat16): the weights are cast to it first (the config records it), None keeps
    theirs."""
    import torch

    Path(out_dir).mkdir(parents=True, exist_ok=True)
    if dtype is not None:
        model = model.to(getattr(torch, dtype))
    model.config.use_cache = True
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
