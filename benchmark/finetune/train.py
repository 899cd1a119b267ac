"""Supervised fine-tuning of a causal LM on (messages, answer) examples with transformers' Trainer.

Each example becomes the prompt exactly as the hf backend encodes it (the model's own chat
template, `add_generation_prompt=True`, the query's thinking mode: its `chat_prompt`) and
the answer the model should continue with: `</think>\\n\\n` first when the template leaves a
thinking block open (the consultant's thinking phase then stops at once), the answer text, the
end-of-turn token. The prompt and the answer are tokenized apart, as generation sees them, and
the loss is on the answer tokens only (prompt labels -100). `lora` (PEFT, optional) trains
adapters and merges them, so the result is always a plain model directory. Loading, padding and
saving are benchmark.finetune.lm's, shared with Agent-BRACE's RL (benchmark.brace.joint).

Precision: the weights are always loaded and updated in float32 (master weights); `dtype:
bfloat16` runs the forward and backward passes under torch.autocast(bfloat16) (the Trainer's
`bf16`, on a GPU and on a CPU alike) and saves the trained model in bfloat16. Why: at the
learning rates a real model is fine-tuned with (about 1e-5), most AdamW updates are smaller than
half a bfloat16 step of the weight they change, so weights held in bfloat16 round them away and
barely move (tests/finetune/test_finetune.py measures it)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.consultants.hf import chat_prompt
from benchmark.finetune import lm
from benchmark.finetune.dataset import Example
from benchmark.finetune.settings import settings_mapping
from benchmark.vocabulary import THINK_END, THINK_START

log = logging.getLogger(__name__)
IGNORE = -100  # label of a token the loss skips
THINK_CLOSE = THINK_END + "\n\n"
MASTER_DTYPE = "float32"  # the dtype the weights are held and updated in


@dataclass(frozen=True)
class TrainSettings:
    """`slm.backend.train` (conf/slm/finetuned.yaml): every value enters the model's cache key."""

    epochs: float = 3.0
    learning_rate: float = 2e-3
    batch_size: int = 16
    grad_accum: int = 1
    warmup: float = 0.05  # a fraction of the optimizer steps
    scheduler: str = "linear"  # transformers' lr_scheduler_type
    weight_decay: float = 0.0
    max_length: int = 4096  # an example longer than this (prompt + answer tokens) is an error
    dtype: str = "float32"  # float32 | bfloat16: autocast compute and saved dtype (fp32 masters)
    gradient_checkpointing: bool = False
    lora: Mapping[str, Any] | None = None  # {r, alpha, dropout, target_modules}: PEFT adapters

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> TrainSettings:
        cfg = settings_mapping(cls, cfg, "train")
        out = cls(**cfg)
        if out.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"slm.backend.train.dtype={out.dtype!r}: allowed float32, bfloat16")
        if not out.epochs > 0 or not out.learning_rate > 0 or out.batch_size < 1:
            raise ValueError(
                f"slm.backend.train: epochs={out.epochs}, learning_rate={out.learning_rate} and "
                f"batch_size={out.batch_size} must be positive"
            )
        return out


def end_of_turn(tokenizer: Any) -> str:
    """The text that ends an assistant turn (what generation stops on): `<|im_end|>` in the
    ChatML family, else the tokenizer's eos token."""
    if "<|im_end|>" in tokenizer.get_vocab():
        return "<|im_end|>"
    if tokenizer.eos_token is None:
        raise ValueError("the tokenizer has no eos token: cannot end the answer")
    return str(tokenizer.eos_token)


def encode(tokenizer: Any, example: Example, max_length: int) -> dict[str, list[int]]:
    """input_ids and labels of one example (labels -100 on the prompt)."""
    prompt = chat_prompt(tokenizer, example.messages, example.decoding.enable_thinking)
    thinking_open = prompt.rfind(THINK_START) > prompt.rfind(THINK_END)
    target = (THINK_CLOSE if thinking_open else "") + example.answer + end_of_turn(tokenizer)
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    a = tokenizer(target, add_special_tokens=False)["input_ids"]
    if len(p) + len(a) > max_length:
        raise ValueError(
            f"a fine-tuning example has {len(p) + len(a)} tokens, more than "
            f"slm.backend.train.max_length={max_length}"
        )
    return {"input_ids": p + a, "labels": [IGNORE] * len(p) + a}


class _Collator:
    """Right-pads a batch: pad id on the inputs, -100 on the labels, attention mask 0."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = int(pad_id)

    def __call__(self, rows: Sequence[dict[str, list[int]]]) -> dict[str, Any]:
        import torch

        width = max(len(r["input_ids"]) for r in rows)
        ids, labels, mask = [], [], []
        for r in rows:
            pad = width - len(r["input_ids"])
            ids.append(r["input_ids"] + [self.pad_id] * pad)
            labels.append(r["labels"] + [IGNORE] * pad)
            mask.append([1] * len(r["input_ids"]) + [0] * pad)
        return {
            "input_ids": torch.tensor(ids),
            "labels": torch.tensor(labels),
            "attention_mask": torch.tensor(mask),
        }


def fine_tune(
    base_dir: str | Path,
    examples: Sequence[Example],
    out_dir: Path,
    settings: TrainSettings,
    *,
    seed: int = 0,
    load_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Fine-tune the model at `base_dir` (a local directory, or a hub id in the local cache) on
    `examples` and save model + tokenizer to `out_dir`; `load_kwargs` go to from_pretrained
    (revision, local_files_only, trust_remote_code). The Trainer's scratch directory is
    `<out_dir>.trainer`. Returns training statistics (with the master, autocast and saved
    dtypes)."""
    import torch
    from transformers import Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    # float32 master weights whatever settings.dtype is (the module docstring says why)
    model, tokenizer = lm.load(base_dir, MASTER_DTYPE, device=None, **dict(load_kwargs or {}))
    autocast = settings.dtype == "bfloat16"
    rows = [encode(tokenizer, e, settings.max_length) for e in examples]
    cuda = torch.cuda.is_available()
    if settings.lora:
        model = _with_lora(model, settings.lora)
    steps_per_epoch = math.ceil(len(rows) / (settings.batch_size * settings.grad_accum))
    total_steps = max(1, math.ceil(steps_per_epoch * settings.epochs))
    before = _weights_signature(model)
    args = TrainingArguments(
        output_dir=str(out_dir.parent / (out_dir.name + ".trainer")),
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum,
        num_train_epochs=settings.epochs,
        learning_rate=settings.learning_rate,
        lr_scheduler_type=settings.scheduler,
        warmup_steps=warmup_steps(settings.warmup, total_steps),
        weight_decay=settings.weight_decay,
        bf16=autocast,  # torch.autocast(bfloat16) around forward and backward, CPU or GPU
        **_checkpointing(TrainingArguments, settings.gradient_checkpointing),
        seed=int(seed),
        data_seed=int(seed),
        use_cpu=not cuda,
        save_strategy="no",
        report_to=[],
        logging_strategy="steps",
        logging_steps=max(1, steps_per_epoch // 4),
        disable_tqdm=True,
        remove_unused_columns=False,
        dataloader_pin_memory=cuda,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=rows,
        data_collator=_Collator(lm.pad_id(tokenizer)),
    )
    trainer.remove_callback(PrinterCallback)  # its print() of each log: to the log instead
    trainer.add_callback(_LogCallback())
    start = time.perf_counter()
    result = trainer.train()
    seconds = time.perf_counter() - start
    model = trainer.model
    if _weights_signature(model) == before:
        raise RuntimeError(
            f"fine-tuning did not change the weights ({int(trainer.state.global_step)} optimizer "
            f"steps at slm.backend.train.learning_rate={settings.learning_rate:g}, warmup "
            f"{settings.warmup:g} = {warmup_steps(settings.warmup, total_steps)} steps): the "
            "model would be the base under another name; raise the learning rate, the epochs "
            "or the number of examples"
        )
    if settings.lora:
        model = model.merge_and_unload()
    lm.save(model, tokenizer, out_dir, dtype=settings.dtype)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    tokens = sum(len(r["input_ids"]) for r in rows)
    return {
        "train_seconds": round(seconds, 2),
        "examples": len(rows),
        "tokens_per_epoch": tokens,
        "answer_tokens_per_epoch": sum(sum(x != IGNORE for x in r["labels"]) for r in rows),
        "optimizer_steps": int(trainer.state.global_step),
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "train_loss": float(result.training_loss),
        "device": "cuda" if cuda else "cpu",
        "master_dtype": MASTER_DTYPE,
        "autocast": settings.dtype if autocast else None,
        "saved_dtype": settings.dtype,
    }


def warmup_steps(warmup: float, total: int) -> int:
    """The warmup's optimizer steps: a fraction `warmup` of `total`, rounded up as transformers
    does, but never every step. Warmup starts at learning rate 0, so a warmup as long as the
    training (a one-step SFT: ceil(0.05 x 1) = 1) would train at rate 0 and change nothing."""
    steps = int(warmup) if warmup >= 1 else math.ceil(total * warmup)
    return max(0, min(steps, total - 1))


def _weights_signature(model: Any) -> list[tuple[float, float]]:
    """Per trainable tensor, its sum and sum of squares (float64, on the CPU): any optimizer
    step with a nonzero learning rate moves them; a copy of the weights would double memory."""
    import torch

    with torch.no_grad():
        return [
            (p.double().sum().item(), p.double().square().sum().item())
            for p in model.parameters()
            if p.requires_grad
        ]


def _checkpointing(arguments: type, on: bool) -> dict[str, bool]:
    """Activation (gradient) checkpointing under the name this transformers version knows."""
    import inspect

    params = inspect.signature(arguments.__init__).parameters
    name = (
        "activation_checkpointing"
        if "activation_checkpointing" in params
        else "gradient_checkpointing"
    )
    return {name: bool(on)}


def _log_callback_class() -> type:
    from transformers import TrainerCallback

    class LogCallback(TrainerCallback):
        """One log line per Trainer log (the training loss a quarter epoch at a time)."""

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
            if logs and "loss" in logs:
                log.info(
                    "fine-tune: epoch %.2f, step %d/%d, loss %.4f, learning rate %.2e",
                    float(logs.get("epoch", 0.0)),
                    state.global_step,
                    state.max_steps,
                    float(logs["loss"]),
                    float(logs.get("learning_rate", 0.0)),
                )

    return LogCallback


def _LogCallback() -> Any:  # noqa: N802 - built lazily: transformers is imported on use
    return _log_callback_class()()


def _with_lora(model: Any, lora: Mapping[str, Any]) -> Any:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:  # optional: large models on a GPU
        raise ImportError(
            "slm.backend.train.lora needs PEFT: pip install peft (or train all weights: "
            "slm.backend.train.lora=null)"
        ) from exc
    cfg = dict(lora)
    config = LoraConfig(
        r=int(cfg.pop("r", 16)),
        lora_alpha=int(cfg.pop("alpha", 32)),
        lora_dropout=float(cfg.pop("dropout", 0.05)),
        target_modules=cfg.pop("target_modules", "all-linear"),
        task_type="CAUSAL_LM",
        **cfg,
    )
    return get_peft_model(model, config)
