"""Local transformers backend: batched greedy generation with a thinking budget.

Requests are grouped by decoding settings, sorted by prompt length (longest first, so an
out-of-memory error shows up on the first batch), generated in left-padded batches of at most
`max_batch_size`, and returned in the original order. A CUDA out-of-memory error halves the
batch and retries. Weights load from safetensors only; remote code runs only when configured.

Thinking budget (Qwen3-style `enable_thinking`): generation first runs for at most
`thinking_budget` new tokens, stopping early at `</think>` or end of text; a thinking block that
is still open is then closed by appending "</think>\\n\\n", and the answer gets its own
`max_new_tokens`. Every appended token counts in `generated_tokens`. Any thinking block, closed
or not, is stripped from the returned text."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.consultants.base import Answer, Consultant, Decoding, Query
from benchmark.consultants.errors import ConsultantError
from benchmark.prompts.parse import THINK_END, THINK_START
from benchmark.prompts.parse import strip_thinking as split_thinking

DTYPES = ("auto", "bfloat16", "float16", "float32")
THINK_CLOSE = THINK_END + "\n\n"
_MB = 1 << 20


def strip_thinking(text: str) -> str:
    """Remove leaked thinking: `<think>...</think>` blocks, an unterminated `<think>...`, and
    anything before a stray `</think>` (the template opened the block inside the prompt); the
    literal reading of the parser's split (benchmark.prompts.parse.strip_thinking), trimmed."""
    return split_thinking(text, literal=True)[0].strip()


@dataclass
class Generation:
    """Token-level result of one query (the test and benchmark scripts look inside)."""

    prompt_ids: list[int]
    new_ids: list[int]  # everything appended after the prompt, forced `</think>` included
    thinking_tokens: int  # tokens generated while the thinking block was open
    text: str


class HFConsultant(Consultant):
    """A causal LM from the Hugging Face hub (`model`, cached locally) or a local `path`."""

    def __init__(
        self,
        model: str | None = None,
        path: str | None = None,
        revision: str | None = None,
        dtype: str = "auto",
        device_map: str | dict | None = "auto",
        trust_remote_code: bool = False,
        max_batch_size: int = 32,
        num_threads: int | None = None,
    ) -> None:
        """`num_threads` (process-wide torch.set_num_threads; None leaves it alone): on a
        small shared CPU one thread is several times faster than OpenMP threads that contend
        with other processes for the same cores."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if dtype not in DTYPES:
            raise ConsultantError(f"slm.backend.dtype={dtype!r} is not one of {list(DTYPES)}")
        if max_batch_size < 1:
            raise ConsultantError(f"slm.backend.max_batch_size={max_batch_size} must be >= 1")
        self.max_batch_size = int(max_batch_size)
        if num_threads is not None:
            torch.set_num_threads(int(num_threads))
        source, local_only, self._identity = _resolve_source(model, path, revision)
        cuda = torch.cuda.is_available()
        if dtype == "auto":  # the weights' own dtype on GPU; bf16/fp16 matmuls crawl on CPU
            torch_dtype: Any = "auto" if cuda else torch.float32
        else:
            torch_dtype = getattr(torch, dtype)
        if device_map in ("auto", "cpu") and not cuda:
            device_map = None
        common = dict(
            revision=revision, trust_remote_code=trust_remote_code, local_files_only=local_only
        )
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source, **common)
            self.model = AutoModelForCausalLM.from_pretrained(
                source, dtype=torch_dtype, device_map=device_map, use_safetensors=True, **common
            )
        except (OSError, ValueError) as exc:
            if path is None and not local_only:
                raise ConsultantError(_offline_hint(model, exc)) from exc
            raise ConsultantError(f"cannot load the model at {source!r}: {exc}") from exc
        self.model.eval()
        self._setup_tokens()

    @classmethod
    def weights_identity(
        cls,
        model: str | None = None,
        path: str | None = None,
        revision: str | None = None,
        **_: object,
    ) -> str | None:
        return _resolve_source(model, path, revision)[2]

    # ----------------------------------------------------------------------------- setup
    def _setup_tokens(self) -> None:
        tok, vocab = self.tokenizer, self.tokenizer.get_vocab()
        eos: list[int] = []
        gen_eos = self.model.generation_config.eos_token_id
        for e in [*(gen_eos if isinstance(gen_eos, list) else [gen_eos]), tok.eos_token_id]:
            if e is not None and e not in eos:
                eos.append(int(e))
        if "<|im_end|>" in vocab and vocab["<|im_end|>"] not in eos:
            eos.append(vocab["<|im_end|>"])
        if not eos:
            raise ConsultantError(f"{self.identity}: the tokenizer defines no end-of-text token")
        self.eos_ids = eos
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else eos[0]
        self.think_start = vocab.get(THINK_START)
        self.think_end = vocab.get(THINK_END)
        self.close_ids = (
            tok.encode(THINK_CLOSE, add_special_tokens=False) if self.think_end is not None else []
        )
        gc = copy.deepcopy(self.model.generation_config)
        gc.update(temperature=None, top_p=None, top_k=None, min_p=None, do_sample=False)
        gc.pad_token_id, gc.eos_token_id = self.pad_id, self.eos_ids
        self._base_gc = gc

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def device(self) -> Any:
        return self.model.device

    # ----------------------------------------------------------------------------- answer
    def answer(self, queries: list[Query]) -> list[Answer]:
        return [
            Answer(g.text, len(g.prompt_ids), len(g.new_ids), s)
            for g, s in self.generate_with_times(queries)
        ]

    def generate(self, queries: list[Query]) -> list[Generation]:
        return [g for g, _ in self.generate_with_times(queries)]

    def generate_with_times(self, queries: list[Query]) -> list[tuple[Generation, float]]:
        """Group by decoding, sort by prompt length, batch, restore the original order."""
        prompts = [self.encode(q) for q in queries]
        out: list[tuple[Generation, float] | None] = [None] * len(queries)
        groups: dict[Decoding, list[int]] = {}
        for i, q in enumerate(queries):
            groups.setdefault(q.decoding, []).append(i)
        for decoding, idx in groups.items():
            idx.sort(key=lambda i: -len(prompts[i]))
            for s in range(0, len(idx), self.max_batch_size):
                chunk = idx[s : s + self.max_batch_size]
                results = self._run_splitting([prompts[i] for i in chunk], decoding)
                for i, r in zip(chunk, results, strict=True):
                    out[i] = r
        return out  # type: ignore[return-value]

    def encode(self, query: Query) -> list[int]:
        """The prompt's token ids under the model's chat template."""
        text = self.tokenizer.apply_chat_template(
            query.messages,
            add_generation_prompt=True,
            tokenize=False,
            enable_thinking=query.decoding.enable_thinking,
        )
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _run_splitting(
        self, prompts: list[list[int]], decoding: Decoding
    ) -> list[tuple[Generation, float]]:
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
            return self._run_splitting(prompts[:half], decoding) + self._run_splitting(
                prompts[half:], decoding
            )

    def _generate_batch(self, prompts: list[list[int]], d: Decoding) -> list[Generation]:
        n = len(prompts)
        new: list[list[int]] = [[] for _ in range(n)]
        thinking = [0] * n
        budget = d.thinking_budget if d.enable_thinking and self.think_end is not None else 0
        allowance = [d.max_new_tokens] * n  # answer tokens still allowed per row
        if budget > 0:
            phase1 = self._generate_ids(prompts, budget, d, [*self.eos_ids, self.think_end])
            todo = []
            for i, ids in enumerate(phase1):
                new[i] = list(ids)
                was_open = self._open(prompts[i])
                is_open = self._open(prompts[i] + ids)
                if was_open or self.think_start in ids:
                    thinking[i] = _thinking_count(ids, was_open, self.think_start, self.think_end)
                if ids and ids[-1] in self.eos_ids:
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
            phase2 = self._generate_ids(seqs, max(allowance[i] for i in todo), d, self.eos_ids)
            for i, ids in zip(todo, phase2, strict=True):
                new[i] += list(ids[: allowance[i]])
        return [
            Generation(prompts[i], new[i], thinking[i], self._answer_text(prompts[i], new[i]))
            for i in range(n)
        ]

    def _open(self, ids: list[int]) -> bool:
        """Is a thinking block open at the end of `ids`?"""
        if self.think_start is None:
            return False
        last_start = _rindex(ids, self.think_start)
        return last_start >= 0 and last_start > _rindex(ids, self.think_end)

    def _answer_text(self, prompt: list[int], new: list[int]) -> str:
        ids = [t for t in new if t not in self.eos_ids]
        if self.think_start is not None:
            end = _rindex(ids, self.think_end)
            if end >= 0:
                ids = ids[end + 1 :]
            elif self._open(prompt):
                ids = []  # never closed: all of it was thinking
            if self.think_start in ids:
                ids = ids[: ids.index(self.think_start)]
        return strip_thinking(self.tokenizer.decode(ids, skip_special_tokens=True))

    def _generate_ids(
        self, seqs: list[list[int]], max_new: int, d: Decoding, stop: list[int]
    ) -> list[list[int]]:
        """Left-padded batched generate; each row's new tokens up to and including its stop."""
        import torch

        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for r, s in enumerate(seqs):
            ids[r, width - len(s) :] = torch.tensor(s, dtype=torch.long)
            mask[r, width - len(s) :] = 1
        gc = copy.deepcopy(self._base_gc)
        gc.update(max_new_tokens=max_new, eos_token_id=stop)
        if d.temperature > 0:
            gc.update(do_sample=True, temperature=d.temperature, top_p=1.0, top_k=0)
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                generation_config=gc,
            )
        rows = []
        for row in out[:, width:].tolist():
            cut = next((k for k, t in enumerate(row) if t in stop), None)
            rows.append(row if cut is None else row[: cut + 1])
        return rows

    def close(self) -> None:
        import torch

        self.model = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


# --------------------------------------------------------------------------------- helpers
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


def _resolve_source(
    model: str | None, path: str | None, revision: str | None
) -> tuple[str, bool, str]:
    """(what to pass to from_pretrained, local_files_only, identity)."""
    if path is not None:
        p = Path(os.path.expanduser(str(path)))
        if not p.is_dir():
            raise ConsultantError(
                f"slm.backend.path={str(path)!r} does not exist or is not a directory; point it "
                "at a model directory (config.json + *.safetensors + tokenizer files)"
            )
        if not (p / "config.json").is_file():
            raise ConsultantError(f"slm.backend.path={str(path)!r} has no config.json")
        return str(p), True, "hf-local:" + local_fingerprint(p)
    if not model:
        raise ConsultantError("the hf backend needs slm.backend.model (hub id) or slm.backend.path")
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(model, "config.json", revision=revision)
    if isinstance(cached, str):  # snapshots/<commit>/config.json
        return model, True, f"hf:{model}@{Path(cached).parent.name}"
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise ConsultantError(_offline_hint(model, "HF_HUB_OFFLINE is set"))
    return model, False, f"hf:{model}@{revision or 'main'}"


def _offline_hint(model: str | None, cause: object) -> str:
    from huggingface_hub.constants import HF_HUB_CACHE

    return (
        f"slm.backend.model={model!r} is not in the local Hugging Face cache ({HF_HUB_CACHE}) "
        f"and could not be downloaded ({cause}). Set slm.backend.path to a local copy of the "
        f"model, or pre-download it on a machine with network: `huggingface-cli download "
        f"{model}` (HF_HOME chooses the cache directory; runs then work with HF_HUB_OFFLINE=1)."
    )


def local_fingerprint(directory: Path) -> str:
    """Hash of a local model: small config/tokenizer files in full, and for each weight file
    its size plus its first and last MB. Fast on multi-GB weights, stable across copies."""
    h = hashlib.sha256()
    for f in sorted(directory.iterdir()):
        if not f.is_file():
            continue
        if f.suffix in (".json", ".jinja", ".txt", ".model") and f.stat().st_size < 64 * _MB:
            h.update(json.dumps([f.name, f.stat().st_size]).encode())
            h.update(f.read_bytes())
        elif f.suffix in (".safetensors", ".bin", ".gguf"):
            size = f.stat().st_size
            h.update(json.dumps([f.name, size]).encode())
            with f.open("rb") as fh:
                h.update(fh.read(_MB))
                fh.seek(max(0, size - _MB))
                h.update(fh.read(_MB))
    return h.hexdigest()[:16]
