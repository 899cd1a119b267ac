"""Kernels (`kernel_report`): which implementation the model's attention and its linear-attention
and conv functions resolved to (the fast `flash-linear-attention` / `causal-conv1d` kernels, or
transformers' reference PyTorch code, correct but much slower on a GPU); logged once at load, and
reported by `make bench-gpu`."""

from __future__ import annotations

import sys
from typing import Any

from benchmark.consultants.prefix import prefix_reuse_mode

GPU_EXTRA_HINT = "pip install -e '.[gpu]' on a CUDA machine"


def kernel_report(model: Any) -> dict[str, str]:
    """Which implementation each optional fast kernel of the model resolved to, read from the
    model's own modeling modules (not from a list of package names): transformers wraps each
    such function (`use_kernel_func_from_hub_with_fallback`: chunk_gated_delta_rule,
    fused_recurrent_gated_delta_rule, causal_conv1d_fn, ...) at import, binding either the
    package's kernel or its reference PyTorch code. Values: the package name (`fla`,
    `causal_conv1d`) when its kernel is bound, "reference" otherwise; `attention` is the
    attention implementation (sdpa, eager, flash_attention_2, ...), `prefix_reuse` the cache
    mode (`prefix_reuse_mode`, or "off")."""
    out: dict[str, str] = {
        "attention": str(getattr(model.config, "_attn_implementation", None) or "default")
    }
    modules = {type(m).__module__ for m in model.modules()}
    for name in sorted(modules):
        for value in vars(sys.modules[name]).values() if name in sys.modules else ():
            closure = getattr(value, "__closure__", None)
            if not callable(value) or not closure:
                continue
            free = dict(
                zip(value.__code__.co_freevars, (c.cell_contents for c in closure), strict=True)
            )
            if "is_new_implementation" in free and "func_name" in free and "package" in free:
                fast = bool(free["is_new_implementation"])
                out[str(free["func_name"])] = str(free["package"]) if fast else "reference"
    out["prefix_reuse"] = prefix_reuse_mode(model) or "off"
    return out


def describe_kernels(report: dict[str, str]) -> str:
    """One log line for `kernel_report`, with the install hint when a kernel falls back."""
    parts = [f"{k}={v}" for k, v in report.items()]
    slow = [k for k, v in report.items() if v == "reference"]
    line = "kernels: " + ", ".join(parts)
    if slow:
        line += (
            f" ({', '.join(slow)}: transformers' reference PyTorch code, much slower on a GPU; "
            f"for the fast kernels: {GPU_EXTRA_HINT})"
        )
    return line
