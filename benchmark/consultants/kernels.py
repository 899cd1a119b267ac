"""Kernels (`kernel_report`): which implementation the model's attention and its linear-attention
and conv functions resolved to (the fast `flash-linear-attention` / `causal-conv1d` kernels, or
transformers' reference PyTorch code, correct but much slower on a GPU); logged once at load, and
reported by `make bench-gpu`, per layer type (`layer_kernels`), which fails on CUDA when a layer
runs reference code (`reference_kernel_error`)."""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator
from typing import Any

from benchmark.consultants.prefix import prefix_reuse_mode

# the one-line GPU install (docs/development.md, "GPU install"): a CUDA torch, then the `[gpu]`
# extra built against it
GPU_INSTALL = "make install-gpu"
GPU_EXTRA_HINT = f"{GPU_INSTALL} on a CUDA machine (docs/development.md, GPU install)"


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
    for name in sorted({type(m).__module__ for m in model.modules()}):
        for func, impl in _bindings(name).values():
            out[func] = impl
    out["prefix_reuse"] = prefix_reuse_mode(model) or "off"
    return out


def _bindings(module_name: str) -> dict[str, tuple[str, str]]:
    """{global name: (kernel function name, implementation)} of the kernel-or-reference
    functions transformers bound in the module `module_name` (see `kernel_report`)."""
    out: dict[str, tuple[str, str]] = {}
    module = sys.modules.get(module_name)
    for var, value in vars(module).items() if module is not None else ():
        binding = _binding(value)
        if binding is not None:
            out[var] = binding
    return out


def _binding(value: Any) -> tuple[str, str] | None:
    """(kernel function name, implementation) when `value` is transformers' kernel-or-reference
    wrapper, else None. The wrapper is a closure over `func_name`, `package` and
    `is_new_implementation`; with the `kernels` package installed, transformers hands it on to
    `kernels`, which wraps it again in a torch Module whose `forward` closes over it, so the
    wrappers are followed a few levels down (`_unwrapped`)."""
    for fn in _unwrapped(value):
        free = _closure(fn)
        if {"is_new_implementation", "func_name", "package"} <= set(free):
            fast = bool(free["is_new_implementation"])
            return str(free["func_name"]), str(free["package"]) if fast else "reference"
    return None


@contextlib.contextmanager
def reference_kernels(model: Any) -> Iterator[int]:
    """Within the block, every kernel-or-reference function bound in the model's modeling modules
    (`kernel_report`) is replaced by transformers' reference PyTorch code (the `torch_function`
    the wrapper falls back to), so the same model runs both ways (`make gpu-smoke`: fast kernels
    against the reference, which catches a kernel that imports but computes wrongly, e.g. one
    that transformers hands fewer keyword arguments than it needs). Yields how many functions
    were swapped (0: nothing fast was bound)."""
    swapped: list[tuple[Any, str, Any]] = []
    try:
        for name in sorted({type(m).__module__ for m in model.modules()}):
            module = sys.modules.get(name)
            for var, value in list(vars(module).items()) if module is not None else ():
                binding = _binding(value)
                if binding is None or binding[1] == "reference":
                    continue
                reference = next(
                    (
                        _closure(fn)["torch_function"]
                        for fn in _unwrapped(value)
                        if "torch_function" in _closure(fn)
                    ),
                    None,
                )
                if reference is not None:
                    swapped.append((module, var, value))
                    setattr(module, var, reference)
        yield len(swapped)
    finally:
        for module, var, value in swapped:
            setattr(module, var, value)


def _inner_functions(value: Any) -> list[Any]:
    """The functions a wrapper `value` hands its call on to: the functions in its closure, its
    `__wrapped__`, and for a torch Module instance (a `kernels` wrapper) its `forward`."""
    inner = [*_closure(value).values(), getattr(value, "__wrapped__", None)]
    if not inspect.isfunction(value) and not inspect.isclass(value):
        inner.append(getattr(type(value), "forward", None))
    return [f for f in inner if f is not value and inspect.isfunction(f)]


def _unwrapped(value: Any, depth: int = 3) -> list[Any]:
    """`value` (when a function) and the functions its wrappers hand the call on to, `depth`
    wrappers down (`_inner_functions`)."""
    found = [value] if inspect.isfunction(value) else []
    if depth > 0:
        for fn in _inner_functions(value):
            found += _unwrapped(fn, depth - 1)
    return found


def _closure(value: Any) -> dict[str, Any]:
    """A function's closure as {free variable: value}; {} for anything else or an empty cell."""
    closure = getattr(value, "__closure__", None)
    if not inspect.isfunction(value) or not closure:
        return {}
    out = {}
    for name, cell in zip(value.__code__.co_freevars, closure, strict=True):
        try:
            out[name] = cell.cell_contents
        except ValueError:  # an empty cell
            continue
    return out


def layer_kernels(model: Any) -> dict[str, dict[str, str]]:
    """{layer type: {kernel: implementation}}: the kernel functions each kind of decoder layer
    calls (read from the `forward` code of the layer's modules, against the bindings of their
    modeling module), plus `attention` (the implementation) for a layer with `self_attn`. Layer
    types are the config's `layer_types` (Qwen3.5: linear_attention = Gated-DeltaNet,
    full_attention), else the layer's class name."""
    import torch

    config = model.config
    types = list(getattr(config, "layer_types", None) or [])
    n = int(getattr(config, "num_hidden_layers", 0) or 0)
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n]
    out: dict[str, dict[str, str]] = {}
    for i, layer in enumerate(lists[0] if lists else []):
        entry = out.setdefault(types[i] if i < len(types) else type(layer).__name__, {})
        if getattr(layer, "self_attn", None) is not None:
            entry["attention"] = str(getattr(config, "_attn_implementation", None) or "default")
        for sub in layer.modules():
            forward = getattr(type(sub), "forward", None)  # under its decorators
            code = getattr(inspect.unwrap(forward), "__code__", None) if forward else None
            if code is not None:
                entry.update(_kernel_calls(code, type(sub).__module__))
    return {kind: dict(sorted(kernels.items())) for kind, kernels in out.items()}


def _kernel_calls(code: Any, module_name: str, depth: int = 2) -> dict[str, str]:
    """{kernel: implementation} of the bound kernel functions the code `code` calls, directly or
    through helpers of its own modeling module `module_name` (transformers 5.25's Qwen3.5 layer
    calls `causal_conv1d_forward`, which calls the bound `causal_conv1d_fn`), `depth` levels down."""
    binds = _bindings(module_name)
    module = sys.modules.get(module_name)
    out: dict[str, str] = {}
    for var in code.co_names:
        if var in binds:
            func, impl = binds[var]
            out[func] = impl
        elif depth > 0 and module is not None and var in vars(module):
            for fn in _unwrapped(vars(module)[var]):
                if fn.__module__ == module_name:
                    out.update(_kernel_calls(fn.__code__, module_name, depth - 1))
    return out


def reference_kernel_error(name: str, per_layer: dict[str, dict[str, str]]) -> str | None:
    """The error `make bench-gpu` stops with on CUDA when a layer of model `name` runs
    transformers' reference code (`layer_kernels`), naming the layer type, the kernels and the
    install; None when every kernel is a fast one."""
    slow = []
    for kind, kernels in per_layer.items():
        funcs = sorted(func for func, impl in kernels.items() if impl == "reference")
        if funcs:
            slow.append(f"{kind} layers run {', '.join(funcs)} on transformers' reference code")
    if not slow:
        return None
    return (
        f"{name} on CUDA: " + "; ".join(slow) + " (correct, but many times slower: figures "
        f"taken so say little about this GPU). Install the kernels (the `[gpu]` extra: "
        f"flash-linear-attention, causal-conv1d) with: {GPU_INSTALL}"
    )


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
