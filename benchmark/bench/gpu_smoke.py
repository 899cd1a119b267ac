"""`make gpu-smoke` (`python -m benchmark.bench gpu-smoke`): the first thing to run on a GPU, in
under 3 minutes (enforced, `--budget-s`): what the CPU cannot show, each as a check that fails
the run (exit 1) instead of a figure that could be silently wrong.

1. kernels: the kernel report per layer type of the Qwen3.5 architecture (fast kernels bound, or
   transformers' reference code), and the fast kernels against the reference ones in fp32 on
   the tests' tiny hybrid: |delta log-prob| < 1e-3 and the same answers (a Triton or PTX failure
   at first use, or a kernel transformers hands fewer keyword arguments than it needs, shows
   here, not mid-bench). Skipped, and said, where no fast kernel is bound. `--only kernels` is
   this section alone: the last step of `make install-gpu`.
2. sdpa: the SDPA backend torch picks for a boolean padding mask at head dim 256 with GQA (2 kv
   heads for 8 query heads, bf16: Qwen3.5-2B's full-attention layers), as transformers calls it
   (keys repeated) and with `enable_gqa`, and whether that backend returns NaN for a fully
   masked query row (the cause the backend's `masked_sdpa` zeroes away).
3. padded: padded vs by_length vs one at a time on the tests' tiny hybrid (8 layers, full
   attention at 3 and 7) in bf16, with cuDNN attention on and off: every score finite, |delta
   log-prob| < 0.05, >= 95% identical answers (benchmark.bench.agreement.BF16).
4. prefill: one prefill of Qwen3.5-2B shapes (random weights, bf16) at batch 64 x 750 tokens:
   peak memory and time (a warm-up call first, CUDA-synchronised), logits finite.

`--device cpu` is the dry run: every check runs (fp32 where bf16 would crawl is not needed: the
tiny hybrid runs bf16 here too), the prefill at CPU-sized shapes (toy widths, batch 4), said in
the output. One JSON: `<paths.bench>/<timestamp>-gpu-smoke.json` (`-gpu-smoke-dryrun.json`).
Exit codes: 0 every check passed, 1 a check failed, 2 no CUDA device, 3 the budget ran out."""

from __future__ import annotations

import argparse
import contextlib
import inspect
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmark.bench.agreement import BF16, KERNELS_FP32, checks, compare
from benchmark.bench.common import (
    EXIT_NO_CUDA,
    Check,
    Deadline,
    cuda_missing,
    report_checks,
    timed_within_budget,
)

EXIT_FAILED = 1  # a check failed (EXIT_NO_CUDA, EXIT_BUDGET: benchmark.bench.common)
SECTIONS = ("kernels", "sdpa", "padded", "prefill")
NO_CUDA = (  # what to run instead on a machine without CUDA
    "Run it on a GPU machine after `make install-gpu`, or its CPU dry run: python -m "
    "benchmark.bench gpu-smoke --device cpu"
)
PREFILL = {"cuda": (64, 750, False), "cpu": (4, 750, True)}  # batch, tokens, toy widths
# greedy tokens per answer in the bf16 check: an ASK answer (an action name) is 1-3 tokens; the
# random tiny hybrid's later tokens have top-two gaps within bf16's rounding (on this CPU, each
# prompt alone vs by_length: 16/16 identical answers at 2 tokens, 14/16 at 4; 6/8 at 8; no bug)
ANSWER_TOKENS = 2


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def kernels_section(root: Path, device: str, n: int) -> tuple[dict[str, Any], list[Check]]:
    """The kernel report, and fast vs reference kernels in fp32 on the tiny hybrid (module
    docstring, 1)."""
    from benchmark.bench.batching import first_queries, full_fp32
    from benchmark.bench.qwen_shapes import build_model, save_tiny_hybrid
    from benchmark.consultants import backend
    from benchmark.consultants.kernels import describe_kernels, layer_kernels, reference_kernels

    shapes = build_model("qwen3.5-2b", device, "float32", tiny_shapes=True)
    per_layer = layer_kernels(shapes)
    del shapes
    for kind, kernels in per_layer.items():
        print(f"kernels: {kind} layers: {', '.join(f'{f}={i}' for f, i in kernels.items())}")
    out: dict[str, Any] = {"layer_kernels": per_layer}
    import tempfile

    with tempfile.TemporaryDirectory(prefix="smoke-kernels-") as work, full_fp32():
        queries = first_queries(root, n, 8)
        path = save_tiny_hybrid(Path(work) / "model")
        model = backend("hf")(path=str(path), dtype="float32", device_map=device, max_batch_size=n)
        print(describe_kernels(model.kernels), flush=True)
        out["kernels"] = model.kernels
        batches = {"lean": queries, "choices": _choices(queries)}
        fast = {k: model.answer(b) for k, b in batches.items()}
        with reference_kernels(model.model) as swapped:
            slow = {k: model.answer(b) for k, b in batches.items()}
        model.close()
    out["swapped"] = swapped
    out["skipped"] = swapped == 0
    result = {k: compare(slow[k], fast[k]) for k in batches}
    out["fast_vs_reference"] = result
    if swapped == 0:
        print(
            "kernels: fast vs reference SKIPPED: no fast kernel is bound on this device (both "
            "runs used transformers' reference code; the comparison ran as a dry run)",
            flush=True,
        )
        return out, []
    rows: list[Check] = []
    for kind, r in result.items():
        rows += checks("kernels", f"fast vs reference kernels, {kind}", r, KERNELS_FP32)
    return out, rows


def _choices(queries: list) -> list:
    from benchmark.bench.agreement import choice_queries

    return choice_queries(queries)


def sdpa_section(device: str) -> tuple[dict[str, Any], list[Check]]:
    """The backend torch picks for Qwen3.5-2B's full attention with a boolean padding mask, and
    whether it NaNs a fully masked row (module docstring, 2)."""
    import torch
    from torch.nn.attention import SDPBackend

    dtype = torch.bfloat16
    b, s, heads, kv, dim = 2, 64, 8, 2, 256
    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(b, heads, s, dim, generator=g).to(device, dtype)
    k = torch.randn(b, kv, s, dim, generator=g).to(device, dtype)
    v = torch.randn(b, kv, s, dim, generator=g).to(device, dtype)
    mask = torch.ones(b, 1, s, s, dtype=torch.bool, device=device).tril()
    mask[1, :, :, : s // 2] = False  # row 1 left-padded: its first s/2 query rows see no key
    mask[1, :, s // 2 :, s // 2 :] = torch.ones(s // 2, s // 2, device=device).tril().bool()
    k_rep, v_rep = k.repeat_interleave(heads // kv, 1), v.repeat_interleave(heads // kv, 1)
    picked = {
        "as transformers calls it (kv repeated)": SDPBackend(
            torch._fused_sdp_choice(q, k_rep, v_rep, attn_mask=mask)
        ).name,
        "enable_gqa": SDPBackend(
            torch._fused_sdp_choice(q, k, v, attn_mask=mask, enable_gqa=True)
        ).name,
    }
    raw = torch.nn.functional.scaled_dot_product_attention(q, k_rep, v_rep, attn_mask=mask)
    dead = raw[1, :, : s // 2]
    nan_rows = bool(torch.isnan(dead).any())
    real_finite = bool(torch.isfinite(raw[0]).all() and torch.isfinite(raw[1, :, s // 2 :]).all())
    print(
        f"sdpa: bf16, head dim {dim}, {heads} query / {kv} kv heads, boolean padding mask: "
        + "; ".join(f"{how}: {name}" for how, name in picked.items())
        + f"; fully masked rows come out {'NaN' if nan_rows else 'finite'} "
        f"(the backend's masked_sdpa zeroes them either way)",
        flush=True,
    )
    out = {"backend": picked, "fully_masked_rows_nan": nan_rows, "real_rows_finite": real_finite}
    rows = [Check("sdpa", "raw sdpa: every unmasked row finite", float(real_finite), "", 1.0)]
    return out, rows


@contextlib.contextmanager
def cudnn_attention(enabled: bool) -> Iterator[None]:
    """SDPA with cuDNN's attention allowed (torch's default order) or left out."""
    import torch

    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(enabled)
    try:
        yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)


def padded_section(root: Path, device: str, n: int) -> tuple[dict[str, Any], list[Check]]:
    """Padded vs by_length vs one at a time on the tiny hybrid in bf16, cuDNN on and off (module
    docstring, 3)."""
    from benchmark.bench.batching import tiny_hybrid_agreement

    out: dict[str, Any] = {}
    rows: list[Check] = []
    for label, enabled in (("cudnn on", True), ("cudnn off", False)):
        with cudnn_attention(enabled):
            result = tiny_hybrid_agreement(root, device, "bfloat16", n, ANSWER_TOKENS)
        out[label] = result
        for kind in ("lean", "choices"):
            for other in ("padded", "one_at_a_time"):
                r = result[kind][other]
                name = f"tiny hybrid bf16, {label}, {kind}: {other} vs by_length"
                rows += checks("padded", name, r, BF16)
                print(
                    f"padded: {name}: {r['agreement']:.0%} identical, max |delta log-prob| "
                    f"{'-' if r['max_abs_dlogp'] is None else format(r['max_abs_dlogp'], '.2g')}, "
                    f"finite {r['finite']}",
                    flush=True,
                )
    return out, rows


def prefill_section(device: str) -> tuple[dict[str, Any], list[Check]]:
    """One prefill of Qwen3.5-2B shapes at batch 64 x 750 tokens (module docstring, 4)."""
    import torch

    from benchmark.bench.common import peak_rss_bytes
    from benchmark.bench.qwen_shapes import build_model
    from benchmark.consultants import attention

    cuda = device.startswith("cuda")
    batch, tokens, toy = PREFILL["cuda" if cuda else "cpu"]
    dtype = "bfloat16"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    model = build_model("qwen3.5-2b", device, dtype, tiny_shapes=toy)
    if model.config._attn_implementation == "sdpa":
        model.set_attn_implementation(attention.register(torch.device(device).type))
    vocab = model.config.vocab_size
    g = torch.Generator(device="cpu").manual_seed(0)
    params = inspect.signature(model.forward).parameters
    cache_arg = "cache" if "cache" in params else "past_key_values"  # renamed in transformers 5.x

    def prefill(rows: int) -> tuple[float, bool]:
        from transformers import DynamicCache

        ids = torch.randint(0, vocab, (rows, tokens), generator=g).to(device)
        sync(device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model(
                input_ids=ids,
                **{cache_arg: DynamicCache(config=model.config)},
                use_cache=True,
                logits_to_keep=1,
            )
            finite = bool(torch.isfinite(out.logits).all())
        sync(device)
        return time.perf_counter() - t0, finite

    warm_s, _ = prefill(2)  # kernels compiled and autotuned here
    seconds, finite = prefill(batch)
    memory = torch.cuda.max_memory_allocated(device) if cuda else peak_rss_bytes()
    shape = "Qwen3.5-2B shapes" if not toy else "CPU-sized: Qwen3.5-2B at toy widths"
    print(
        f"prefill: {shape}, random weights, {dtype}, batch {batch} x {tokens} tokens: "
        f"{seconds:.2f} s ({batch * tokens / seconds:,.0f} tokens/s; warm-up at batch 2: "
        f"{warm_s:.2f} s), peak memory {memory / 2**30:.1f} GiB "
        f"({'torch.cuda.max_memory_allocated' if cuda else 'peak RSS of the process'})"
        + ("" if cuda else "; the GPU shapes (24 layers x 2048 wide) would take hours on a CPU"),
        flush=True,
    )
    out = {
        "shapes": "qwen3.5-2b" + (" toy widths" if toy else ""),
        "batch": batch,
        "tokens": tokens,
        "dtype": dtype,
        "seconds": seconds,
        "warmup_seconds": warm_s,
        "tokens_per_s": batch * tokens / seconds,
        "peak_memory_bytes": memory,
        "logits_finite": finite,
    }
    rows = [
        Check("prefill", f"prefill {batch} x {tokens}: logits finite", float(finite), "", 1.0),
        Check("prefill", f"prefill {batch} x {tokens}: time", seconds, "s"),
        Check("prefill", f"prefill {batch} x {tokens}: peak memory", memory / 2**30, "GiB"),
    ]
    return out, rows


def main_smoke(args: argparse.Namespace, root: Path) -> int:
    import torch

    device = args.device
    if cuda_missing(device, "gpu-smoke", NO_CUDA):
        return EXIT_NO_CUDA
    only = [s.strip() for s in (args.only or ",".join(SECTIONS)).split(",") if s.strip()]
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        raise SystemExit(f"--only: unknown section(s) {unknown}; allowed: {list(SECTIONS)}")
    budget = args.budget_s if args.budget_s is not None else 180.0
    if not budget > 0:
        raise SystemExit(f"--budget-s={budget} must be > 0")
    cuda = device.startswith("cuda")
    if not cuda:
        torch.set_num_threads(args.threads)
    n = 16 if cuda else 8  # prompts of the tiny-hybrid checks
    data: dict[str, Any] = {
        "kind": "gpu-smoke",
        "dry_run": not cuda,
        "device": torch.cuda.get_device_name(device) if cuda else device,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "budget_s": budget,
        "sections": {},
    }
    rows: list[Check] = []
    runs = {
        "kernels": lambda: kernels_section(root, device, n),
        "sdpa": lambda: sdpa_section(device),
        "padded": lambda: padded_section(root, device, n),
        "prefill": lambda: prefill_section(device),
    }

    def sections(clock: Deadline) -> int:
        for name in only:
            clock.section(name)
            data["sections"][name], got = runs[name]()
            rows.extend(got)
        return 0

    code, wall = timed_within_budget(budget, "gpu-smoke", data, sections, rows, "whole smoke run")
    failed = [c.name for c in rows if c.passed is False]
    data["failed"] = failed
    path = report_checks(root, data, rows, "-gpu-smoke" if cuda else "-gpu-smoke-dryrun")
    verdict = f"{len(failed)} check(s) failed: {failed}" if failed else "every check passed"
    print(f"\n{wall:.0f} s of a {budget:.0f} s budget on {data['device']}; {verdict}; wrote {path}")
    if code:
        return code
    return EXIT_FAILED if failed else 0
