"""Batching across prompt lengths (`slm.backend.batching`), measured: one batch of mixed-length
prompts answered greedily by the lean loop and by choice scoring, batched "padded" (one
left-padded forward per step) and "by_length" (one unpadded forward per length and step, on the
stored prefix), interleaved: wall time, the model's forward calls and whether the answers agree.
`python -m benchmark.bench.batching` runs it on the tiny model and the tiny Qwen3.5 with 64 ASK+
(stateful) prompts: the measurement behind `auto`'s choice on a CPU (docs/performance.md)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MODES = ("padded", "by_length")


def compare_batching(
    consultant: Any, queries: list, repeats: int = 3, sync: Any = None, single: bool = False
) -> dict[str, Any]:
    """Per kind of answer ("lean": greedy generation, "choices": choice scoring) and per mode:
    the median seconds of `repeats` interleaved calls (after one warmup each), the forwards of
    one call, whether both modes gave the same answers (`same_answers`) and how far they agree
    (`agreement`: padded against by_length, benchmark.bench.agreement.compare); with `single`,
    also each query answered alone against by_length (`one_at_a_time`: what a change of batch
    shape alone moves, untimed). The consultant's own `batching` is restored afterwards."""
    from benchmark.bench.agreement import choice_queries, compare

    calls = [0]
    hook = consultant.model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    kinds = {"lean": queries, "choices": choice_queries(queries)}
    before = consultant.batching
    out: dict[str, Any] = {}
    try:
        for kind, batch in kinds.items():
            times: dict[str, list[float]] = {m: [] for m in MODES}
            forwards: dict[str, int] = {}
            answers: dict[str, list] = {}
            for rep in range(repeats + 1):
                for mode in MODES:
                    consultant.batching = mode
                    consultant.prefix_cache.clear()  # every call computes its stored prefix
                    calls[0] = 0
                    (sync or (lambda: None))()
                    t0 = time.perf_counter()
                    got = consultant.answer(batch)
                    (sync or (lambda: None))()
                    if rep:  # the first round warms up
                        times[mode].append(time.perf_counter() - t0)
                    forwards[mode] = calls[0]
                    answers[mode] = got
            out[kind] = {
                m: {"median_s": statistics.median(times[m]), "forwards": forwards[m]} for m in MODES
            }
            texts = {m: [a.text for a in answers[m]] for m in MODES}
            out[kind]["same_answers"] = texts["padded"] == texts["by_length"]
            out[kind]["agreement"] = compare(answers["by_length"], answers["padded"])
            if single:
                consultant.batching = "by_length"
                alone = [a for q in batch for a in consultant.answer([q])]
                out[kind]["one_at_a_time"] = compare(answers["by_length"], alone)
            out[kind]["padded_speedup"] = (
                out[kind]["by_length"]["median_s"] / out[kind]["padded"]["median_s"]
            )
    finally:
        consultant.batching = before
        hook.remove()
    return out


def first_queries(root: Path, n: int, max_new_tokens: int) -> list:
    """The first consultation of n fourrooms episodes (seeds 0..n-1), ASK+ stateful prompt,
    answered greedily with at most `max_new_tokens` and no repetition penalty: what these
    measurements state, pinned here so that a protocol's decoding (`paper`'s
    slm.decoding.repetition_penalty=1.1) does not change them. A penalty narrows the random tiny
    models' top-two gaps to within bf16's rounding (16 prompts, bf16: 13/16 answers padded vs
    by_length at 1.1, 16/16 at 1.0; fp32: 16/16 at both), and the penalty's own agreement across
    batch shapes is tests/consultants/test_batching.py's."""
    from benchmark.bench.common import compose
    from benchmark.build import build_prompt, prepare

    cfg = compose(root, "env=fourrooms", "slm=tiny", "prompt=stateful", "gate=always")
    task = prepare(cfg)[0]
    variant = build_prompt(cfg, task)
    out: list = []
    for seed in range(n):
        out += next(variant.session(task.episode(seed), False).consult(0))
    return [
        dataclasses.replace(
            q,
            decoding=dataclasses.replace(
                q.decoding, max_new_tokens=max_new_tokens, repetition_penalty=1.0
            ),
        )
        for q in out
    ]


def tiny_hybrid_agreement(
    root: Any, device: str, dtype: str, n: int = 16, max_new_tokens: int = 8
) -> dict[str, Any]:
    """`batching_agreement` on the tests' tiny hybrid Qwen3.5 (8 layers, full attention at 3 and
    7; random weights, the tiny tokenizer) loaded in `dtype` on `device`, with the first ASK+
    consultations of `n` fourrooms episodes (mixed lengths: most rows padded)."""
    import tempfile
    from pathlib import Path

    from benchmark.bench.agreement import batching_agreement
    from benchmark.bench.qwen_shapes import save_tiny_hybrid
    from benchmark.consultants import backend

    with tempfile.TemporaryDirectory(prefix="bench-tiny-hybrid-") as work, full_fp32():
        queries = first_queries(Path(root), n, max_new_tokens)
        path = save_tiny_hybrid(Path(work) / "model")
        model = backend("hf")(path=str(path), dtype=dtype, device_map=device, max_batch_size=n)
        try:
            lengths = [len(model.encode(q)) for q in queries]
            out = batching_agreement(model, queries)
        finally:
            model.close()
    out["prompts"] = {
        "n": n,
        "distinct_lengths": len(set(lengths)),
        "tokens": [min(lengths), max(lengths)],
    }
    return out


@contextlib.contextmanager
def full_fp32() -> Iterator[None]:
    """float32 matmuls and convolutions in full precision on CUDA (no TF32, which cuDNN's
    convolutions allow by default: about 1e-3 relative error, too coarse for the exact check)."""
    import torch

    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def main(argv: list[str] | None = None) -> int:
    """The CPU measurement: both tiny models, 64 first ASK+ consultations (fourrooms, stateful
    prompt) answered with at most 8 new tokens."""
    import tempfile

    import torch

    from benchmark.bench.qwen_shapes import save_tiny_hybrid
    from benchmark.consultants import backend
    from benchmark.consultants.tiny import build_tiny

    parser = argparse.ArgumentParser(
        prog="python -m benchmark.bench.batching", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--root", default=None, help="where the tiny models are built")
    args = parser.parse_args(argv)
    root = Path(args.root or tempfile.mkdtemp(prefix="bench-batching-"))
    queries = first_queries(root / "cfg", args.prompts, args.max_new_tokens)
    torch.set_num_threads(1)
    report: dict[str, Any] = {}
    for name, path in (
        ("tiny", build_tiny(root / "tiny", 0)),
        ("tiny-qwen3.5", save_tiny_hybrid(root / "tiny-qwen35")),
    ):
        model = backend("hf")(path=str(path), num_threads=1, max_batch_size=len(queries))
        lengths = [len(model.encode(q)) for q in queries]
        report[name] = {
            "prompts": len(queries),
            "distinct_lengths": len(set(lengths)),
            "tokens": [min(lengths), max(lengths)],
            **compare_batching(model, queries, args.repeats),
        }
        print(json.dumps({name: report[name]}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
