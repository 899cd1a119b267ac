"""RL of Agent-BRACE's belief role with TRL's GRPOTrainer (optional: pip install -e '.[rl]'):
the prompts are belief updates of PPO rollouts on TRAINING seeds (benchmark.brace.sft's
teacher-forced states), each completion is scored by R_belief computed by program against the
state's true state (benchmark.brace.rewards). A first step: one-step updates with b(t-1) from
the teacher, not yet the joint rollout of belief and policy through the evaluator (docs/brace.md)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmark.brace.rewards import DEFAULT_WEIGHTS, BeliefWeights, belief_reward
from benchmark.brace.sft import BeliefState
from benchmark.seeds import TRAIN_SEED_MIN


def completion_text(completion: Any) -> str:
    """The text of one GRPO completion (conversational: a list of messages)."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content", "")) for m in completion)


def reward_function(states: Sequence[BeliefState], weights: BeliefWeights = DEFAULT_WEIGHTS) -> Any:
    """R_belief as a TRL reward function: the dataset's `state` column indexes `states`."""

    def r_belief(prompts: Any, completions: Any, state: Sequence[int], **_: Any) -> list[float]:
        out = []
        for completion, i in zip(completions, state, strict=True):
            s = states[int(i)]
            text = completion_text(completion)
            out.append(
                belief_reward(text, s.previous, s.truth, s.teacher, s.success, weights).total
            )
        return out

    r_belief.__name__ = "r_belief"
    return r_belief


def train(
    model_dir: str | Path,
    states: Sequence[BeliefState],
    out_dir: Path,
    *,
    max_steps: int = 4,
    num_generations: int = 4,
    prompts_per_step: int = 1,
    max_completion_length: int = 160,
    learning_rate: float = 1e-3,
    temperature: float = 1.0,
    seed: int = 0,
) -> dict[str, Any]:
    """A few GRPO steps on the belief role of the model at `model_dir`; saves to `out_dir` and
    returns the mean reward per step (TRL's log) and timing."""
    if any(s.seed < TRAIN_SEED_MIN for s in states):
        raise ValueError(
            f"GRPO trains on training seeds only (>= {TRAIN_SEED_MIN}): collect_states(split_ok=False)"
        )
    try:
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as exc:
        raise ImportError("GRPO needs TRL: pip install -e '.[rl]' (trl>=1.16)") from exc
    import torch
    from transformers import AutoTokenizer

    rows = {
        "prompt": [s.messages for s in states],
        "state": list(range(len(states))),
    }
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    batch = num_generations * prompts_per_step
    args = GRPOConfig(
        output_dir=str(out_dir.parent / (out_dir.name + ".trainer")),
        per_device_train_batch_size=batch,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        max_steps=max_steps,
        learning_rate=learning_rate,
        temperature=temperature,
        beta=0.0,  # no reference model (the paper's PPO keeps a KL term; a GPU run can set it)
        use_cpu=not torch.cuda.is_available(),  # the trainer on the model's device
        seed=seed,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        chat_template_kwargs={"enable_thinking": False},
    )
    trainer = GRPOTrainer(
        model=str(model_dir),
        reward_funcs=reward_function(states),
        args=args,
        train_dataset=Dataset.from_dict(rows),
        processing_class=tokenizer,
    )
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    trainer.save_model(str(out_dir))
    tokenizer.save_pretrained(out_dir)
    logs = [h for h in trainer.state.log_history if "reward" in h]
    return {
        "steps": int(trainer.state.global_step),
        "seconds": round(seconds, 2),
        "reward": [round(float(h["reward"]), 4) for h in logs],
        "reward_std": [round(float(h.get("reward_std", 0.0)), 4) for h in logs],
    }
