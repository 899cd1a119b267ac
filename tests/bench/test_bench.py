"""`python -m benchmark.bench`: the quick CPU run and the GPU code path as a CPU dry run, each in a
subprocess with its own outputs root; the JSON must carry every section with ratios and targets."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from benchmark.bench.common import Check, format_table
from benchmark.bench.cpu_settings import SECTIONS, TARGETS
from benchmark.bench.released import SRC_VAR, checkout
from tests.conftest import run_cli


def _bench(root, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return run_cli(root, *args, module="benchmark.bench", check=False, timeout=timeout)


def _report(root, pattern: str) -> dict:
    files = sorted((root / "bench").glob(pattern))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def test_checks_compare_against_their_targets():
    assert Check("s", "ratio", 5.2, target=5.0).status == "PASS"
    assert Check("s", "ratio", 4.9, target=5.0).status == "MISS"
    assert Check("s", "rss", 2.5, "GiB", target=2.0, cmp="<").status == "MISS"
    assert Check("s", "rss", 0.5, "GiB", target=2.0, cmp="<").status == "PASS"
    assert Check("s", "info", 3.0).status == "info"
    table = format_table([Check("gate", "batched vs N-pass", 6.0, target=5.0)])
    assert "gate" in table and ">= 5 x" in table and "PASS" in table


def test_a_share_above_its_physical_limit_is_a_measurement_error_not_a_pass():
    """IR-0 decisions/s as a share of the env's own steps/s cannot exceed 1 (the loop steps the
    same env and does more): 1.78 was once reported as PASS; it is an ERROR."""
    name = "IR-0 decisions/s as a share of the env's own steps/s (2 processes)"
    over = Check("workers", name, 1.78, "", target=0.5, limit=1.0)
    assert over.status == "ERROR" and over.passed is False
    assert over.to_dict()["status"] == "ERROR" and over.to_dict()["pass"] is False
    assert Check("workers", name, 0.92, "", target=0.5, limit=1.0).status == "PASS"
    assert Check("workers", name, 1.0, "", target=0.5, limit=1.0).status == "PASS"  # the bound
    assert Check("workers", name, 0.3, "", target=0.5, limit=1.0).status == "MISS"
    assert Check("workers", "no target", 3.0, limit=1.0).status == "ERROR"
    table = format_table([over])
    assert "ERROR" in table and "(<= 1: limit)" in table


def test_a_released_checkout_that_is_not_one_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv(SRC_VAR, str(tmp_path))
    with pytest.raises(FileNotFoundError, match=f"{SRC_VAR}=.*no src/ask"):
        checkout()
    monkeypatch.delenv(SRC_VAR)
    assert checkout() is None


@pytest.mark.slow
def test_quick_cpu_bench_writes_every_section_with_ratios_and_targets(tmp_path):
    proc = _bench(tmp_path, "--quick")
    assert proc.returncode == 0, proc.stderr[-5000:]
    data = _report(tmp_path, "*[0-9].json")
    assert data["kind"] == "cpu" and data["quick"] is True
    assert set(data["sections"]) == set(SECTIONS)
    for name, section in data["sections"].items():
        checks = section["checks"]
        assert checks, f"section {name} has no checks"
        for c in checks:
            assert isinstance(c["value"], float) and c["status"] in ("PASS", "MISS", "info")
    targets = {
        c["section"]: c for c in data["table"] if c["target"] is not None and c["unit"] == "x"
    }
    for section in ("gate", "evaluation", "tuning", "training"):
        assert targets[section]["target"] == TARGETS[section]
        assert targets[section]["value"] > 0
    training = {c["name"]: c for c in data["sections"]["training"]["checks"]}
    assert training["2 env workers: weights identical to 1"]["value"] == 1.0
    released = data["sections"]["training"]["released"]  # the released code's training loop
    if os.environ.get(SRC_VAR):
        assert all(released["steps_per_s"][k] > 0 for k in ("suite", "released"))
    else:
        assert SRC_VAR in released["skipped"]
    ev = data["sections"]["evaluation"]
    assert ev["identical"] is True  # lockstep and sequential give the same episodes
    assert 0 < ev["median"]["lockstep"]["ir"] < 1
    assert data["sections"]["gate"]["agreement"]["max_abs_diff_total_bits"] < 1e-4
    tuning = data["sections"]["tuning"]
    assert tuning["without_cache"]["cache"] is None and tuning["with_cache"]["hit_rate"] > 0
    memory = data["sections"]["memory"]
    assert 0 < memory["eval_lockstep_rss_bytes"] <= memory["peak_rss_bytes"]
    # the printed table names every ratio with its target and verdict
    assert "lockstep vs sequential" in proc.stdout and ">= 2 x" in proc.stdout


@pytest.mark.slow  # times five decode paths (~20 s)
def test_ir1_section_times_both_paths_on_the_same_episodes(tmp_path):
    """ASK at IR 1 with the stateful prompt, on a tiny budget: the default path (lockstep, prefix
    reuse) and batch-1 sequential without reuse play the same episodes, action for action."""
    proc = _bench(tmp_path, "--quick", "--sections", "ir1")
    assert proc.returncode == 0, proc.stderr[-5000:]
    data = _report(tmp_path, "*[0-9].json")
    assert set(data["sections"]) == {"ir1"}
    ir1 = data["sections"]["ir1"]
    params = ir1["params"]
    assert params["prompt"] == "stateful" and params["max_steps"] < params["paper_max_steps"]
    assert "capped at" in proc.stdout  # a shortened episode is said, never silent
    assert params["paths"] == {
        "default": {"mode": "lockstep", "prefix_cache": 8, "max_batch_size": 32},
        "generate": {"mode": "lockstep", "prefix_cache": 8, "max_batch_size": 32},
        "choices": {"mode": "lockstep", "prefix_cache": 8, "max_batch_size": 32},
        "batch1": {"mode": "sequential", "prefix_cache": 0, "max_batch_size": 32},
        "authors": {"mode": "sequential", "prefix_cache": 0, "max_batch_size": 32},
    }
    default, batch1 = ir1["default"], ir1["batch1"]
    assert ir1["identical"] is True and default["episodes"] == batch1["episodes"]
    assert ir1["generate"]["episodes"] == batch1["episodes"]  # lean decode == generate()
    # the lean path and choice scoring time their prefill and decode; generate() cannot
    for key in ("default", "choices"):
        split = ir1[key]["split_ms"]
        assert split["prefill"] > 0 and split["decode"] > 0
        assert sum(split.values()) == pytest.approx(ir1[key]["stats"]["consultant_ms_per_query"])
    assert ir1["batch1"]["split_ms"] is None and ir1["floor"]["suffix_ms"] > 0
    # the authors' loop asks at every step too; the cap is its ms/decision over the floor
    authors = ir1["authors"]["stats"]
    assert authors["ir"] == 1.0 and authors["queries"] == authors["decisions"] > 0
    assert ir1["ratio_authors"] == pytest.approx(
        ir1["choices"]["stats"]["decisions_per_s"] / authors["decisions_per_s"]
    )
    per_query = ir1["query_costs"]["median_ms"]  # the same queries, timed round-robin
    assert ir1["cap"]["batch1"] == pytest.approx(per_query["batch1"] / per_query["floor"])
    assert per_query["floor"] == ir1["floor"]["suffix_ms"] and ir1["floor"]["whole_ms"] > 0
    assert set(per_query) == {*params["paths"], "floor", "whole", "gate_batched", "gate_n_pass"}
    assert ir1["floor"]["suffix_tokens"] > 0 and ir1["floor"]["prefix_tokens"] > 0
    assert len(default["episodes"]) == params["episodes"]
    for run in (default, batch1):
        stats = run["stats"]
        assert stats["ir"] == 1.0 and stats["queries"] == stats["decisions"] > 0
        assert stats["decisions_per_s"] > 0 and stats["consultant_ms_per_query"] > 0
    # prefix reuse computes fewer prompt positions; without it every position is computed
    assert batch1["prefill"]["prefill_tokens"] == batch1["prefill"]["prefill_tokens_without_reuse"]
    assert default["prefill"]["prefill_tokens"] < batch1["prefill"]["prefill_tokens"]
    assert ir1["ratio"] == pytest.approx(
        default["stats"]["decisions_per_s"] / batch1["stats"]["decisions_per_s"]
    )
    table = {c["name"]: c for c in ir1["checks"]}
    ratio = table["default path vs batch-1 sequential, no reuse (decisions/s)"]
    assert ratio["target"] is None and ratio["value"] == pytest.approx(ir1["ratio"])
    floor = table["per query, interleaved: choice scoring / the floor"]
    assert floor["target"] == TARGETS["ir1_floor"] and floor["cmp"] == "<="
    assert floor["value"] == pytest.approx(per_query["choices"] / per_query["floor"])
    assert table["identical per-episode results and actions"]["status"] == "PASS"
    assert "default path vs batch-1 sequential" in proc.stdout
    assert "running ir1 (1/1): batch1 path" in proc.stdout  # progress inside the long section


@pytest.mark.slow  # the GPU code path at toy widths (~40 s)
def test_gpu_bench_cpu_dry_run_prints_every_figure(tmp_path):
    """`make bench-gpu ARGS="--device cpu"`: queries/s, prefill and decode per query, ASK+
    decisions/s at IR 0 and IR 1 (generate and choices), memory, the kernels per layer type, the
    gate check, the Table 1 projection and the enforced budget, in the table and the JSON."""
    proc = _bench(tmp_path, "gpu", "--device", "cpu", "--quick")
    assert proc.returncode == 0, proc.stderr[-5000:]
    data = _report(tmp_path, "*-gpu-dryrun.json")
    assert data["dry_run"] is True and data["tiny_shapes"] is True  # --device cpu implies it
    assert set(data["models"]) == {"qwen3.5-2b", "qwen3.5-4b"}
    assert 600 <= data["prompt"]["tokens_median"] <= 900  # real Qwen3.5 vocabulary, ASK+ prompt
    for entry in data["models"].values():
        assert (
            set(entry["throughput"]) == set(entry["choices"]) == set(entry["split"]) == {"1", "4"}
        )
        assert all(r["queries_per_s"] > 0 for r in entry["throughput"].values())
        assert all(r["prefill_s_per_query"] > 0 for r in entry["choices"].values())
        assert all(s["prefill_ms"] > 0 and s["decode_ms"] > 0 for s in entry["split"].values())
        d = entry["decisions"]
        assert d["ir0"]["stats"]["ir"] == 0 and d["ir0"]["stats"]["decisions_per_s"] > 0
        for key in ("ir1_generate", "ir1_choices"):
            assert d[key]["stats"]["ir"] == 1.0 and d[key]["stats"]["decisions_per_s"] > 0
        assert d["ir1_choices"]["split_ms"]["prefill"] > 0
        assert entry["memory_bytes"] > 0 and "RSS" in entry["memory_kind"]
        # the kernels per layer type: transformers' reference code here (no CUDA, no fla)
        layers = entry["layer_kernels"]
        assert set(layers) == {"linear_attention", "full_attention"}
        assert set(layers["linear_attention"].values()) == {"reference"}
        assert {"chunk_gated_delta_rule", "causal_conv1d_fn"} <= set(layers["linear_attention"])
        assert layers["full_attention"] == {"attention": "sdpa"}
        assert entry["kernels"]["prefix_reuse"] == "unpadded"
        # batching across prompt lengths, measured on this device: one forward per step padded
        b = entry["batching"]
        assert b["auto"] == "by_length" and b["distinct_lengths"] > 1  # a CPU's choice
        for kind in ("lean", "choices"):
            assert b[kind]["same_answers"] is True  # fp32 here
            assert b[kind]["agreement"]["agreement"] == 1.0 and b[kind]["agreement"]["finite"]
            assert b[kind]["one_at_a_time"]["agreement"] == 1.0
            assert b[kind]["padded"]["forwards"] < b[kind]["by_length"]["forwards"]
        assert b["choices"]["agreement"]["max_abs_dlogp"] < 1e-4
    gate = data["models"]["qwen3.5-2b"]["gate"]
    assert gate["identical"] is True and 0 < gate["runs"]["lockstep"]["ir"] < 1
    assert gate["gate_agreement"] == gate["action_agreement"] == 1.0
    assert gate["steps_compared"] > 0 and gate["episodes_parted"] == 0
    exact = data["exact_fp32"]  # the exact check: the tests' tiny hybrid in fp32
    assert exact["prompts"]["distinct_lengths"] > 1
    for kind in ("lean", "choices"):
        for other in ("padded", "one_at_a_time"):
            assert exact[kind][other]["agreement"] == 1.0, (kind, other)
    assert exact["choices"]["padded"]["max_abs_dlogp"] < 1e-4
    assert gate["margin_bits"] > 0 and gate["calibration"]["half_gap_bits"] > 0
    t1 = data["table1"]
    assert t1["preset"] == "table1" and t1["cells_todo"] == t1["cells"] > 0
    assert t1["cells_invalid"] == 0 and t1["cells_stand_in"] > 0  # no Qwen3.5 weights here
    assert t1["seconds"] == pytest.approx(t1["lm_seconds"] + t1["loop_seconds"])
    assert t1["lm_calls"] > 0 and t1["lm_seconds"] > 0 and t1["cells_without_rate"] == 0
    table = {c["name"]: c for c in data["table"]}
    budget = table["whole GPU benchmark"]
    assert budget["target"] == 480.0 and budget["status"] == "PASS"
    out = proc.stdout
    for figure in (
        "decisions/s at IR 0",
        "decisions/s at IR 1 generate",
        "decisions/s at IR 1 choices",
        "prefill ms/query at batch 4 (generate)",
        "decode ms/query at batch 4 (generate)",
        "memory (peak RSS",
        "projected Table 1 time",
        "linear_attention layers: causal_conv1d_fn=reference",
        "full_attention layers: attention=sdpa",
        "same gate decisions up to each episode's first differing action",
        "tiny hybrid choices: padded vs by_length: max |delta log-prob| (float32)",
        "make install-gpu",
    ):
        assert figure in out, figure


@pytest.mark.slow  # the smoke run's CPU dry run (~15 s)
def test_gpu_smoke_dry_run_runs_every_check_and_writes_its_json(tmp_path):
    """`make gpu-smoke ARGS="--device cpu"`: every section runs (kernels, sdpa, padded with cuDNN
    on and off, prefill at CPU-sized shapes, said so), every check passes, one JSON."""
    proc = _bench(tmp_path, "gpu-smoke", "--device", "cpu", timeout=300)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    data = _report(tmp_path, "*-gpu-smoke-dryrun.json")
    assert data["dry_run"] is True and data["failed"] == [] and data["wall_seconds"] < 180
    s = data["sections"]
    assert set(s) == {"kernels", "sdpa", "padded", "prefill"}
    assert s["kernels"]["skipped"] is True and s["kernels"]["swapped"] == 0  # no fla here
    assert set(s["kernels"]["layer_kernels"]) == {"linear_attention", "full_attention"}
    assert s["sdpa"]["backend"] and s["sdpa"]["real_rows_finite"] is True
    for label in ("cudnn on", "cudnn off"):
        for kind in ("lean", "choices"):
            for other in ("padded", "one_at_a_time"):
                r = s["padded"][label][kind][other]
                assert r["finite"] and r["agreement"] >= 0.95, (label, kind, other)
        assert s["padded"][label]["choices"]["padded"]["max_abs_dlogp"] < 0.05
    p = s["prefill"]
    assert (p["batch"], p["tokens"]) == (4, 750) and p["logits_finite"] and p["seconds"] > 0
    names = {c["name"] for c in data["table"]}
    assert (
        "tiny hybrid bf16, cudnn off, choices: padded vs by_length: max |delta log-prob| "
        "(bfloat16)" in names
    )
    out = proc.stdout
    for line in (
        "kernels: linear_attention layers:",
        "fast vs reference SKIPPED",
        "sdpa: bf16, head dim 256",
        "CPU-sized",
        "every check passed",
    ):
        assert line in out, line


@pytest.mark.slow  # a bench subprocess stopped by its budget (~15 s)
def test_gpu_bench_budget_is_enforced_and_names_the_section(tmp_path):
    proc = _bench(tmp_path, "gpu", "--device", "cpu", "--quick", "--budget-s", "4", timeout=120)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "time budget of 4 s ran out in section" in proc.stderr
    data = _report(tmp_path, "*-gpu-dryrun.json")
    assert "ran out in section '" in data["budget_exceeded"]  # the section that was running
    assert {c["name"]: c for c in data["table"]}["whole GPU benchmark"]["status"] == "MISS"


@pytest.mark.slow  # a bench subprocess (~2 s)
def test_gpu_bench_without_cuda_exits_with_code_2(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the no-GPU exit path cannot be observed")
    proc = _bench(tmp_path, "gpu", timeout=120)
    assert proc.returncode == 2
    assert "no CUDA device" in proc.stderr and "--device cpu" in proc.stderr


def test_a_reference_kernel_is_an_error_on_cuda_naming_layer_kernel_and_install():
    """The kernels each Qwen3.5 layer type runs, read from the model (reference code here: no
    fla, no causal-conv1d); on CUDA that is `make bench-gpu`'s error, naming all three."""
    from benchmark.bench.qwen_shapes import build_model
    from benchmark.consultants.kernels import GPU_INSTALL, layer_kernels, reference_kernel_error

    model = build_model("qwen3.5-2b", "cpu", "float32", tiny_shapes=True)
    layers = layer_kernels(model)
    assert layers["full_attention"] == {"attention": "sdpa"}
    assert layers["linear_attention"]["chunk_gated_delta_rule"] == "reference"
    error = reference_kernel_error("qwen3.5-2b", layers)
    assert error.startswith("qwen3.5-2b on CUDA: linear_attention layers run causal_conv1d_fn")
    assert "chunk_gated_delta_rule" in error and error.endswith(f"with: {GPU_INSTALL}")
    assert GPU_INSTALL == "make install-gpu"  # the documented one-line GPU install
    assert "full_attention" not in error
    fast = {"linear_attention": {"chunk_gated_delta_rule": "fla"}, "full_attention": {}}
    assert reference_kernel_error("qwen3.5-2b", fast) is None


def test_gate_check_tau_is_the_midpoint_of_the_widest_inner_gap():
    import numpy as np

    from benchmark.bench.gpu_ask import gap_tau

    # the widest gap overall (0.1 -> 0.9) is outside the middle quantiles; 1.2 -> 1.4 is inside
    values = np.array([0.1, 0.9, 1.0, 1.1, 1.2, 1.4, 1.45, 1.5, 1.55, 1.58, 1.585])
    tau, half = gap_tau(values)
    assert tau == pytest.approx(1.3) and half == pytest.approx(0.1)
    with pytest.raises(ValueError, match="two distinct entropies"):
        gap_tau(np.full(5, 1.585))


def test_deadline_stops_the_running_section_with_its_name():
    import time

    from benchmark.bench.common import BudgetExceeded, Deadline

    with pytest.raises(BudgetExceeded, match="ran out in section 'spin'"):
        with Deadline(0.2, "test") as clock:
            clock.section("spin")
            while True:
                time.sleep(0.01)
    with Deadline(5.0) as clock:  # finished in time: nothing raised, the timer is off after
        clock.section("quick")
    time.sleep(0.05)
    with pytest.raises(ValueError, match="> 0"):
        Deadline(0)
    # the alarm inside a library that wraps it (transformers' lazy import: ModuleNotFoundError
    # from it) is still the budget's stop, so the bench exits with the budget's code
    with pytest.raises(BudgetExceeded, match="ran out in section 'import'"):
        with Deadline(0.2, "test") as clock:
            clock.section("import")
            try:
                while True:
                    time.sleep(0.01)
            except BudgetExceeded as exc:
                raise ModuleNotFoundError("Could not import module 'Qwen3_5ForCausalLM'") from exc
    with pytest.raises(KeyError):  # any other error passes through unchanged
        with Deadline(5.0):
            raise KeyError("x")


def test_table1_projection_divides_each_cells_work_by_its_models_rate():
    from benchmark.bench.gpu_projection import project

    def cell(slm, lm, steps, calls):
        work = {"episodes": 100, "tuning_episodes": 0, "max_steps": steps, "calls": calls}
        return {"slm": slm, "lm": lm, "status": "pending", "work": {**work, "basis": "bound: IR 1"}}

    plan = {
        "cells": [
            cell("qwen3.5-2b", True, 1000, 1000),
            cell("qwen3.5-4b", True, 1000, 400),
            cell(None, False, 500, 0),
            {"slm": "qwen3.5-2b", "lm": True, "work": None, "status": "complete"},
        ],
        "totals": {"policy_not_trained": 2},
    }
    rates = {"qwen3.5-2b": {"ir0": 100.0, "ir1": 10.0}, "qwen3.5-4b": {"ir0": 50.0, "ir1": 4.0}}
    p = project(plan, rates)
    assert p["cells_todo"] == 3 and p["cells"] == 4 and p["policies_not_trained"] == 2
    assert p["lm_seconds"] == pytest.approx(1000 / 10 + 400 / 4)
    assert p["loop_seconds"] == pytest.approx((600 + 500) / 100)  # the faster IR-0 rate
    assert p["max_steps"] == 2500 and p["lm_calls"] == 1400 and p["basis"] == ["bound"]
    assert project(plan, {"qwen3.5-2b": rates["qwen3.5-2b"]})["cells_without_rate"] == 1


def test_qwen35_shapes_follow_the_published_architecture():
    from benchmark.bench.qwen_shapes import build_model, text_config

    two, four = text_config("qwen3.5-2b"), text_config("qwen3.5-4b")
    assert (two.hidden_size, two.num_hidden_layers, four.hidden_size, four.num_hidden_layers) == (
        2048,
        24,
        2560,
        32,
    )
    assert four.layer_types.count("full_attention") == 8  # 3:1 DeltaNet : full attention
    model = build_model("qwen3.5-4b", "cpu", "float32", tiny_shapes=True)
    assert model.config.vocab_size == 248320
    assert model.config.layer_types == (["linear_attention"] * 3 + ["full_attention"]) * 2
    with pytest.raises(ValueError, match="allowed"):
        text_config("qwen3.5-9b")
