"""Padded batches cannot give NaN silently (benchmark.consultants.finite, .attention): some GPU
SDPA kernels (cuDNN) return NaN for a query row that every key is masked from, as the pad rows
of a left-padded prefill are; in the hybrid Qwen3.5 that NaN would enter the next
linear-attention layer's state and every later token of the row. Emulated here with an SDPA that
NaNs fully masked rows, on the tests' tiny hybrid (8 layers, full attention at layers 3 and 7):
padded batches give by_length's answers and finite scores on every path (lean decode, generate,
choice scoring). And where logits do come out non-finite, every path raises a ConsultantError
naming the batch instead of answering."""

from __future__ import annotations

import dataclasses
import re

import pytest

from benchmark.consultants.errors import ConsultantError
from benchmark.consultants.hf import HFConsultant
from tests.consultants.test_prefix import ask_queries

NEW = 4  # greedy tokens per answer


def nan_for_fully_masked_rows(sdpa):
    """`sdpa` (torch's scaled_dot_product_attention), except that a query row whose mask allows
    no key comes out NaN, as cuDNN's kernel returns it (torch's CPU kernels return 0 there)."""
    import torch

    def wrapped(query, key, value, attn_mask=None, *args, **kwargs):
        out = sdpa(query, key, value, attn_mask, *args, **kwargs)
        if attn_mask is None:
            return out
        if attn_mask.dtype == torch.bool:
            dead = ~attn_mask.any(-1)
        else:
            dead = (attn_mask <= torch.finfo(attn_mask.dtype).min).all(-1)
        return out.masked_fill(dead.unsqueeze(-1), float("nan"))

    return wrapped


@pytest.fixture
def nan_sdpa(monkeypatch):
    import torch

    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(
        torch.nn.functional, "scaled_dot_product_attention", nan_for_fully_masked_rows(sdpa)
    )


@pytest.fixture(scope="module")
def hybrid(tiny_model):
    """The tiny hybrid batched "padded" (lean loop; generate()) and "by_length" (the reference:
    no padding, no mask)."""
    import torch

    threads = torch.get_num_threads()
    path = str(tiny_model("hybrid"))
    common = dict(path=path, num_threads=1, max_batch_size=16)
    padded = HFConsultant(**common, batching="padded")
    generate = HFConsultant(**common, batching="padded", lean_max_new_tokens=0)
    by_length = HFConsultant(**common, batching="by_length")
    yield padded, generate, by_length
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def queries(tmp_path_factory):
    """8 first consultations (enriched prompt, fourrooms): mixed lengths, so most rows are padded."""
    qs = ask_queries(tmp_path_factory.mktemp("finite"), "fourrooms", "enriched", n=8)
    return [
        dataclasses.replace(q, decoding=dataclasses.replace(q.decoding, max_new_tokens=NEW))
        for q in qs
    ]


def with_decoding(queries, **changes):
    return [
        dataclasses.replace(q, decoding=dataclasses.replace(q.decoding, **changes)) for q in queries
    ]


def test_the_tiny_hybrid_has_full_attention_before_linear_attention(hybrid):
    types = hybrid[0].model.config.layer_types
    assert len(types) == 8
    assert [i for i, t in enumerate(types) if t == "full_attention"] == [3, 7]


def test_padded_batches_stay_finite_when_sdpa_nans_fully_masked_rows(hybrid, queries, nan_sdpa):
    """On today's main (no zeroing of masked rows) every padded row's choice scores were NaN and
    its greedy tokens 0, and nothing raised."""
    import math

    padded, generate, by_length = hybrid
    lengths = [len(padded.encode(q)) for q in queries]
    assert sum(n < max(lengths) for n in lengths) >= 4  # most rows carry left padding
    scored = with_decoding(queries, mode="choices")
    got = padded.choice_logprobs(scored)
    want = by_length.choice_logprobs(scored)
    for (u, _, _), (v, _, _) in zip(got, want, strict=True):
        assert all(math.isfinite(x) for x in u)
        assert u == pytest.approx(v, abs=1e-4)
    reference = [g.new_ids for g in by_length.generate(queries)]
    assert [g.new_ids for g in padded.generate(queries)] == reference  # the lean loop
    assert [g.new_ids for g in generate.generate(queries)] == reference  # generate()


def poison_row(model: HFConsultant, row: int):
    """A forward hook that makes the logits of batch row `row` NaN (where the batch has it)."""

    def hook(module, args, output):
        if output.logits.shape[0] > row:
            output.logits[row] = float("nan")
        return output

    return model.model.register_forward_hook(hook)


@pytest.mark.parametrize("path", ["lean", "generate", "choices"])
def test_non_finite_logits_raise_naming_the_batch(tiny_model, queries, path):
    """Whatever makes them NaN, no path answers from NaN logits: each raises a ConsultantError
    that names the path, the batch (its size and prompt lengths) and the bad rows."""
    model = HFConsultant(
        path=str(tiny_model()),
        num_threads=1,
        batching="padded",
        lean_max_new_tokens=0 if path == "generate" else 16,
    )
    batch = with_decoding(queries[:4], mode="choices") if path == "choices" else queries[:4]
    handle = poison_row(model, 1)
    try:
        with pytest.raises(ConsultantError, match="non-finite logits") as info:
            model.answer(batch)
    finally:
        handle.remove()
    message = str(info.value)
    assert {"lean": "lean decode", "generate": "generate", "choices": "choice scoring"}[
        path
    ] in message
    assert "batch of 4" in message and "batching=padded" in message
    assert re.search(r"in [1-4] of 4 rows", message)
    clean = model.answer(batch)  # the hook removed: the same batch answers
    assert len(clean) == 4
