"""GPU benchmark: consultant throughput and ASK decisions/s with the real Qwen3.5-2B / 4B shapes.

Random weights (no download) in bf16 on the first CUDA device, the real Qwen3.5 vocabulary for
token counts, ASK+ prompts from the real prompt builder (stateful level with rationale: thinking
budget 10, then up to 16 answer tokens), and the hf backend's own batching and two-phase
generation. `--device cpu --tiny-shapes` runs the very same code at toy widths, so it is tested
on machines without a GPU. The report names the kernels each model ran with (`kernels`: fast
flash-linear-attention / causal-conv1d kernels or transformers' reference PyTorch code, the
attention implementation, the prefix-reuse mode; kernels.kernel_report), since figures taken on the
reference code say little about the GPU's speed."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmark.bench.common import (
    Check,
    compose,
    format_table,
    jsonable,
    run_rates,
    write_report,
)
from benchmark.consultants import Decoding, Query
from benchmark.consultants.hf import HFConsultant
from benchmark.consultants.kernels import describe_kernels

GPU_TIME_LIMIT_S = 480.0  # the whole GPU run must fit in 8 minutes on an H100/H200
ASK_TARGET = 2.0


@dataclass(frozen=True)
class GpuSizes:
    batch_sizes: tuple[int, ...] = (1, 8, 32, 64)
    repeats: int = 3
    thinking_budget: int = 10
    answer_tokens: int = 16
    ask_episodes: int = 32
    ask_max_steps: int = 30
    target_ir: float = 0.3


FULL = GpuSizes()
QUICK = GpuSizes(
    batch_sizes=(1, 8),
    repeats=1,
    thinking_budget=4,
    answer_tokens=4,
    ask_episodes=4,
    ask_max_steps=4,
)


class InMemoryHFConsultant(HFConsultant):
    """The hf backend (grouping, length sorting, left padding, OOM halving, thinking budget) on a
    model and tokenizer built in memory instead of loaded with from_pretrained."""

    def __init__(self, model: Any, tokenizer: Any, identity: str, max_batch_size: int = 64) -> None:
        self.max_batch_size = int(max_batch_size)
        self.model, self.tokenizer, self._identity = model, tokenizer, identity
        self._setup_tokens()


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


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def timed_answers(
    consultant: HFConsultant, queries: list[Query], repeats: int, device: str
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
    consultant: HFConsultant, messages: list, actions: tuple[str, ...], sizes: GpuSizes, device: str
) -> dict[str, Any]:
    """Queries/s and generated tokens/s per batch size (median over repeats, after a warmup)."""
    decoding = Decoding(
        max_new_tokens=sizes.answer_tokens,
        enable_thinking=True,
        thinking_budget=sizes.thinking_budget,
    )
    out: dict[str, Any] = {}
    for bs in sizes.batch_sizes:
        queries = [
            Query(
                messages=messages[i % len(messages)],
                actions=actions,
                render_answer=lambda a, r: a,
                decoding=decoding,
            )
            for i in range(bs)
        ]
        times, answers = timed_answers(consultant, queries, sizes.repeats, device)
        gen_tokens = sum(a.generated_tokens for a in answers)
        prompt_tokens = sum(a.prompt_tokens for a in answers)
        med = statistics.median(times)
        out[str(bs)] = {
            "median_s": med,
            "times_s": times,
            "queries_per_s": bs / med,
            "generated_tokens_per_s": gen_tokens / med,
            "prompt_tokens_mean": prompt_tokens / bs,
            "generated_tokens_mean": gen_tokens / bs,
        }
    return out


def choice_throughput(
    consultant: HFConsultant, messages: list, actions: tuple[str, ...], sizes: GpuSizes, device: str
) -> dict[str, Any]:
    """Choice scoring (slm.decoding.mode=choices, issue 30): queries/s per batch size with every
    valid action scored on the prompt's cache (median over repeats, after a warmup), and the
    split of the backend's time into prefill and scoring."""
    decoding = Decoding(max_new_tokens=sizes.answer_tokens, mode="choices")
    out: dict[str, Any] = {}
    for bs in sizes.batch_sizes:
        queries = [
            Query(messages[i % len(messages)], actions, lambda a, r: a, decoding) for i in range(bs)
        ]
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


def ask_lockstep_vs_sequential(
    consultant: HFConsultant,
    root: Path,
    sizes: GpuSizes,
) -> dict[str, Any]:
    """ASK (basic prompt, entropy gate at IR ~ target) on fourrooms with this consultant."""
    import torch

    from benchmark import results
    from benchmark.bench.cpu_evaluation import calibrate_tau
    from benchmark.bench.cpu_policy import new_ppo
    from benchmark.build import build, prepare

    cfg = compose(
        root,
        "env=fourrooms",
        f"env.task.max_steps={sizes.ask_max_steps}",
        "gate=entropy",
        "gate.tau=1.0",
        "prompt=basic",
        f"eval.n_episodes={sizes.ask_episodes}",
    )
    prepared = prepare(cfg)
    task = prepared[0]
    torch.manual_seed(0)
    policy = new_ppo(task, cfg.policy, n_envs=1).policy  # untrained: speed, not quality
    n = int(cfg.gate.mc_samples)
    tau, calib = calibrate_tau(
        policy, task, sizes.ask_episodes, sizes.ask_max_steps, n, sizes.target_ir
    )
    evaluation = build(cfg, prepared=prepared, policy=policy, consultant=consultant)
    seeds = evaluation.test_seeds()
    runs, outcomes = {}, {}
    for mode in ("lockstep", "sequential"):
        t0 = time.perf_counter()
        rows = evaluation.run(seeds, mode=mode, tau=tau)
        wall = time.perf_counter() - t0
        runs[mode] = run_rates(rows, wall)
        outcomes[mode] = results.split_runtime(rows)[0]
    return {
        "params": {
            "episodes": len(seeds),
            "max_steps": sizes.ask_max_steps,
            "tau": tau,
            "prompt": "basic",
            "policy": "untrained",
        },
        "tau_calibration": calib,
        "runs": runs,
        "identical": outcomes["lockstep"] == outcomes["sequential"],
        "ratio": runs["sequential"]["wall_s"] / runs["lockstep"]["wall_s"],
    }


def main_gpu(args: argparse.Namespace, root: Path) -> int:
    import torch

    from benchmark.bench.qwen_shapes import build_model, n_parameters, qwen35_tokenizer, shape_names
    from benchmark.envs import make_task

    device = args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        print(
            "benchmark.bench gpu: no CUDA device is available (torch.cuda.is_available() is "
            "False). Run it on a GPU machine with a CUDA build of torch, or exercise the code "
            "path on a CPU with: python -m benchmark.bench gpu --device cpu --tiny-shapes",
            file=sys.stderr,
        )
        return 2
    if not device.startswith("cuda") and not args.tiny_shapes:
        print(
            f"benchmark.bench gpu: --device {device} needs --tiny-shapes (full Qwen3.5 shapes "
            "on a CPU would take hours)",
            file=sys.stderr,
        )
        return 2
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        if m not in shape_names():
            raise SystemExit(f"--models: unknown model {m!r}; allowed: {shape_names()}")
    sizes = QUICK if args.quick else FULL
    dtype = "bfloat16" if device.startswith("cuda") else "float32"
    if not device.startswith("cuda"):
        torch.set_num_threads(args.threads)  # CPU dry run: see the cpu benchmark's threads section
    started = time.perf_counter()
    tokenizer = qwen35_tokenizer()
    task = make_task(compose(root, "env=fourrooms").env)
    messages = ask_plus_messages(task, max(sizes.batch_sizes))
    checks: list[Check] = []
    per_model: dict[str, Any] = {}
    for k, name in enumerate(models):
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        t0 = time.perf_counter()
        model = build_model(name, device, dtype, tiny_shapes=args.tiny_shapes)
        build_s = time.perf_counter() - t0
        consultant = InMemoryHFConsultant(
            model, tokenizer, identity=f"random:{name}", max_batch_size=max(sizes.batch_sizes)
        )
        entry: dict[str, Any] = {
            "parameters": n_parameters(model),
            "build_s": build_s,
            "kernels": consultant.kernels,
            "throughput": throughput(consultant, messages, tuple(task.action_names), sizes, device),
            "prefill": consultant.prefill_stats(),
            "choices": choice_throughput(
                consultant, messages, tuple(task.action_names), sizes, device
            ),
        }
        print(f"{name}: {describe_kernels(consultant.kernels)}", flush=True)
        for bs, r in entry["throughput"].items():
            checks.append(
                Check("gpu", f"{name} queries/s at batch {bs}", r["queries_per_s"], "1/s")
            )
        for bs, r in entry["choices"].items():
            checks.append(
                Check(
                    "gpu",
                    f"{name} choice scoring queries/s at batch {bs}",
                    r["queries_per_s"],
                    "1/s",
                )
            )
        tp = entry["throughput"]
        lo, hi = str(min(sizes.batch_sizes)), str(max(sizes.batch_sizes))
        checks.append(
            Check(
                "gpu",
                f"{name} batch {hi} vs {lo} (queries/s)",
                tp[hi]["queries_per_s"] / tp[lo]["queries_per_s"],
            )
        )
        if k == 0:  # ASK decisions with the first (smallest) model
            ask = ask_lockstep_vs_sequential(consultant, root, sizes)
            entry["ask"] = ask
            checks.append(
                Check(
                    "gpu",
                    f"{name} ASK lockstep vs sequential (wall time)",
                    ask["ratio"],
                    target=ASK_TARGET,
                )
            )
            checks.append(
                Check(
                    "gpu",
                    f"{name} ASK identical per-episode results",
                    float(ask["identical"]),
                    "",
                    target=1.0,
                )
            )
            for mode in ("lockstep", "sequential"):
                checks.append(
                    Check(
                        "gpu",
                        f"{name} ASK {mode} decisions/s",
                        ask["runs"][mode]["decisions_per_s"],
                        "1/s",
                    )
                )
        if device.startswith("cuda"):
            entry["peak_gpu_bytes"] = int(torch.cuda.max_memory_allocated(device))
            checks.append(
                Check("gpu", f"{name} peak GPU memory", entry["peak_gpu_bytes"] / (1 << 30), "GiB")
            )
        per_model[name] = entry
        consultant.close()
        del model, consultant
    wall = time.perf_counter() - started
    checks.append(
        Check(
            "gpu",
            "whole GPU benchmark",
            wall,
            "s",
            target=GPU_TIME_LIMIT_S if device.startswith("cuda") else None,
            cmp="<",
        )
    )
    prompt_tokens = [len(ids) for ids in _prompt_ids(tokenizer, messages)]
    data = {
        "kind": "gpu",
        "dry_run": not device.startswith("cuda"),
        "device": torch.cuda.get_device_name(device) if device.startswith("cuda") else device,
        "dtype": dtype,
        "tiny_shapes": args.tiny_shapes,
        "quick": args.quick,
        "sizes": asdict(sizes),
        "kernels": next(iter(per_model.values()), {}).get("kernels", {}),  # same for every shape
        "prompt": {
            "variant": "stateful + rationale (ASK+)",
            "tokens_min": min(prompt_tokens),
            "tokens_median": statistics.median(prompt_tokens),
            "tokens_max": max(prompt_tokens),
        },
        "models": per_model,
        "wall_seconds": wall,
        "table": [c.to_dict() for c in checks],
    }
    bench_dir = Path(str(compose(root).paths.bench))
    path = write_report(
        bench_dir, jsonable(data), suffix="-gpu" if device.startswith("cuda") else "-gpu-dryrun"
    )
    print(format_table(checks))
    print(f"\n{describe_kernels(data['kernels'])}")
    print(f"{wall:.0f} s on {data['device']} ({dtype}); prompts {data['prompt']}; wrote {path}")
    return 0


def _prompt_ids(tokenizer: Any, messages: list) -> list[list[int]]:
    out = []
    for m in messages:
        text = tokenizer.apply_chat_template(
            m, add_generation_prompt=True, tokenize=False, enable_thinking=True
        )
        out.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return out
