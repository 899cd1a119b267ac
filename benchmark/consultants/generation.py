"""The hf backend's generation loop (benchmark.consultants.hf): one batch of prompts through
`generate` with the thinking budget, its tokens turned into answer text. Kept apart from the
backend, which renders prompts, groups queries by decoding and batches them by length.

Thinking budget (Qwen3-style `enable_thinking`): generation first runs for at most
`thinking_budget` new tokens, stopping early at `</think>` or end of text; a thinking block that
is still open is then closed by appending "</think>\\n\\n", and the answer gets its own
`max_new_tokens`. Every appended token counts in `generated_tokens`. Any thinking block, closed
or not, is stripped from the returned text. A CUDA out-of-memory error halves the batch and
retries. A short plain-greedy answer takes the lean loop (benchmark.consultants.lean) instead of
`generate`; rows reuse a stored prompt prefix (benchmark.consultants.prefix)."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

from benchmark.consultants.base import Decoding
from benchmark.consultants.finite import finite_watch, raise_nonfinite
from benchmark.consultants.lean import LeanDecoder
from benchmark.consultants.penalty import row_penalty
from benchmark.consultants.prefix import PrefixReuse, Prompt, left_padded
from benchmark.consultants.runtime import ModelRuntime
from benchmark.consultants.sampling import row_sampler
from benchmark.vocabulary import THINK_END, THINK_START, released_answer
from benchmark.vocabulary import strip_thinking as split_thinking

THINK_CLOSE = THINK_END + "\n\n"


def strip_thinking(text: str) -> str:
    """Remove leaked thinking: `<think>...</think>` blocks, an unterminated `<think>...`, and
    anything before a stray `</think>` (the template opened the block inside the prompt); the
    literal reading of the parser's split (benchmark.vocabulary.strip_thinking), trimmed."""
    return split_thinking(text, literal=True)[0].strip()


@dataclass
class Generation:
    """Token-level result of one query (the test and benchmark scripts look inside)."""

    prompt_ids: list[int]
    new_ids: list[int]  # everything appended after the prompt, forced `</think>` included
    thinking_tokens: int  # tokens generated while the thinking block was open
    text: str


class ThinkingGenerator:
    """Batched `generate` with the thinking budget (module docstring), on the `runtime`'s model,
    with `prefix` reuse and the `lean` loop; the hf backend's `generator` part."""

    def __init__(self, runtime: ModelRuntime, prefix: PrefixReuse, lean: LeanDecoder) -> None:
        self.runtime, self.prefix, self.lean = runtime, prefix, lean
        tokenizer = runtime.tokenizer
        vocab = tokenizer.get_vocab()
        self.think_start = vocab.get(THINK_START)
        self.think_end = vocab.get(THINK_END)
        self.close_ids = (
            tokenizer.encode(THINK_CLOSE, add_special_tokens=False)
            if self.think_end is not None
            else []
        )

    def greedy_config(self, **changes: Any) -> Any:
        """A copy of the generation config this backend decodes greedily with (its stop and pad
        tokens, no sampling), with `changes` applied: for callers that run `model.generate`
        themselves on this backend's model (the bench's rebuilt reference loop)."""
        gc = copy.deepcopy(self.runtime.generation_config)
        gc.update(**changes)
        return gc

    def run(self, prompts: list[Prompt], decoding: Decoding) -> list[tuple[Generation, float]]:
        """Each prompt's generation and its share of its batch's seconds; a batch that runs out
        of CUDA memory is halved and retried."""
        import torch

        try:
            t0 = time.perf_counter()
            gens = self._generate_batch(prompts, decoding)
            per = (time.perf_counter() - t0) / len(prompts)
            return [(g, per) for g in gens]
        except torch.cuda.OutOfMemoryError:
            if len(prompts) == 1:
                raise
            torch.cuda.empty_cache()
            half = len(prompts) // 2
            return self.run(prompts[:half], decoding) + self.run(prompts[half:], decoding)

    def _generate_batch(self, rows: list[Prompt], d: Decoding) -> list[Generation]:
        n = len(rows)
        prompts = [r.ids for r in rows]
        new: list[list[int]] = [[] for _ in range(n)]
        thinking = [0] * n
        budget = d.thinking_budget if d.enable_thinking and self.think_end is not None else 0
        allowance = [d.max_new_tokens] * n  # answer tokens still allowed per row
        if budget > 0:
            phase1 = self._generate_ids(
                prompts, budget, d, [*self.runtime.eos_ids, self.think_end], rows, [0] * n
            )
            todo = []
            for i, ids in enumerate(phase1):
                new[i] = list(ids)
                was_open = self._open(prompts[i])
                is_open = self._open(prompts[i] + ids)
                if was_open or self.think_start in ids:
                    thinking[i] = _thinking_count(ids, was_open, self.think_start, self.think_end)
                if ids and ids[-1] in self.runtime.eos_ids:
                    continue  # finished inside phase 1
                if is_open:
                    new[i] += self.close_ids
                elif not (was_open or self.think_start in ids):
                    allowance[i] = d.max_new_tokens - len(ids)  # it never thought: all answer
                if allowance[i] > 0:
                    todo.append(i)
        else:
            todo = list(range(n))
        if todo:
            seqs = [prompts[i] + new[i] for i in todo]
            phase2 = self._generate_ids(
                seqs,
                max(allowance[i] for i in todo),
                d,
                self.runtime.eos_ids,
                [rows[i] for i in todo],
                [len(new[i]) for i in todo],
            )
            for i, ids in zip(todo, phase2, strict=True):
                new[i] += list(ids[: allowance[i]])
        return [
            Generation(prompts[i], new[i], thinking[i], self._answer_text(prompts[i], new[i], d))
            for i in range(n)
        ]

    def _open(self, ids: list[int]) -> bool:
        """Is a thinking block open at the end of `ids`?"""
        if self.think_start is None:
            return False
        last_start = _rindex(ids, self.think_start)
        return last_start >= 0 and last_start > _rindex(ids, self.think_end)

    def _answer_text(self, prompt: list[int], new: list[int], d: Decoding | None = None) -> str:
        ids = [t for t in new if t not in self.runtime.eos_ids]
        if d is not None and d.answer_text == "released":
            return released_answer(self.runtime.tokenizer.decode(ids, skip_special_tokens=True))
        if self.think_start is not None:
            end = _rindex(ids, self.think_end)
            if end >= 0:
                ids = ids[end + 1 :]
            elif self._open(prompt):
                ids = []  # never closed: all of it was thinking
            if self.think_start in ids:
                ids = ids[: ids.index(self.think_start)]
        return strip_thinking(self.runtime.tokenizer.decode(ids, skip_special_tokens=True))

    def _generate_ids(
        self,
        seqs: list[list[int]],
        max_new: int,
        d: Decoding,
        stop: list[int],
        prompts: list[Prompt],
        offsets: list[int],
    ) -> list[list[int]]:
        """Batched generate; each row's new tokens up to and including its stop. Rows are
        left-padded, after the shared prefix when one is reused (benchmark.consultants.prefix).
        `offsets`: how many tokens each row has generated before (its sampling stream's
        position)."""
        import torch

        if self.lean.takes(d, max_new):
            return self.lean.decode(seqs, max_new, stop, prompts, d.repetition_penalty)
        n = len(seqs)
        width = max(len(s) for s in seqs)
        # a hybrid model batched "padded" computes rows of different lengths whole (one
        # left-padded forward) rather than one forward per length on the prefix (stacked_cache)
        prefix, stats = self.prefix, self.runtime.stats
        reuse = not (prefix.reuse_mode == "unpadded" and prefix.pads(seqs))
        with torch.inference_mode():
            p, cache = prefix.shared_prefix(seqs, prompts) if reuse else (0, None)
            computed = n * (width - p)
            if (
                cache is not None
                and prefix.reuse_mode == "unpadded"
                and min(map(len, seqs)) < width
            ):
                cache = prefix.stacked_cache(cache, seqs, p)  # plain left padding from here
                p, computed = 0, n  # generate computes each row's last token
            elif cache is not None and n > 1:  # batch 1 -> n (linear layers: no repeat_interleave)
                cache.reorder_cache(torch.zeros(n, dtype=torch.long, device=self.runtime.device))
            ids, mask = left_padded(seqs, p, self.runtime.pad_id)
            stats["prompt_tokens"] += sum(len(s) for s in seqs)
            stats["prefill_tokens"] += computed
            stats["prefill_tokens_without_reuse"] += n * width
            gc = self.greedy_config(max_new_tokens=max_new, eos_token_id=stop)
            kwargs: dict[str, Any] = {}
            watch = finite_watch(n, self.runtime.device)  # first: it sees the model's own logits
            processors: list[Any] = [watch]
            if d.repetition_penalty != 1.0:  # per row, before sampling (as generate orders it)
                gc.update(repetition_penalty=1.0)  # the decoding's penalty, not the model's
                processors.append(row_penalty(d.repetition_penalty, mask))
            if d.sampling:
                seeds = [int(q.seed) for q in prompts]  # type: ignore[arg-type]
                processors.extend(row_sampler(d, seeds, offsets, width))
            from transformers import LogitsProcessorList

            kwargs["logits_processor"] = LogitsProcessorList(processors)
            if cache is not None:
                kwargs[self.runtime.cache_arg] = cache
            out = self.runtime.model.generate(
                input_ids=ids.to(self.runtime.device),
                attention_mask=mask.to(self.runtime.device),
                generation_config=gc,
                **kwargs,
            )
        new_ids, bad = out[:, width:].tolist(), watch.bad.tolist()
        bad_rows = [r for r in range(n) if bad[r]]
        raise_nonfinite(self.runtime, prefix.batching, "generate", bad_rows, seqs)
        rows = []
        for row in new_ids:
            cut = next((k for k, t in enumerate(row) if t in stop), None)
            rows.append(row if cut is None else row[: cut + 1])
        return rows


def _rindex(ids: list[int], token: int | None) -> int:
    if token is None:
        return -1
    for k in range(len(ids) - 1, -1, -1):
        if ids[k] == token:
            return k
    return -1


def _thinking_count(ids: list[int], was_open: bool, start: int | None, end: int | None) -> int:
    """Tokens of `ids` inside the thinking block (opening tag included, closing tag excluded)."""
    inside = was_open
    count = 0
    for t in ids:
        if t == start:
            inside = True
        if t == end:
            inside = False
        elif inside:
            count += 1
    return count
