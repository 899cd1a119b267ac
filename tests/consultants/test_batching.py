"""Batching across prompt lengths (`slm.backend.batching`) in the hf backend, on the tiny model and
the tiny Qwen3.5 hybrid, fp32: "padded" serves 64 prompts of mixed lengths in one left-padded
prefill and one forward per new token (counted on the real model's forward), "by_length" in one
forward per length and step; both give generate's greedy tokens, choice scoring the same
answers and scores, with and without a repetition penalty; `auto` decides by device; the setting
stays out of cell identities."""

from __future__ import annotations

import dataclasses

import pytest

from benchmark.consultants.errors import ConsultantError
from benchmark.consultants.hf import HFConsultant
from benchmark.consultants.prefix import resolve_batching
from tests.consultants.test_choices import ARCHITECTURES
from tests.consultants.test_prefix import ask_queries

NEW = 6  # greedy tokens per answer: the lean loop (<= lean_max_new_tokens)


@pytest.fixture(scope="module", params=["qwen3", pytest.param("qwen3.5", marks=pytest.mark.slow)])
def models(request, tiny_model):
    """(padded, by_length, plain generate without reuse) on one tiny model, batches of 64."""
    import torch

    threads = torch.get_num_threads()
    path = str(tiny_model(ARCHITECTURES[request.param]))
    common = dict(path=path, num_threads=1, max_batch_size=64)
    padded = HFConsultant(**common, batching="padded")
    by_length = HFConsultant(**common, batching="by_length")
    plain = HFConsultant(**common, prefix_cache=0, lean_max_new_tokens=0)
    yield padded, by_length, plain
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def queries(tmp_path_factory):
    """64 first consultations (enriched prompt, fourrooms): one system message, mixed lengths."""
    qs = ask_queries(tmp_path_factory.mktemp("batching"), "fourrooms", "enriched", n=64)
    return [
        dataclasses.replace(q, decoding=dataclasses.replace(q.decoding, max_new_tokens=NEW))
        for q in qs
    ]


def counting(model: HFConsultant) -> list[int]:
    """A counter of the model's forward calls (a hook on the real transformers module)."""
    calls = [0]
    model.model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def forwards(model: HFConsultant, calls: list[int], fn, *args):
    calls[0] = 0
    model.prefix_cache.clear()
    out = fn(*args)
    return out, calls[0]


def with_decoding(queries, **changes):
    return [
        dataclasses.replace(q, decoding=dataclasses.replace(q.decoding, **changes)) for q in queries
    ]


def test_mixed_lengths_take_a_constant_number_of_forwards(models, queries):
    padded, by_length, plain = models
    lengths = {len(padded.encode(q)) for q in queries}
    assert len(queries) == 64 and len(lengths) >= 8
    reference = [g.new_ids for g in plain.generate(queries)]
    assert sum(len(r) == NEW for r in reference) > 32  # most rows decode every step
    gen_padded, n_padded = forwards(padded, counting(padded), padded.generate, queries)
    gen_length, n_length = forwards(by_length, counting(by_length), by_length.generate, queries)
    assert [g.new_ids for g in gen_padded] == reference
    assert [g.new_ids for g in gen_length] == reference
    # the stored prefix and the batch's shared tokens (attention-only model), the prefill, then
    # one forward per new token after the first: independent of how many lengths the batch has
    assert n_padded <= NEW + 2
    assert n_length >= len(lengths) * 2  # a prefill and decode steps per length


def test_choice_scoring_is_one_prefill_and_one_forward_of_the_actions(models, queries):
    padded, by_length, _ = models
    scored = with_decoding(queries, mode="choices")
    a, n_padded = forwards(padded, counting(padded), padded.answer, scored)
    b, n_length = forwards(by_length, counting(by_length), by_length.answer, scored)
    assert n_padded <= 4  # stored prefix, shared tokens, prefill, the actions' later tokens
    assert n_length > len({len(padded.encode(q)) for q in queries})
    for x, y in zip(a, b, strict=True):
        assert x.text == y.text
        assert x.choices == pytest.approx(y.choices, abs=1e-5)
    logp_a = [v for v, _, _ in padded.choice_logprobs(scored[:8])]
    logp_b = [v for v, _, _ in by_length.choice_logprobs(scored[:8])]
    for u, v in zip(logp_a, logp_b, strict=True):
        assert u == pytest.approx(v, abs=1e-4)


def test_repetition_penalty_stays_exact_when_padded(models, queries):
    padded, by_length, plain = models
    penalized = with_decoding(queries[:24], repetition_penalty=1.3)
    reference = [g.new_ids for g in plain.generate(penalized)]
    assert [g.new_ids for g in padded.generate(penalized)] == reference
    scored = with_decoding(penalized, mode="choices")
    for u, v in zip(padded.choice_logprobs(scored), by_length.choice_logprobs(scored), strict=True):
        assert u[0] == pytest.approx(v[0], abs=1e-4)


def test_generate_path_batches_a_hybrid_model_without_per_length_prefills(models, queries):
    """Answers longer than the lean loop's limit go through generate(): a hybrid model batched
    "padded" then prefills rows of different lengths in one forward (no stacked per-length
    states), an attention-only one on the stored prefix as before; the tokens stay plain
    generate's."""
    padded, by_length, plain = models
    few = queries[:16]
    reference = [g.new_ids for g in plain.generate(few)]
    calls = counting(padded)
    for model in (padded, by_length):
        model.lean_max_new_tokens = 0
    try:
        got, n = forwards(padded, calls, padded.generate, few)
        assert [g.new_ids for g in got] == reference
        assert [g.new_ids for g in by_length.generate(few)] == reference
    finally:
        for model in (padded, by_length):
            model.lean_max_new_tokens = 16
    assert n <= NEW + 2


def test_auto_decides_by_device_and_bad_values_fail(models):
    assert resolve_batching("auto", "cpu") == "by_length"
    assert resolve_batching("auto", "cuda") == "padded"
    assert resolve_batching("padded", "cpu") == "padded"
    for bad in ("pad", None, 1):
        with pytest.raises(ConsultantError, match=r"slm.backend.batching=.*one of"):
            resolve_batching(bad, "cpu")
    with pytest.raises(ConsultantError, match="slm.backend.batching='lengths'"):
        HFConsultant(path=models[0].model.name_or_path, batching="lengths")
    assert HFConsultant(path=models[0].model.name_or_path).batching == "by_length"  # this CPU


def test_batching_stays_out_of_the_cell_identity(tmp_path):
    from benchmark.cell import CellSpec
    from tests.conftest import compose_cfg

    def identity(*overrides: str) -> dict:
        cfg = compose_cfg(tmp_path, "env=fourrooms", "slm=tiny", "gate=always", *overrides)
        return CellSpec.from_config(cfg).with_inputs(model="m").identity

    plain = identity()
    assert identity("slm.backend.batching=padded") == plain
    assert identity("slm.backend.batching=by_length") == plain
