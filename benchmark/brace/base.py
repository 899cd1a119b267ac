"""The base that reads its prompt: a tiny Qwen3-architecture model pretrained from scratch on the
generated TextWorld transcripts of benchmark.brace.corpus, so that copying names off a long
prompt is learnt before Agent-BRACE's SFT asks for it.

    python -m benchmark.brace.base [--layers 2 --width 256 ... --out DIR]   # pretrain (resumes)
    python -m benchmark.brace.base probe DIR                                # copy accuracy

Pretraining runs on the CPU with AdamW and a cosine schedule. It is kill-safe: every
`checkpoint_every` steps the model (save_pretrained, safetensors), the optimizer's state
(safetensors) and the loop's state (JSON) are written to a new folder that is renamed into place
whole, and a rerun continues from the newest one. The folder is named by a hash of the settings
that shape the weights, which made_with.json records; a folder made with other settings is
refused. The finished model lies in `<out>/model` (loaded by from_pretrained like any model
folder: `brace.base=<out>/model`), its SHA-256 in `<out>/model.sha256`."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.brace import corpus
from benchmark.settings import execution as runtime
from benchmark.settings import identity

MADE_WITH = "made_with.json"
STATE = "state.json"
OPTIMIZER = "optimizer.safetensors"
CHECKPOINTS = "checkpoints"
KEEP_CHECKPOINTS = 2


@dataclass(frozen=True)
class BaseSettings:
    """The pretraining settings: model shape, data, optimisation."""

    layers: int = identity(2)
    width: int = identity(256)  # hidden size
    heads: int = identity(4)
    kv_heads: int = identity(2)
    mlp: int = identity(768)  # intermediate size
    context: int = identity(1024)  # tokens per training row (max_position_embeddings)
    vocab: int = identity(8192)  # the tokenizer's cap
    tie: bool = identity(True)  # tied input and output embeddings
    steps: int = identity(2000)
    batch: int = identity(8)  # rows per step
    lr: float = identity(2e-3)
    min_lr: float = identity(0.1)  # the cosine's floor, as a fraction of lr
    warmup: int = identity(100)
    weight_decay: float = identity(0.1)
    seed: int = identity(0)  # weights' init and the document stream's start
    checkpoint_every: int = runtime(50)
    threads: int = runtime(2)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", "float") and (isinstance(value, bool) or value < 0):
                raise ValueError(f"{f.name}={value!r} is invalid: allowed a number >= 0")
        for name in ("layers", "width", "heads", "kv_heads", "mlp", "context", "steps", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} is invalid: allowed >= 1")
        if self.width % self.heads or self.heads % self.kv_heads:
            raise ValueError(
                f"width={self.width}, heads={self.heads}, kv_heads={self.kv_heads} are invalid: "
                "allowed width divisible by heads, heads by kv_heads"
            )
        if not 0 <= self.min_lr <= 1:
            raise ValueError(f"min_lr={self.min_lr} is invalid: allowed 0..1 (a fraction of lr)")
        if self.checkpoint_every < 1 or self.threads < 1:
            raise ValueError("checkpoint_every and threads are invalid: allowed >= 1")

    def identity(self) -> dict[str, Any]:
        """What the weights depend on: the identity settings and the corpus' version."""
        out = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.metadata["identity"]
        }
        return {**out, "corpus_version": corpus.CORPUS_VERSION}

    def digest(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


class BaseError(RuntimeError):
    """A pretraining or probe that cannot run (bad folder, other settings); one line."""


def default_out(settings: BaseSettings) -> Path:
    """`<results root>/models/base/base-<settings hash>` (the root: $BENCHMARK_ROOT or outputs)."""
    return (
        Path(os.environ.get("BENCHMARK_ROOT", "outputs"))
        / "models/base"
        / f"base-{settings.digest()}"
    )


# --------------------------------------------------------------------------- tokenizer and model
def sample_text() -> str:
    """A few rendered documents: the tokenizer learns the transcripts' own phrases from them."""
    return "\n".join(corpus.document(corpus.CORPUS_SEEDS[i]).text for i in range(40))


def build_tokenizer(vocab: int) -> Any:
    """The `words` size's tokenizer corpus plus the corpus' names and a few documents (deterministic,
    offline): each game word and name is one token or a few."""
    from benchmark.consultants.tiny import SIZES, train_tokenizer

    return train_tokenizer((*SIZES["words"]["corpus"], corpus.vocabulary, sample_text), vocab)


def model_config(settings: BaseSettings, tokenizer: Any) -> Any:
    from transformers import Qwen3Config

    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=settings.width,
        intermediate_size=settings.mlp,
        num_hidden_layers=settings.layers,
        num_attention_heads=settings.heads,
        num_key_value_heads=settings.kv_heads,
        head_dim=settings.width // settings.heads,
        max_position_embeddings=settings.context,
        tie_word_embeddings=settings.tie,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        eos_token_id=eos,
        dtype="float32",
    )


# --------------------------------------------------------------------------- data
def batch(tokenizer: Any, settings: BaseSettings, next_doc: int) -> tuple[Any, Any, int]:
    """The rows of one step from document number `next_doc` on: whole documents packed into rows
    of `context` tokens (one longer than a row is cut), each followed by <|endoftext|>, the rest
    padded and not scored. A function of `next_doc` alone, so a resumed run sees the same data."""
    import torch

    pad = tokenizer.pad_token_id
    max_chars = settings.context * 4  # documents end near a row's length
    start = (settings.seed * 10_000_000) % len(corpus.CORPUS_SEEDS)
    rows, labels = [], []
    pending: list[int] | None = None
    while len(rows) < settings.batch:
        row: list[int] = []
        while True:
            if pending is None:
                seed = corpus.CORPUS_SEEDS[(start + next_doc) % len(corpus.CORPUS_SEEDS)]
                text = corpus.document(seed, max_chars=max_chars).text
                pending = tokenizer(text)["input_ids"][: settings.context - 1] + [pad]
                next_doc += 1
            if row and len(row) + len(pending) > settings.context:
                break
            row, pending = row + pending, None
        n = len(row)
        rows.append(row + [pad] * (settings.context - n))
        labels.append(row + [-100] * (settings.context - n))
    if pending is not None:  # the document that did not fit starts the next step
        next_doc -= 1
    return torch.tensor(rows), torch.tensor(labels), next_doc


def learning_rate(settings: BaseSettings, step: int) -> float:
    """Linear warmup, then a cosine down to `min_lr` x lr at the last step."""
    if step < settings.warmup:
        return settings.lr * (step + 1) / settings.warmup
    progress = (step - settings.warmup) / max(1, settings.steps - settings.warmup)
    return settings.lr * (
        settings.min_lr + (1 - settings.min_lr) * 0.5 * (1 + math.cos(math.pi * progress))
    )


# --------------------------------------------------------------------------- checkpoints
def write_dir_atomic(target: Path, write: Any) -> None:
    """Write a folder under a temporary name, then rename it into place whole."""
    tmp = target.with_name(f".tmp-{target.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write(tmp)
    os.replace(tmp, target)


def save_checkpoint(out: Path, model: Any, tokenizer: Any, optimizer: Any, state: dict) -> None:
    from safetensors.torch import save_file

    def write(work: Path) -> None:
        model.save_pretrained(work, safe_serialization=True)
        tokenizer.save_pretrained(work)
        opt = optimizer.state_dict()
        tensors = {
            f"{i}.{k}": v.contiguous() for i, s in opt["state"].items() for k, v in s.items()
        }
        save_file(tensors, str(work / OPTIMIZER))
        (work / STATE).write_text(json.dumps({**state, "param_groups": opt["param_groups"]}))

    folder = out / CHECKPOINTS
    folder.mkdir(parents=True, exist_ok=True)
    write_dir_atomic(folder / f"step-{state['step']:07d}", write)
    for old in sorted(folder.glob("step-*"))[:-KEEP_CHECKPOINTS]:
        shutil.rmtree(old, ignore_errors=True)


def latest_checkpoint(out: Path) -> Path | None:
    found = sorted((out / CHECKPOINTS).glob("step-*"))
    return found[-1] if found else None


def load_optimizer(optimizer: Any, checkpoint: Path, state: dict) -> None:
    from collections import defaultdict

    from safetensors.torch import load_file

    flat = load_file(str(checkpoint / OPTIMIZER))
    per_param: dict[int, dict] = defaultdict(dict)
    for key, value in flat.items():
        index, name = key.split(".", 1)
        per_param[int(index)][name] = value
    optimizer.load_state_dict({"state": dict(per_param), "param_groups": state["param_groups"]})


def check_made_with(out: Path, settings: BaseSettings) -> None:
    """Record the settings in a new folder; refuse a folder made with other settings."""
    path = out / MADE_WITH
    asked = {"identity": settings.digest(), "settings": settings.identity()}
    if path.exists():
        made = json.loads(path.read_text())
        if made["identity"] != asked["identity"]:
            differ = sorted(
                k for k in {**made["settings"], **asked["settings"]}
                if made["settings"].get(k) != asked["settings"].get(k)
            )  # fmt: skip
            raise BaseError(
                f"{out} was made with other settings ({', '.join(differ)} differ: "
                f"{ {k: made['settings'].get(k) for k in differ} }): refusing to resume it; "
                "pass the same settings or another --out"
            )
        return
    out.mkdir(parents=True, exist_ok=True)
    from benchmark.store import write_json_atomic

    write_json_atomic(path, {**asked, "made_by": "python -m benchmark.brace.base"})


# --------------------------------------------------------------------------- pretraining
def pretrain(
    settings: BaseSettings,
    out: Path | None = None,
    stop_after: int | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Pretrain (or resume) into `out`; stop after `stop_after` steps of this call (the rest
    resumes later). The summary: steps done, losses, tokens/s, and once finished the weights'
    SHA-256."""
    out = Path(out) if out is not None else default_out(settings)
    check_made_with(out, settings)
    with held(out):
        return train_in(settings, out, stop_after, progress)


@contextlib.contextmanager
def held(out: Path) -> Iterator[None]:
    """One pretraining per folder at a time; what a killed run left half-written is removed."""
    import fcntl

    with open(out / ".lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BaseError(f"{out} is being pretrained by another process: wait for it") from None
        for leftover in [*out.glob(".tmp-*"), *(out / CHECKPOINTS).glob(".tmp-*")]:
            shutil.rmtree(leftover, ignore_errors=True)
        yield


def train_in(settings: BaseSettings, out: Path, stop_after: int | None, progress: bool) -> dict:
    """`pretrain` in a folder it holds: from the newest checkpoint, else from the seed."""
    import torch
    from tqdm import tqdm
    from transformers import GenerationConfig, Qwen3ForCausalLM

    from benchmark.store import file_sha256, write_json_atomic, write_text_atomic

    torch.set_num_threads(settings.threads)
    if not progress:  # transformers' own bars (saving, loading) too
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    if (out / "model" / "config.json").exists():
        return json.loads((out / "summary.json").read_text())
    checkpoint = latest_checkpoint(out)
    if checkpoint is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
        model = Qwen3ForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32)
        state = json.loads((checkpoint / STATE).read_text())
    else:
        tokenizer = build_tokenizer(settings.vocab)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(settings.seed)
            model = Qwen3ForCausalLM(model_config(settings, tokenizer))
        model.generation_config = GenerationConfig(
            eos_token_id=model.config.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            do_sample=False,
        )
        state = {"step": 0, "next_doc": 0, "tokens": 0, "seconds": 0.0, "losses": []}
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": settings.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=settings.lr,
        betas=(0.9, 0.95),
    )
    if checkpoint is not None:
        load_optimizer(optimizer, checkpoint, state)
    state.pop("param_groups", None)
    end = settings.steps if stop_after is None else min(settings.steps, state["step"] + stop_after)
    bar = tqdm(
        total=settings.steps,
        initial=state["step"],
        disable=not progress,
        unit="step",
        dynamic_ncols=True,
    )
    started, tokens_then = time.monotonic(), state["tokens"]
    seconds_then = state["seconds"]
    while state["step"] < end:
        step = state["step"]
        ids, labels, state["next_doc"] = batch(tokenizer, settings, state["next_doc"])
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(settings, step)
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        state["step"] += 1
        state["tokens"] += int((labels != -100).sum())
        state["losses"].append(round(float(loss.detach()), 5))
        state["seconds"] = seconds_then + time.monotonic() - started
        rate = (state["tokens"] - tokens_then) / max(1e-9, time.monotonic() - started)
        bar.update(1)
        bar.set_postfix(loss=f"{state['losses'][-1]:.3f}", tok_s=f"{rate:.0f}")
        if state["step"] % settings.checkpoint_every == 0 or state["step"] == end:
            save_checkpoint(out, model, tokenizer, optimizer, state)
    bar.close()
    summary = {
        "steps": state["step"],
        "of": settings.steps,
        "tokens": state["tokens"],
        "seconds": round(state["seconds"], 1),
        "tokens_per_second": round(state["tokens"] / max(1e-9, state["seconds"]), 1),
        "first_loss": state["losses"][0] if state["losses"] else None,
        "last_loss": state["losses"][-1] if state["losses"] else None,
        "parameters": sum(p.numel() for p in model.parameters()),
        "identity": settings.digest(),
    }
    if state["step"] == settings.steps:
        write_dir_atomic(out / "model", lambda work: (model.save_pretrained(work, safe_serialization=True), tokenizer.save_pretrained(work)))  # fmt: skip
        digest = file_sha256(out / "model" / "model.safetensors")
        write_text_atomic(out / "model.sha256", f"{digest}  model/model.safetensors\n")
        summary["weights_sha256"] = digest
        write_json_atomic(out / "summary.json", summary)
    return summary


# --------------------------------------------------------------------------- the probe
def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% by default)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def model_folder(path: Path) -> Path:
    """The model a path names: a model folder, or a pretraining folder's finished model (else its
    newest checkpoint)."""
    path = Path(path)
    if (path / "config.json").exists():
        return path
    if (path / "model" / "config.json").exists():
        return path / "model"
    checkpoint = latest_checkpoint(path)
    if checkpoint is None:
        raise BaseError(f"{path} holds no model: allowed a model folder or a pretraining folder")
    return checkpoint


def greedy(model: Any, ids: list[int], tokenizer: Any, max_new: int) -> str:
    """Greedy continuation of `ids` up to the first newline (or `max_new` tokens)."""
    import torch

    text, past = "", None
    inputs = torch.tensor([ids])
    for _ in range(max_new):
        out = model(input_ids=inputs, past_key_values=past, use_cache=True)
        past = out.past_key_values
        token = int(out.logits[0, -1].argmax())
        text += tokenizer.decode([token])
        if "\n" in text or token == tokenizer.eos_token_id:
            break
        inputs = torch.tensor([[token]])
    return text.split("\n")[0].strip()


def probe(path: Path, n: int = 200, threads: int = 2, progress: bool = False) -> dict[str, Any]:
    """Copy accuracy on `n` held-out transcripts (held-out seeds and names): the model reads a
    transcript that ends in a copy question and answers greedily; exact match of the current
    room and of the visible objects' list, each with its Wilson 95% interval. `score` is their
    mean."""
    import torch
    from tqdm import tqdm
    from transformers import AutoTokenizer, Qwen3ForCausalLM

    torch.set_num_threads(threads)
    folder = model_folder(path)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = Qwen3ForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    context = model.config.max_position_embeddings
    right = {corpus.QUESTION_ROOM: 0, corpus.QUESTION_VISIBLE: 0}
    names_right, names_all = 0, 0
    rng = random.Random(0)
    examples = []
    with torch.inference_mode():
        for i in tqdm(range(n), disable=not progress, unit="doc"):
            doc = corpus.document(
                corpus.PROBE_SEEDS[i], held_out=True, turns=rng.randint(2, 8), ask=0.0
            )
            for question, start, end in doc.answers[-2:]:
                truth = doc.text[start:end].strip()
                ids = tokenizer(doc.text[:start])["input_ids"]
                max_new = len(tokenizer(" " + truth)["input_ids"]) + 4
                ids = ids[-(context - max_new) :]
                said = greedy(model, ids, tokenizer, max_new)
                right[question] += said == truth
                if question == corpus.QUESTION_VISIBLE:
                    expected, got = truth.split(", "), said.split(", ")
                    names_right += sum(a == b for a, b in zip(expected, got, strict=False))
                    names_all += len(expected)
                if len(examples) < 4:
                    examples.append({"question": question, "expected": truth, "said": said})
    room, visible = right[corpus.QUESTION_ROOM], right[corpus.QUESTION_VISIBLE]
    return {
        "model": str(folder),
        "n": n,
        "room": room / n,
        "room_ci": wilson(room, n),
        "visible": visible / n,
        "visible_ci": wilson(visible, n),
        "visible_names": names_right / max(1, names_all),
        "score": (room + visible) / (2 * n),
        "examples": examples,
    }


# --------------------------------------------------------------------------- command line
def settings_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m benchmark.brace.base",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for f in dataclasses.fields(BaseSettings):
        kind = {"int": int, "float": float, "bool": lambda s: s.lower() in ("1", "true", "yes")}[
            f.type
        ]
        what = "shapes the weights" if f.metadata["identity"] else "runtime only"
        ap.add_argument(
            f"--{f.name.replace('_', '-')}",
            type=kind,
            default=f.default,
            help=f"default {f.default} ({what})",
        )
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the pretraining folder (default: outputs/models/base/base-<settings hash>)",
    )
    ap.add_argument(
        "--stop-after",
        type=int,
        default=None,
        help="stop after this many steps (a later run resumes)",
    )
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument(
        "--probe",
        type=int,
        default=0,
        help="once finished, probe N held-out transcripts (0: no probe)",
    )
    return ap


def json_cli(work: Callable[[], dict[str, Any]], refusals: tuple[type[Exception], ...]) -> int:
    """The brace CLIs' one ending (pretraining, shipping): `work`'s result as JSON on stdout
    (exit 0), or a refusal of `refusals` as one `error:` line on stderr (exit 2)."""
    try:
        result = work()
    except refusals as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return json_cli(lambda: _run(argv), (BaseError, ValueError))


def _run(argv: list[str]) -> dict[str, Any]:
    """What `main` does with its arguments: pretrain (the default, or `train`) or `probe`."""
    if argv[:1] == ["probe"]:
        ap = argparse.ArgumentParser(
            prog="python -m benchmark.brace.base probe", description=probe.__doc__
        )
        ap.add_argument("path", type=Path, help="a model folder or a pretraining folder")
        ap.add_argument("--n", type=int, default=200, help="held-out transcripts (default 200)")
        ap.add_argument("--threads", type=int, default=2)
        args = ap.parse_args(argv[1:])
        if args.n < 1:
            raise BaseError(f"--n={args.n} is invalid: allowed >= 1")
        result = probe(args.path, args.n, args.threads, progress=True)
    else:
        args = settings_parser().parse_args(argv[1:] if argv[:1] == ["train"] else argv)
        values = {f.name: getattr(args, f.name) for f in dataclasses.fields(BaseSettings)}
        result = pretrain(BaseSettings(**values), args.out, args.stop_after, not args.no_progress)
        out = args.out or default_out(BaseSettings(**values))
        result["out"] = str(out)
        if args.probe and result["steps"] == result["of"]:
            result["probe"] = probe(out, args.probe, args.threads, progress=not args.no_progress)
            from benchmark.store import write_json_atomic

            write_json_atomic(Path(out) / "probe.json", result["probe"])
    return result


if __name__ == "__main__":
    sys.exit(main())
