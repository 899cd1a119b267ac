"""Batching across prompt lengths (`slm.backend.batching`), measured: one batch of mixed-length
prompts answered greedily by the lean loop and by choice scoring, batched "padded" (one
left-padded forward per step) and "by_length" (one unpadded forward per length and step, on the
stored prefix), interleaved: wall time, the model's forward calls and whether the answers agree.
`python -m benchmark.bench.batching` runs it on the tiny model and the tiny Qwen3.5 with 64 ASK+
(stateful) prompts: the measurement behind `auto`'s choice on a CPU (docs/performance.md)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

MODES = ("padded", "by_length")


def compare_batching(
    consultant: Any, queries: list, repeats: int = 3, sync: Any = None
) -> dict[str, Any]:
    """Per kind of answer ("lean": greedy generation, "choices": choice scoring) and per mode:
    the median seconds of `repeats` interleaved calls (after one warmup each), the forwards of
    one call, and whether both modes gave the same answers. The consultant's own `batching` is
    restored afterwards."""
    calls = [0]
    hook = consultant.model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    kinds = {
        "lean": queries,
        "choices": [
            dataclasses.replace(q, decoding=dataclasses.replace(q.decoding, mode="choices"))
            for q in queries
        ],
    }
    before = consultant.batching
    out: dict[str, Any] = {}
    try:
        for kind, batch in kinds.items():
            times: dict[str, list[float]] = {m: [] for m in MODES}
            forwards: dict[str, int] = {}
            answers: dict[str, list[str]] = {}
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
                    answers[mode] = [a.text for a in got]
            out[kind] = {
                m: {"median_s": statistics.median(times[m]), "forwards": forwards[m]} for m in MODES
            }
            out[kind]["same_answers"] = answers["padded"] == answers["by_length"]
            out[kind]["padded_speedup"] = (
                out[kind]["by_length"]["median_s"] / out[kind]["padded"]["median_s"]
            )
    finally:
        consultant.batching = before
        hook.remove()
    return out


def first_queries(root: Path, n: int, max_new_tokens: int) -> list:
    """The first consultation of n fourrooms episodes (seeds 0..n-1), ASK+ stateful prompt."""
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
            q, decoding=dataclasses.replace(q.decoding, max_new_tokens=max_new_tokens)
        )
        for q in out
    ]


def main(argv: list[str] | None = None) -> int:
    """The CPU measurement: both tiny models, 64 first ASK+ consultations (fourrooms, stateful
    prompt) answered with at most 8 new tokens."""
    import tempfile

    import torch

    from benchmark.bench.qwen_shapes import save_tiny_hybrid
    from benchmark.consultants import backend
    from benchmark.consultants.tiny import build_tiny

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
