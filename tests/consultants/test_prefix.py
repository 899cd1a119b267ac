"""Prefix reuse in the hf backend: greedy answers are token for token those of the plain
left-padded path (batched and unbatched, prompts of different lengths, thinking phases), a stored
prefix serves later batches, the LRU stays bounded, and the reuse mode follows the cache's layers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmark.consultants.base import Decoding, Query
from benchmark.consultants.hf import HFConsultant
from benchmark.consultants.prefix import PrefixCache, prefix_reuse_mode
from tests.conftest import compose_cfg


@pytest.fixture(scope="module")
def pair(tiny_model):
    """The tiny model twice: prefix reuse on (the default) and off, both through generate() (the
    lean decode loop: tests/consultants/test_choices.py)."""
    import torch

    threads = torch.get_num_threads()
    path = str(tiny_model())
    on = HFConsultant(path=path, num_threads=1, lean_max_new_tokens=0)  # generate()
    off = HFConsultant(path=path, num_threads=1, prefix_cache=0, lean_max_new_tokens=0)
    yield on, off
    torch.set_num_threads(threads)


def ask_queries(root, env: str, prompt: str, *overrides: str, n: int = 8) -> list[Query]:
    """The first consultation of n episodes (seeds 0..n-1) with a real prompt variant, without a
    repetition penalty (the suite's; tests add one where they test it)."""
    from benchmark.build import build_prompt, prepare

    cfg = compose_cfg(
        root, f"env={env}", "slm=tiny", f"prompt={prompt}", "gate=always",
        "slm.decoding.repetition_penalty=1.0",
        *overrides,
    )  # fmt: skip
    task = prepare(cfg)[0]
    variant = build_prompt(cfg, task)
    out: list[Query] = []
    for seed in range(n):
        out += next(variant.session(task.episode(seed), False).consult(0))
    return out


def new_ids(model: HFConsultant, queries: list[Query]) -> list[list[int]]:
    return [g.new_ids for g in model.generate(queries)]


CASES = [
    ("fourrooms", "basic", ()),
    ("fourrooms", "stateful", ("prompt.rationale=true",)),  # thinking: two generate phases
    ("higherlower", "enriched", ()),
    ("doorkey8", "belief", ()),
    ("empty16x16", "hwbp", ()),
]


@pytest.mark.slow
@pytest.mark.parametrize(("env", "prompt", "overrides"), CASES)
def test_greedy_answers_identical_with_and_without_reuse(pair, tmp_path, env, prompt, overrides):
    on, off = pair
    queries = ask_queries(tmp_path, env, prompt, *overrides)
    reference = new_ids(off, queries)
    assert new_ids(on, queries) == reference  # batched: [prefix | left padding | suffix]
    assert [new_ids(on, [q])[0] for q in queries] == reference  # unbatched
    assert new_ids(on, queries[::-1])[::-1] == reference  # the next step: a stored prefix
    texts = [g.text for g in on.generate(queries)]
    assert texts == [g.text for g in off.generate(queries)]


def test_left_padding_and_mixed_prefixes(pair, tmp_path):
    """Prompts of different lengths, two system messages and a one-message prompt in one call,
    in batches of 3 (so chunks mix lengths): identical tokens, and rows really were padded."""
    on, off = pair
    grid = ask_queries(tmp_path, "fourrooms", "basic", n=5)
    cards = ask_queries(tmp_path, "higherlower", "basic", n=3)
    single = Query(
        [{"role": "user", "content": grid[0].messages[0]["content"] + "\nFORWARD?"}],
        grid[0].actions,
        grid[0].render_answer,
        Decoding(max_new_tokens=8),
    )
    queries = [grid[0], cards[0], grid[1], single, grid[2], cards[1], grid[3], cards[2], grid[4]]
    lengths = {len(on.encode(q)) for q in queries}
    assert len(lengths) > 3  # left padding is exercised
    reference = new_ids(off, queries)
    small_on = HFConsultant.__new__(HFConsultant)
    small_on.__dict__.update(on.__dict__)
    small_on.max_batch_size = 3
    assert new_ids(small_on, queries) == reference
    assert new_ids(on, queries) == reference


def test_stored_prefix_serves_later_calls_and_counts_prefill(pair, tmp_path):
    on, off = pair
    on.prefix_cache.clear()
    on.reset_prefill_stats()
    off.reset_prefill_stats()
    queries = ask_queries(tmp_path, "fourrooms", "basic")
    anchor = on.prompt(queries[0]).anchor
    system = on.tokenizer.apply_chat_template(queries[0].messages[:1], tokenize=False)
    assert anchor == len(on.tokenizer(system, add_special_tokens=False)["input_ids"]) > 100
    new_ids(on, queries)
    first = on.prefill_stats()
    assert first["prefix_misses"] == 1 and len(on.prefix_cache.entries) == 1
    new_ids(on, queries[:3])  # a later step: the system prefix is found
    new_ids(on, queries[5:6])  # sequential evaluation: one query, the same prefix
    stats = on.prefill_stats()
    assert stats["prefix_misses"] == 1 and stats["prefix_hits"] == 2
    new_ids(off, queries)
    plain = off.prefill_stats()
    assert (
        plain["prefill_tokens"]
        == plain["prefill_tokens_without_reuse"]
        == first["prefill_tokens_without_reuse"]
    )
    assert first["prefill_tokens"] < 0.7 * plain["prefill_tokens"]
    assert (
        first["prompt_tokens"] == plain["prompt_tokens"] == sum(len(on.encode(q)) for q in queries)
    )


def test_lru_is_bounded():
    lru = PrefixCache(2)
    for key in ([1, 2], [1, 2, 3], [7, 8]):
        lru.put(key, object())
    assert list(lru.entries) == [(1, 2, 3), (7, 8)]
    assert lru.longest([1, 2, 3, 4], limit=3)[0] == 3
    assert lru.longest([1, 2, 3, 4], limit=2) == (0, None)  # (1, 2) was evicted
    lru.put([9], object())
    assert (7, 8) not in lru.entries  # (1, 2, 3) was used last
    assert PrefixCache(0).put([1], object()) is None and not PrefixCache(0).entries


def test_reuse_modes_follow_the_cache_layers(pair):
    """Full attention: any padding layout; Qwen3.5's hybrid cache: only without padding after the
    prefix (tests/consultants/test_hybrid_prefix.py); a sliding window: none."""
    from transformers import Qwen2Config

    from benchmark.bench.qwen_shapes import text_config

    assert pair[0].reuses_prefixes and prefix_reuse_mode(pair[0].model) == "padded"
    hybrid = SimpleNamespace(config=text_config("qwen3.5-2b", tiny_shapes=True))
    assert prefix_reuse_mode(hybrid) == "unpadded"  # Gated DeltaNet layers would see the padding
    sliding = Qwen2Config(
        num_hidden_layers=2, use_sliding_window=True, sliding_window=8, max_window_layers=0
    )
    assert prefix_reuse_mode(SimpleNamespace(config=sliding)) is None


def test_negative_prefix_cache_fails(tiny_model):
    from benchmark.consultants import ConsultantError

    path = str(tiny_model())
    with pytest.raises(ConsultantError, match="prefix_cache"):
        HFConsultant(path=path, prefix_cache=-1)
