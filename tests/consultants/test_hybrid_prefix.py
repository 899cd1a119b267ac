"""The Qwen3.5 hybrid architecture (Gated-DeltaNet linear attention beside full attention) in the
hf backend, on a tiny model of that architecture saved and loaded with from_pretrained: prefix
reuse gives the greedy tokens of the plain path (unbatched, batched rows of different lengths
with left padding, equal lengths, a second step that finds the stored prefix, thinking phases)
and really saves prefill; padding after a reused prefix would change the answers (why rows of
different lengths get their own states, stacked); the kernel report reads which implementations
transformers bound (reference PyTorch code on this CPU)."""

from __future__ import annotations

import logging
import sys
import types
from collections import defaultdict
from types import SimpleNamespace

import pytest

from benchmark.consultants.hf import HFConsultant
from benchmark.consultants.kernels import GPU_EXTRA_HINT, describe_kernels, kernel_report
from benchmark.consultants.runtime import PREFILL_STATS
from tests.consultants.test_prefix import ask_queries, new_ids

LINEAR_KERNELS = {  # function -> package, as transformers' Qwen3.5 modeling code binds them
    "chunk_gated_delta_rule": "fla",
    "fused_recurrent_gated_delta_rule": "fla",
    "causal_conv1d_fn": "causal_conv1d",
    "causal_conv1d_update": "causal_conv1d",
}


@pytest.fixture(scope="module")
def hybrid(tiny_model):
    """The tiny Qwen3.5 twice: prefix reuse on (the default) and off, through generate()."""
    import torch

    threads = torch.get_num_threads()
    path = str(tiny_model("hybrid"))
    on = HFConsultant(path=path, num_threads=1, lean_max_new_tokens=0)  # generate()
    off = HFConsultant(path=path, num_threads=1, prefix_cache=0, lean_max_new_tokens=0)
    yield on, off
    torch.set_num_threads(threads)


def test_the_tiny_model_is_the_hybrid_architecture(hybrid):
    on, _ = hybrid
    assert type(on.model).__name__ == "Qwen3_5ForCausalLM"
    assert on.model.config.layer_types == (["linear_attention"] * 3 + ["full_attention"]) * 2
    assert on.reuse_mode == "unpadded"


def test_kernel_report_says_reference_here_and_logs_once(hybrid, caplog):
    import importlib.util

    from transformers.utils import is_causal_conv1d_available, is_flash_linear_attention_available

    on, _ = hybrid
    report = on.kernels
    assert set(LINEAR_KERNELS) <= set(report)
    for func, package in LINEAR_KERNELS.items():
        installed = importlib.util.find_spec(package) is not None
        assert report[func] == (package if installed else "reference"), func
    if not (is_flash_linear_attention_available() or is_causal_conv1d_available()):
        assert all(report[f] == "reference" for f in LINEAR_KERNELS)  # this CPU machine
    assert report["attention"] == on.model.config._attn_implementation
    assert report["prefix_reuse"] == "unpadded"
    assert GPU_EXTRA_HINT in describe_kernels(report) and "make install-gpu" in GPU_EXTRA_HINT
    with caplog.at_level(logging.INFO, logger="benchmark.consultants.hf"):
        again = HFConsultant(path=on.model.name_or_path, num_threads=1)
        again.answer([])
    lines = [r.getMessage() for r in caplog.records if "kernels:" in r.getMessage()]
    assert len(lines) == 1 and "chunk_gated_delta_rule=reference" in lines[0]


def test_kernel_report_reads_the_bound_implementation(hybrid):
    """A function transformers bound to an importable package reports that package, one whose
    package is missing reports "reference": the report follows the binding, not a name list."""
    from transformers.integrations.hub_kernels import use_kernel_func_from_hub_with_fallback

    module = types.ModuleType("fake_hybrid_modeling")

    def sqrt(x):
        return x

    def scan(x):
        return x

    module.sqrt = use_kernel_func_from_hub_with_fallback("sqrt", "math")(sqrt)
    module.scan = use_kernel_func_from_hub_with_fallback("scan", "no_such_kernel_package")(scan)
    layer = type("Layer", (), {"__module__": module.__name__})()
    model = SimpleNamespace(config=hybrid[0].model.config, modules=lambda: [layer])
    sys.modules[module.__name__] = module
    try:
        report = kernel_report(model)
    finally:
        del sys.modules[module.__name__]
    assert report["sqrt"] == "math" and report["scan"] == "reference"
    assert "chunk_gated_delta_rule" not in report  # only the model's own modules are read


def test_reference_kernels_swaps_each_fast_binding_for_its_reference_and_back(hybrid):
    """`make gpu-smoke`'s fast-vs-reference check runs the same model on transformers' reference
    code inside `reference_kernels`: a function bound to a package is swapped for its reference
    within the block and restored after; a reference binding is left alone."""
    from transformers.integrations.hub_kernels import use_kernel_func_from_hub_with_fallback

    from benchmark.consultants.kernels import reference_kernels

    module = types.ModuleType("fake_kernel_modeling")

    def sqrt(x):
        return ("reference", x)

    def scan(x):
        return ("reference scan", x)

    module.sqrt = fast = use_kernel_func_from_hub_with_fallback("sqrt", "math")(sqrt)
    module.scan = slow = use_kernel_func_from_hub_with_fallback("scan", "no_such_package")(scan)
    layer = type("Layer", (), {"__module__": module.__name__})()
    model = SimpleNamespace(config=hybrid[0].model.config, modules=lambda: [layer])
    sys.modules[module.__name__] = module
    try:
        assert module.sqrt(4.0) == 2.0  # math.sqrt, the "fast kernel"
        with reference_kernels(model) as swapped:
            assert swapped == 1
            assert module.sqrt(4.0) == ("reference", 4.0) and module.scan is slow
        assert module.sqrt is fast and module.sqrt(4.0) == 2.0
        with reference_kernels(hybrid[0].model) as swapped:
            assert swapped == 0  # this CPU: nothing fast is bound
    finally:
        del sys.modules[module.__name__]


def saves_prefill(after: dict, before: dict) -> bool:
    """Did the calls between two `prefill_stats()` compute under 70% of the plain path's
    prefill? (The system prefix is over half of every prompt.)"""
    computed = after["prefill_tokens"] - before["prefill_tokens"]
    plain = after["prefill_tokens_without_reuse"] - before["prefill_tokens_without_reuse"]
    return 0 < computed < 0.7 * plain


def equal_length_groups(model: HFConsultant, queries) -> list[list]:
    by_length = defaultdict(list)
    for q in queries:
        by_length[len(model.encode(q))].append(q)
    return [g for g in by_length.values() if len(g) > 1]


def test_greedy_answers_identical_with_and_without_reuse(hybrid, tmp_path):
    on, off = hybrid
    on.prefix_cache.clear()
    on.reset_prefill_stats()
    off.reset_prefill_stats()
    queries = ask_queries(tmp_path, "fourrooms", "basic", n=12)
    assert len({len(on.encode(q)) for q in queries}) > 3  # left padding in the batched calls
    reference = new_ids(off, queries)
    assert len({tuple(r) for r in reference}) > 6  # the answers depend on the prompt

    assert new_ids(on, queries) == reference  # mixed lengths: per-row states, stacked
    assert on.prefill_stats()["prefix_misses"] == 1  # the system prefix, computed once
    assert saves_prefill(on.prefill_stats(), dict.fromkeys(PREFILL_STATS, 0))
    assert [new_ids(on, [q])[0] for q in queries] == reference  # unbatched
    before = on.prefill_stats()
    assert [new_ids(on, [q])[0] for q in queries[::-1]][::-1] == reference  # next step: hits
    after = on.prefill_stats()
    assert after["prefix_hits"] == before["prefix_hits"] + len(queries)
    assert saves_prefill(after, before)

    groups = equal_length_groups(on, queries)
    assert groups  # rows of equal length: [prefix | suffix] with no padding at all
    for group in groups:
        before = on.prefill_stats()
        assert new_ids(on, group) == new_ids(off, group)
        after = on.prefill_stats()
        assert after["prefix_hits"] == before["prefix_hits"] + 1
        assert saves_prefill(after, before)

    plain = off.prefill_stats()
    assert plain["prefill_tokens"] == plain["prefill_tokens_without_reuse"]


@pytest.mark.slow  # Qwen3.5 thinking phases (~3 s)
def test_thinking_phases_identical_with_reuse(hybrid, tmp_path):
    """ASK+ (stateful, rationale): phase 2 re-reads prompt + thinking with the stored prefix;
    batched, the rows' phase-1 lengths differ."""
    on, off = hybrid
    queries = ask_queries(tmp_path, "fourrooms", "stateful", "prompt.rationale=true", n=4)
    reference = [g.new_ids for g in off.generate(queries)]
    before = on.prefill_stats()["prefix_hits"]
    assert [on.generate([q])[0].new_ids for q in queries] == reference
    assert on.prefill_stats()["prefix_hits"] >= before + 2 * len(queries) - 1  # both phases
    assert new_ids(on, queries) == reference


def test_padding_after_a_reused_prefix_would_change_answers(hybrid, tmp_path):
    """Why the hybrid cache reuses only unpadded rows: the full-attention layout [prefix | pad |
    suffix] forced on it changes greedy answers (the recurrent state decays over the padding)."""
    on, off = hybrid
    queries = ask_queries(tmp_path, "fourrooms", "basic", n=8)
    reference = new_ids(off, queries)
    on.reuse_mode = "padded"
    try:
        wrong = new_ids(on, queries)
    finally:
        on.reuse_mode = "unpadded"
    assert wrong != reference
    assert new_ids(on, queries) == reference


def test_sampled_answers_identical_with_reuse(hybrid, tmp_path):
    """Per-query sampling streams (hf module docstring) see the same logits with reuse."""
    from dataclasses import replace

    on, off = hybrid
    queries = [
        replace(q, decoding=replace(q.decoding, temperature=0.8, top_p=0.9, top_k=40, seed=5))
        for q in ask_queries(tmp_path, "fourrooms", "basic", n=6)
    ]
    reference = new_ids(off, queries)
    assert new_ids(on, queries) == reference
    assert [new_ids(on, [q])[0] for q in queries] == reference
