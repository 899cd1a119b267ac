"""The GPU benchmark's consultant and its figures: the hf backend on a model built in memory
(`InMemoryHF`), ASK+ prompts from validation episodes, and queries/s per batch size
with generation (`throughput`, with the backend's prefill and decode times) and with choice
scoring (`choice_throughput`); medians over repeats after a warmup, CUDA synchronised."""

from __future__ import annotations

import statistics
import time
from typing import Any

from benchmark.consultants import Consultant, Decoding, Query, backend


class InMemoryHF(backend("hf")):  # type: ignore[misc]
    """The hf backend (grouping, length sorting, left padding, OOM halving, thinking budget) on a
    model and tokenizer built in memory instead of loaded with from_pretrained."""

    def __init__(self, model: Any, tokenizer: Any, identity: str, max_batch_size: int = 64) -> None:
        self.setup(model, tokenizer, identity, max_batch_size=max_batch_size)


def ask_plus_messages(task: Any, n: int) -> list[list[dict[str, str]]]:
    """ASK+ (stateful + rationale) prompts from `n` validation episodes at different depths."""
    import numpy as np

    from benchmark.prompts.ask import AskPrompt

    prompt = AskPrompt(name="stateful", level="stateful", rationale=True)
    rng = np.random.default_rng(0)
    out = []
    for seed in range(n):
        ep = task.episode(seed)
        for _ in range(int(rng.integers(0, 40))):
            if ep.done:
                break
            ep.step(int(rng.integers(len(ep.action_names))))
        out.append(prompt.session(ep, False).messages(0))
    return out


def query_batch(
    messages: list, actions: tuple[str, ...], decoding: Decoding, n: int
) -> list[Query]:
    """n queries over the ASK+ prompts (cycled), answered as bare actions, with one decoding."""
    return [
        Query(
            messages=messages[i % len(messages)],
            actions=actions,
            render_answer=lambda a, r: a,
            decoding=decoding,
        )
        for i in range(n)
    ]


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def timed_answers(
    consultant: Consultant, queries: list[Query], repeats: int, device: str
) -> tuple[list[float], list]:
    """Seconds of each of `repeats` answer() calls after one warmup (kernels, allocator), the
    prefill statistics counting the timed calls only; and the last call's answers."""
    consultant.answer(queries)
    consultant.reset_prefill_stats()
    times, answers = [], []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        answers = consultant.answer(queries)
        _sync(device)
        times.append(time.perf_counter() - t0)
    return times, answers


def throughput(
    consultant: Consultant, messages: list, actions: tuple[str, ...], sizes: Any, device: str
) -> dict[str, Any]:
    """Queries/s and generated tokens/s per batch size (median over repeats, after a warmup)."""
    decoding = Decoding(
        max_new_tokens=sizes.answer_tokens,
        enable_thinking=True,
        thinking_budget=sizes.thinking_budget,
    )
    out: dict[str, Any] = {}
    for bs in sizes.batch_sizes:
        queries = query_batch(messages, actions, decoding, bs)
        times, answers = timed_answers(consultant, queries, sizes.repeats, device)
        gen_tokens = sum(a.generated_tokens for a in answers)
        prompt_tokens = sum(a.prompt_tokens for a in answers)
        stats = consultant.prefill_stats()  # the timed calls' (lean decode: prefill, decode)
        med = statistics.median(times)
        out[str(bs)] = {
            "median_s": med,
            "times_s": times,
            "queries_per_s": bs / med,
            "generated_tokens_per_s": gen_tokens / med,
            "prompt_tokens_mean": prompt_tokens / bs,
            "generated_tokens_mean": gen_tokens / bs,
            "prefill_s_per_query": stats["prefill_seconds"] / (bs * sizes.repeats),
            "decode_s_per_query": stats["decode_seconds"] / (bs * sizes.repeats),
        }
    return out


def choice_throughput(
    consultant: Consultant, messages: list, actions: tuple[str, ...], sizes: Any, device: str
) -> dict[str, Any]:
    """Choice scoring (slm.decoding.mode=choices): queries/s per batch size with every
    valid action scored on the prompt's cache (median over repeats, after a warmup), and the
    split of the backend's time into prefill and scoring."""
    decoding = Decoding(max_new_tokens=sizes.answer_tokens, mode="choices")
    out: dict[str, Any] = {}
    for bs in sizes.batch_sizes:
        queries = query_batch(messages, actions, decoding, bs)
        times, answers = timed_answers(consultant, queries, sizes.repeats, device)
        if not all(a.choices and a.text in actions for a in answers):
            raise RuntimeError("choice scoring returned an answer without per-action scores")
        stats = consultant.prefill_stats()
        med = statistics.median(times)
        out[str(bs)] = {
            "median_s": med,
            "times_s": times,
            "queries_per_s": bs / med,
            "prefill_s_per_query": stats["prefill_seconds"] / (bs * sizes.repeats),
            "scoring_s_per_query": stats["decode_seconds"] / (bs * sizes.repeats),
        }
    return out


def prompt_ids(tokenizer: Any, messages: list) -> list[list[int]]:
    out = []
    for m in messages:
        text = tokenizer.apply_chat_template(
            m, add_generation_prompt=True, tokenize=False, enable_thinking=True
        )
        out.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return out
