"""GPU benchmark (`make bench-gpu`): what a GPU does for the suite, with the real Qwen3.5-2B / 4B
shapes: consultant queries/s per batch size (generation and choice scoring) with each query's
prefill and decode, ASK+ decisions/s at IR 0 and IR 1, GPU memory, the kernels each layer type
runs, a gate check (lockstep and sequential ASK make the same gate decisions at a tau away from
ties), and the projected time of Table 1 on this GPU; all within a time budget that is enforced
(`--budget-s`, default 480 s: past it the run stops, naming the section).

Answers are compared as agreement rates with a stated tolerance (benchmark.bench.agreement): in
bf16 a change of batch shape changes the kernels' rounding, so padded vs by_length is checked by
its largest |delta log-prob| and its share of identical answers, against bf16's tolerance widened
to what answering each prompt alone moves on the same model (`widened`); the exact check runs
once, in fp32 on the device, on the tests' tiny hybrid. Times read the clock after a device
sync (the backend's prefill/decode split included).

Random weights (no download) in bf16 on the first CUDA device, the real Qwen3.5 vocabulary for
token counts, ASK+ prompts from the real prompt builder, and the hf backend's own batching. On
CUDA, a Qwen3.5 layer on transformers' reference kernels (the `[gpu]` extra missing) is an error
(exit 4) naming the layer type, the kernels and the one-line install: figures taken so say little
about the GPU. `--device cpu` is the CPU dry run: the same code at toy widths of the same
architecture (`--tiny-shapes`, implied), every figure printed, reference kernels reported, never
an error. Memory: torch's peak allocated bytes on CUDA, the process's peak RSS on a CPU."""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from benchmark.bench.agreement import FP32, Tolerance, tolerance
from benchmark.bench.agreement import checks as agreement_checks
from benchmark.bench.common import (
    EXIT_NO_CUDA,
    GIB,
    Check,
    Deadline,
    compose,
    cuda_missing,
    peak_rss_bytes,
    report_checks,
    timed_within_budget,
)
from benchmark.bench.gpu_consultant import (
    InMemoryHF,
    ask_plus_messages,
    choice_throughput,
    prompt_ids,
    throughput,
)
from benchmark.consultants.kernels import describe_kernels, layer_kernels, reference_kernel_error

EXIT_KERNELS = 4  # a layer would run transformers' reference code on CUDA
NO_CUDA = (  # what to run instead on a machine without CUDA
    "Run it on a GPU machine with a CUDA build of torch (docs/development.md, GPU install), or run "
    "its CPU dry run: python -m benchmark.bench gpu --device cpu"
)


@dataclass(frozen=True)
class GpuSizes:
    batch_sizes: tuple[int, ...] = (1, 8, 32, 64)
    repeats: int = 3
    thinking_budget: int = 10
    answer_tokens: int = 16
    rationale_tokens: int = 64  # ASK+'s answer cap (conf/prompt: rationale_max_new_tokens)
    ir_episodes: int = 16  # the IR-0 / IR-1 decision runs
    ir_max_steps: int = 20
    gate_episodes: int = 32  # the gate check
    gate_max_steps: int = 30


FULL = GpuSizes()
DRY_RUN = GpuSizes(  # --device cpu: toy widths, a minute or two on a CPU
    batch_sizes=(1, 8),
    repeats=2,
    thinking_budget=4,
    answer_tokens=4,
    rationale_tokens=4,
    ir_episodes=4,
    ir_max_steps=6,
    gate_episodes=8,
    gate_max_steps=8,
)
QUICK = replace(
    DRY_RUN,
    batch_sizes=(1, 4),
    repeats=1,
    thinking_budget=2,
    answer_tokens=2,
    rationale_tokens=2,
    ir_episodes=2,
    ir_max_steps=4,
    gate_episodes=4,
    gate_max_steps=6,
)


def _memory(device: str) -> tuple[int, str]:
    """(bytes, what they are): torch's peak allocated bytes since the last reset on CUDA, the
    process's peak RSS so far on a CPU (it includes the models measured before)."""
    import torch

    if device.startswith("cuda"):
        return int(torch.cuda.max_memory_allocated(device)), "peak allocated, torch.cuda"
    return peak_rss_bytes(), "peak RSS of the process, earlier models included"


def _split(entry: dict[str, Any], bs: str) -> dict[str, Any]:
    """Prefill and decode ms per generated query at batch `bs`: timed by the backend (lean
    decode), else the generate call's time less choice scoring's prefill of the same prompts."""
    gen, cho = entry["throughput"][bs], entry["choices"][bs]
    if gen["decode_s_per_query"] > 0:
        prefill, decode, how = gen["prefill_s_per_query"], gen["decode_s_per_query"], "timed"
    else:
        prefill = cho["prefill_s_per_query"]
        decode = max(0.0, gen["median_s"] / int(bs) - prefill)
        how = "generate() time less choice scoring's prefill of the same prompts"
    return {"prefill_ms": 1e3 * prefill, "decode_ms": 1e3 * decode, "how": how}


def measure_model(
    name: str, consultant: InMemoryHF, env: dict, sizes: GpuSizes, clock: Deadline
) -> dict[str, Any]:
    """Every figure of one model (the gate check aside)."""
    from benchmark.bench.gpu_ask import decision_rates

    device, messages, actions, root = env["device"], env["messages"], env["actions"], env["root"]
    clock.section(f"{name}: generation throughput")
    entry: dict[str, Any] = {"throughput": throughput(consultant, messages, actions, sizes, device)}
    clock.section(f"{name}: choice scoring throughput")
    entry["choices"] = choice_throughput(consultant, messages, actions, sizes, device)
    entry["split"] = {bs: _split(entry, bs) for bs in entry["throughput"]}
    clock.section(f"{name}: ASK+ decisions at IR 0 and IR 1")
    entry["decisions"] = decision_rates(consultant, root, sizes)
    clock.section(f"{name}: batching across prompt lengths (padded vs by_length)")
    entry["batching"] = batching_comparison(consultant, messages, actions, sizes, device)
    return entry


def batching_comparison(
    consultant: InMemoryHF, messages: list, actions: tuple, sizes: GpuSizes, device: str
) -> dict[str, Any]:
    """The measurement behind `slm.backend.batching=auto` on this device: the largest batch of
    ASK+ prompts (mixed lengths) answered greedily and by choice scoring, padded against one
    forward per length (benchmark.bench.batching)."""
    import torch

    from benchmark.bench.batching import compare_batching
    from benchmark.bench.gpu_consultant import query_batch
    from benchmark.consultants import Decoding

    decoding = Decoding(max_new_tokens=min(8, sizes.answer_tokens))  # the lean greedy path
    n = max(sizes.batch_sizes)
    queries = query_batch(messages, actions, decoding, n)
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    out = compare_batching(consultant, queries, repeats=sizes.repeats, sync=sync, single=True)
    out["distinct_lengths"] = len({len(consultant.encode(q)) for q in queries})
    out["auto"] = consultant.batching
    for kind in ("lean", "choices"):
        r = out[kind]
        a, floor = r["agreement"], r["one_at_a_time"]
        print(
            f"batching {kind}: padded {r['padded']['median_s']:.3f} s ({r['padded']['forwards']} "
            f"forwards), by_length {r['by_length']['median_s']:.3f} s "
            f"({r['by_length']['forwards']} forwards) for {n} prompts of "
            f"{out['distinct_lengths']} lengths; padded vs by_length: {a['agreement']:.0%} "
            f"identical answers, max |delta log-prob| {_fmt(a['max_abs_dlogp'])}, finite "
            f"{a['finite']} (one at a time vs by_length: {floor['agreement']:.0%}, "
            f"{_fmt(floor['max_abs_dlogp'])}); auto here: {out['auto']}",
            flush=True,
        )
    return out


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2g}"


def widened(tol: Tolerance, floor: dict[str, Any]) -> Tolerance:
    """`tol` (the dtype's stated tolerance) widened to what a change of batch shape alone moves on
    this model (`floor`: each prompt alone vs by_length): twice its |delta log-prob|, its share
    of identical answers less 5 points. Random full-shape weights have small top-token gaps, so
    shape-only noise can exceed bf16's stated 0.05 there; padding must not add to it. fp32 (the
    exact check) is never widened."""
    if tol.dtype == "float32":
        return tol
    d = floor["max_abs_dlogp"]
    return Tolerance(
        tol.dtype,
        max(tol.max_abs_dlogp, 2 * d) if d is not None and math.isfinite(d) else tol.max_abs_dlogp,
        min(tol.min_agreement, floor["agreement"] - 0.05),
    )


def model_checks(name: str, entry: dict[str, Any], dtype: str) -> list[Check]:
    out = []
    for bs, r in entry["throughput"].items():
        out.append(
            Check("gpu", f"{name} queries/s at batch {bs} (generate)", r["queries_per_s"], "1/s")
        )
    for bs, r in entry["choices"].items():
        out.append(
            Check("gpu", f"{name} queries/s at batch {bs} (choices)", r["queries_per_s"], "1/s")
        )
    for bs, split in entry["split"].items():
        for part in ("prefill", "decode"):
            out.append(
                Check(
                    "gpu",
                    f"{name} {part} ms/query at batch {bs} (generate)",
                    split[f"{part}_ms"],
                    "ms",
                )
            )
    for bs, r in entry["choices"].items():
        out.append(
            Check(
                "gpu",
                f"{name} prefill ms/query at batch {bs} (choices)",
                1e3 * r["prefill_s_per_query"],
                "ms",
            )
        )
    d = entry["decisions"]
    for key, label in (
        ("ir0", "IR 0"),
        ("ir1_generate", "IR 1 generate"),
        ("ir1_choices", "IR 1 choices"),
    ):
        out.append(
            Check(
                "gpu",
                f"{name} ASK+ decisions/s at {label}",
                d[key]["stats"]["decisions_per_s"],
                "1/s",
            )
        )
        split = d[key]["split_ms"]
        if split is not None and key != "ir0":
            for part in ("prefill", "decode"):
                out.append(Check("gpu", f"{name} ASK+ {label}: {part} ms/query", split[part], "ms"))
    for kind, r in entry["batching"].items() if "batching" in entry else ():
        if isinstance(r, dict):  # padded against per-length: agreement, and the speed ratio
            tol = widened(tolerance(dtype), r["one_at_a_time"])
            label = f"{name} batching {kind}: padded vs by_length"
            out.extend(agreement_checks("gpu", label, r["agreement"], tol))
            label = f"{name} batching {kind}: padded speed-up over by_length"
            out.append(Check("gpu", label, r["padded_speedup"], "x"))
    out.append(
        Check("gpu", f"{name} memory ({entry['memory_kind']})", entry["memory_bytes"] / GIB, "GiB")
    )
    return out


def gate_checks(name: str, gate: dict[str, Any]) -> list[Check]:
    from benchmark.bench.gpu_ask import GATE_MARGIN_BITS

    p = gate["params"]
    return [
        Check(
            "gate",
            f"{name} ASK lockstep vs sequential: same gate decisions up to each episode's first "
            "differing action",
            gate["gate_agreement"],
            "",
            target=1.0,
        ),
        Check(
            "gate",
            f"{name} ASK lockstep vs sequential: share of identical actions ({gate['dtype']})",
            gate["action_agreement"],
            "",
            target=tolerance(gate["dtype"]).min_agreement,
        ),
        Check(
            "gate",
            f"tau {p['tau']:.4f} bits: nearest entropy of the runs (margin)",
            gate["margin_bits"],
            "bits",
            target=GATE_MARGIN_BITS,
        ),
        Check("gate", f"{name} ASK lockstep vs sequential (wall time)", gate["ratio"]),
        Check(
            "gate",
            f"{name} ASK interaction rate in the gate check",
            gate["runs"]["lockstep"]["ir"],
            "",
        ),
    ]


def main_gpu(args: argparse.Namespace, root: Path) -> int:
    import torch

    device = args.device
    if cuda_missing(device, "gpu", NO_CUDA):
        return EXIT_NO_CUDA
    from benchmark.bench.qwen_shapes import shape_names

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        if m not in shape_names():
            raise SystemExit(f"--models: unknown model {m!r}; allowed: {shape_names()}")
    if not args.budget_s > 0:
        raise SystemExit(f"--budget-s={args.budget_s} must be > 0")
    cuda = device.startswith("cuda")
    tiny = args.tiny_shapes or not cuda  # full Qwen3.5 shapes on a CPU would take hours
    sizes = QUICK if args.quick else (FULL if cuda else DRY_RUN)
    data: dict[str, Any] = {
        "kind": "gpu",
        "dry_run": not cuda,
        "device": torch.cuda.get_device_name(device) if cuda else device,
        "dtype": "bfloat16" if cuda else "float32",
        "tiny_shapes": tiny,
        "quick": args.quick,
        "sizes": asdict(sizes),
        "budget_s": args.budget_s,
        "models": {},
    }
    checks: list[Check] = []
    code, wall = timed_within_budget(
        args.budget_s,
        "bench gpu",
        data,
        lambda clock: _run(args, root, models, sizes, tiny, data, checks, clock),
        checks,
        "whole GPU benchmark",
    )
    path = report_checks(root, data, checks, "-gpu" if cuda else "-gpu-dryrun")
    print(
        f"\n{wall:.0f} s of a {args.budget_s:.0f} s budget on {data['device']} ({data['dtype']}); wrote {path}"
    )
    return code


def _run(
    args: argparse.Namespace,
    root: Path,
    models: list[str],
    sizes: GpuSizes,
    tiny: bool,
    data: dict[str, Any],
    checks: list[Check],
    clock: Deadline,
) -> int:
    import torch

    from benchmark.bench.gpu_ask import gate_check
    from benchmark.bench.gpu_projection import project, table1_plan
    from benchmark.bench.qwen_shapes import build_model, n_parameters, qwen35_tokenizer
    from benchmark.envs import make_task

    device = args.device
    cuda = device.startswith("cuda")
    if not cuda:
        torch.set_num_threads(args.threads)  # CPU dry run: see the cpu benchmark's threads section
    clock.section("setup: tokenizer and ASK+ prompts")
    tokenizer = qwen35_tokenizer()
    task = make_task(compose(root, "env=fourrooms").env)
    messages = ask_plus_messages(task, max(sizes.batch_sizes))
    prompt_tokens = [len(ids) for ids in prompt_ids(tokenizer, messages)]
    data["prompt"] = {
        "variant": "stateful + rationale (ASK+)",
        "tokens_min": min(prompt_tokens),
        "tokens_median": statistics.median(prompt_tokens),
        "tokens_max": max(prompt_tokens),
    }
    env = {
        "device": device,
        "messages": messages,
        "actions": tuple(task.action_names),
        "root": root,
    }
    rates: dict[str, dict[str, float]] = {}
    for k, name in enumerate(models):
        clock.section(f"{name}: build ({'toy widths' if tiny else 'full shapes'}) and kernels")
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        model = build_model(name, device, data["dtype"], tiny_shapes=tiny)
        per_layer = layer_kernels(model)
        consultant = InMemoryHF(
            model, tokenizer, identity=f"random:{name}", max_batch_size=max(sizes.batch_sizes)
        )
        print(f"{name}: {describe_kernels(consultant.kernels)}", flush=True)
        for kind, kernels in per_layer.items():
            print(
                f"{name}: {kind} layers: {', '.join(f'{f}={i}' for f, i in kernels.items())}",
                flush=True,
            )
        entry: dict[str, Any] = {
            "parameters": n_parameters(model),
            "kernels": consultant.kernels,
            "layer_kernels": per_layer,
        }
        data["models"][name] = entry
        error = reference_kernel_error(name, per_layer)
        if error is not None and cuda:
            print(f"benchmark.bench gpu: {error}", file=sys.stderr)
            data["kernel_error"] = error
            return EXIT_KERNELS
        entry.update(measure_model(name, consultant, env, sizes, clock))
        if k == 0:  # the gate check with the first (smallest) model
            clock.section(f"{name}: gate check (lockstep vs sequential at a tau away from ties)")
            entry["gate"] = gate_check(consultant, root, sizes, data["dtype"])
        entry["memory_bytes"], entry["memory_kind"] = _memory(device)
        checks.extend(model_checks(name, entry, data["dtype"]))
        if "gate" in entry:
            checks.extend(gate_checks(name, entry["gate"]))
        d = entry["decisions"]
        rates[name] = {
            "ir0": d["ir0"]["stats"]["decisions_per_s"],
            "ir1": d["ir1_generate"]["stats"]["decisions_per_s"],
        }
        consultant.close()
        del model, consultant
    clock.section("exact check: tiny hybrid in float32 on the device, padded and one at a time")
    n = min(16, max(sizes.batch_sizes) * 2)
    from benchmark.bench.batching import tiny_hybrid_agreement

    data["exact_fp32"] = exact = tiny_hybrid_agreement(root, device, "float32", n=n)
    for kind in ("lean", "choices"):
        for other in ("padded", "one_at_a_time"):
            label = f"tiny hybrid {kind}: {other} vs by_length"
            checks.extend(agreement_checks("exact", label, exact[kind][other], FP32))
    clock.section("Table 1 projection (benchmark.plan's work at the measured decisions/s)")
    proj = project(table1_plan(root, clock.left()), rates)
    data["table1"] = proj
    where = "this GPU" if cuda else "this CPU at toy widths"
    checks.append(Check("table1", f"projected Table 1 time on {where}", proj["hours"], "h"))
    print(
        f"Table 1 ({proj['preset']} preset, benchmark.plan): {proj['cells_todo']} cells to do, "
        f"{proj['episodes']:,} episodes, {proj['max_steps']:,} steps at most, "
        f"{proj['lm_calls']:,} LM calls ({'; '.join(proj['basis'])}); "
        f"{proj['policies_not_trained']} policies not trained (not counted); "
        f"{proj['cells_stand_in']} cells planned with a stand-in for weights not on this machine, "
        f"{proj['cells_invalid']} invalid (not counted)",
        flush=True,
    )
    print(f"\n{describe_kernels(data['models'][models[0]]['kernels'])}")
    return 0
