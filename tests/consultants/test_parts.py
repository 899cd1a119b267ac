"""The hf backend's parts, each on its own (no HFConsultant): the shared `ModelRuntime`, prefix
reuse (`PrefixReuse`), choice scoring (`ChoiceScorer`), the lean greedy loop (`LeanDecoder`)
and the generation loop with the thinking budget (`ThinkingGenerator`), built on the tiny model loaded with transformers, each checked against the model's plain
forward or `generate` on the same tokens. The backend's own tests (tests/consultants/test_prefix.py,
tests/consultants/test_choices.py, tests/consultants/test_batching.py) check the parts put
together."""

from __future__ import annotations

import dataclasses

import pytest

from benchmark.consultants import attention
from benchmark.consultants.base import Decoding, Query
from benchmark.consultants.choices import ChoiceScorer
from benchmark.consultants.errors import ConsultantError
from benchmark.consultants.generation import ThinkingGenerator
from benchmark.consultants.lean import LeanDecoder
from benchmark.consultants.prefix import PrefixReuse, Prompt
from benchmark.consultants.runtime import PREFILL_STATS, ModelRuntime, prompt_ids
from benchmark.consultants.tiny import build_tiny

SYSTEM = "You are a helpful assistant guiding an agent in a grid world. Answer with one action."
USERS = [
    "You see a wall ahead.",
    "The goal is two steps forward and one step right. Valid actions: TURN_LEFT, FORWARD.",
    "A key to the left.",
    "Walls are grey. A door is yellow.",
]
ACTIONS = ("TURN_LEFT", "TURN_RIGHT", "FORWARD", "PICKUP")


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    """The tiny model and its tokenizer, loaded as the backend loads them (float32, on the CPU,
    the suite's attention), in a runtime of their own."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    path = build_tiny(tmp_path_factory.getbasetemp() / "tiny-qwen3-s0", 0)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    attention.install(model)
    yield ModelRuntime(model, tokenizer, "tiny-parts")
    torch.set_num_threads(threads)


def queries() -> list[Query]:
    """One system message, user turns of different lengths."""
    return [
        Query([{"role": "system", "content": SYSTEM}, {"role": "user", "content": u}], ACTIONS,
              lambda a, r: a, Decoding(max_new_tokens=6, mode="choices"))
        for u in USERS
    ]  # fmt: skip


def ids_of(runtime: ModelRuntime, query: Query) -> list[int]:
    return prompt_ids(runtime.tokenizer, query.messages, query.decoding.enable_thinking)


def plain_logits(runtime: ModelRuntime, ids: list[int]):
    """Every position's logits [len(ids), V] of one unpadded forward without a cache."""
    import torch

    with torch.inference_mode():
        return runtime.model(input_ids=torch.tensor([ids])).logits[0].float()


def test_the_runtime_reads_the_stops_and_keeps_one_counter_dict(runtime):
    tok = runtime.tokenizer
    assert runtime.eos_ids[0] == tok.convert_tokens_to_ids("<|im_end|>")
    assert runtime.pad_id == tok.pad_token_id != runtime.eos_ids[0]
    assert runtime.generation_config.do_sample is False
    assert runtime.generation_config.eos_token_id == runtime.eos_ids
    assert runtime.cache_arg in ("cache", "past_key_values")
    stats = runtime.stats
    assert set(stats) == set(PREFILL_STATS)
    stats["prefix_hits"] += 3
    runtime.reset_stats()
    assert runtime.stats is stats and set(stats.values()) == {0}  # zeroed where the parts add


def test_prefix_reuse_prefills_each_row_as_its_own_forward(runtime):
    """Rows of different lengths on a stored system prefix, both batching modes: each row's last
    logits are its plain forward's; the anchor is the system message, stored once and then hit."""
    import torch

    qs = queries()
    seqs = [ids_of(runtime, q) for q in qs]
    assert len({len(s) for s in seqs}) > 2
    want = torch.stack([plain_logits(runtime, s)[-1] for s in seqs])
    for batching in ("by_length", "padded"):
        runtime.reset_stats()
        prefix = PrefixReuse(runtime, capacity=2, batching=batching)
        assert prefix.batching == batching and prefix.reuse_mode == "padded" and prefix.active
        rows = [Prompt(s, prefix.anchor(q, s)) for q, s in zip(qs, seqs, strict=True)]
        assert len({r.anchor for r in rows}) == 1  # the system turn, as the template opens it
        head = runtime.tokenizer.decode(seqs[0][: rows[0].anchor])
        assert head == f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
        for call in range(2):
            got = torch.zeros_like(want)
            with torch.inference_mode():  # as its callers run it (caches are deep-copied)
                groups = list(prefix.prefill_groups(seqs, rows))
            for members, _, last, mask in groups:
                got[members] = last.float()
                assert (mask is None) == (batching == "by_length")
            assert len(groups) == (1 if batching == "padded" else len({len(s) for s in seqs}))
            assert torch.allclose(got, want, atol=1e-5), (batching, call)
        assert runtime.stats["prefix_misses"] == 1  # the anchor, computed by the first call only
        assert runtime.stats["prefix_hits"] >= 1 and len(prefix.cache.entries) == 1
    off = PrefixReuse(runtime, capacity=0)
    assert not off.active and off.anchor(qs[0], seqs[0]) == 0
    assert off.shared_prefix(seqs, rows) == (0, None)
    with pytest.raises(ConsultantError, match=r"slm.backend.batching='lengths' is not one of"):
        PrefixReuse(runtime, capacity=2, batching="lengths")


def test_prefix_reuse_extends_a_cache_in_place(runtime):
    """`extend` on a cache of the first tokens gives the whole sequence's last logits, and the
    cache then holds every token; the tokens computed go into the runtime's counter."""
    import torch

    qs = queries()
    ids = ids_of(runtime, qs[1])
    prefix = PrefixReuse(runtime, capacity=1)
    runtime.reset_stats()
    cache = prefix.new_cache()
    with torch.inference_mode():
        prefix.extend(cache, [ids[:10]])
        last = prefix.extend(cache, [ids[10:]])
    assert cache.get_seq_length() == len(ids) == runtime.stats["prefill_tokens"]
    assert last.shape[0] == 1
    assert (last[0].float() - plain_logits(runtime, ids)[-1]).abs().max() < 1e-5


def test_choice_scorer_sums_each_actions_token_log_probabilities(runtime):
    """Every action's score is the sum of its continuation's log-probabilities after the prompt
    in one plain forward, batched with rows of different lengths or one prompt at a time, folded
    into the prefill or not; with a repetition penalty the scores move."""
    import torch

    qs = queries()
    scorer = ChoiceScorer(runtime, PrefixReuse(runtime, capacity=2))
    conts = [scorer.choice_ids(a) for a in ACTIONS]
    assert all(c[-1] == runtime.eos_ids[0] for c in conts)
    assert max(map(len, conts)) > 2  # later tokens are scored, not only the first
    prompts = [Prompt(ids_of(runtime, q)) for q in qs]
    want = []
    for p in prompts:
        row = []
        for c in conts:
            logp = torch.log_softmax(plain_logits(runtime, p.ids + c[:-1])[len(p.ids) - 1 :], -1)
            row.append(sum(float(logp[t, tok]) for t, tok in enumerate(c)))
        want.append(row)
    all_conts = [conts] * len(prompts)
    ones = [1.0] * len(prompts)
    for batch in (len(prompts), 1):
        got = scorer.logprobs(prompts, all_conts, ones, batch)
        for (values, n, seconds), p, w in zip(got, prompts, want, strict=True):
            assert n == len(p.ids) and seconds >= 0
            assert values == pytest.approx(w, abs=1e-4)
    folded = scorer.prefix.folds_choices
    scorer.prefix.folds_choices = not folded
    try:
        other = scorer.logprobs(prompts, all_conts, ones, len(prompts))
    finally:
        scorer.prefix.folds_choices = folded
    assert [v for v, _, _ in other] == [pytest.approx(w, abs=1e-4) for w in want]
    penalized = scorer.logprobs(prompts, all_conts, [1.5] * len(prompts), len(prompts))
    assert all(
        v != pytest.approx(w, abs=1e-3) for (v, _, _), w in zip(penalized, want, strict=True)
    )


def test_lean_decoder_gives_generates_greedy_tokens(runtime):
    """Rows of different lengths decoded by the lean loop are `generate`'s greedy tokens, each up
    to and including its stop; it takes only greedy answers within its cap."""
    import torch

    qs = queries()
    seqs = [ids_of(runtime, q) for q in qs]
    prefix = PrefixReuse(runtime, capacity=2)
    lean = LeanDecoder(runtime, prefix, max_new_tokens=8)
    assert lean.enabled and lean.takes(Decoding(), 8)
    assert not lean.takes(Decoding(), 9) and not lean.takes(Decoding(temperature=0.5), 4)
    assert not LeanDecoder(runtime, prefix, max_new_tokens=0).enabled
    rows = [Prompt(s, prefix.anchor(q, s)) for q, s in zip(qs, seqs, strict=True)]
    got = lean.decode(seqs, 8, runtime.eos_ids, rows)
    want = []
    for s in seqs:
        gc = runtime.generation_config
        with torch.inference_mode():
            out = runtime.model.generate(
                input_ids=torch.tensor([s]), generation_config=gc, max_new_tokens=8
            )
        new = out[0, len(s) :].tolist()
        cut = next((k for k, t in enumerate(new) if t in runtime.eos_ids), None)
        want.append(new if cut is None else new[: cut + 1])
    assert got == want
    assert any(len(w) > 1 for w in want)


def test_thinking_generator_gives_generates_tokens_and_closes_thinking(runtime):
    """The generation loop on its own (the lean loop off): greedy rows of different lengths are
    `generate`'s own tokens up to the stop; with a thinking budget, a block still open after it
    is closed with `</think>` and the answer's own tokens follow."""
    import torch

    qs = queries()
    seqs = [ids_of(runtime, q) for q in qs]
    prefix = PrefixReuse(runtime, capacity=2)
    generator = ThinkingGenerator(runtime, prefix, LeanDecoder(runtime, prefix, max_new_tokens=0))
    rows = [Prompt(s, prefix.anchor(q, s)) for q, s in zip(qs, seqs, strict=True)]
    got = [g.new_ids for g, _ in generator.run(rows, Decoding(max_new_tokens=8))]
    want = []
    for s in seqs:
        with torch.inference_mode():
            out = runtime.model.generate(
                input_ids=torch.tensor([s]), generation_config=runtime.generation_config,
                max_new_tokens=8,
            )  # fmt: skip
        new = out[0, len(s) :].tolist()
        cut = next((k for k, t in enumerate(new) if t in runtime.eos_ids), None)
        want.append(new if cut is None else new[: cut + 1])
    assert got == want
    thinking = Decoding(max_new_tokens=4, enable_thinking=True, thinking_budget=3)
    seqs = [prompt_ids(runtime.tokenizer, q.messages, True) for q in qs]
    rows = [Prompt(s, prefix.anchor(q, s)) for q, s in zip(qs, seqs, strict=True)]
    for g, seconds in generator.run(rows, thinking):
        assert generator.think_end in g.new_ids and g.thinking_tokens <= 3 and seconds > 0
        assert len(g.new_ids) <= 3 + len(generator.close_ids) + 4
        assert "</think>" not in g.text


def test_setup_composes_the_backend_on_a_model_built_elsewhere(runtime, tmp_path_factory):
    """The GPU bench's backend on a model it holds in memory (`HFConsultant.setup`) gets parts of
    its own and answers as the backend that loaded the same files: the same tokens, the same
    choice probabilities."""
    from benchmark.bench.gpu_consultant import InMemoryHF
    from benchmark.consultants.hf import HFConsultant

    path = build_tiny(tmp_path_factory.getbasetemp() / "tiny-qwen3-s0", 0)
    loaded = HFConsultant(path=str(path), num_threads=1)
    built = InMemoryHF(runtime.model, runtime.tokenizer, "in-memory", max_batch_size=2)
    assert built.identity == "in-memory" and built.max_batch_size == 2
    assert built.prefix is not loaded.prefix and built.scorer.prefix is built.prefix
    assert built.lean.runtime is built.runtime and built.batching == loaded.batching
    assert built.generator.lean is built.lean and built.close_ids == loaded.close_ids
    scored = queries()
    generated = [dataclasses.replace(q, decoding=Decoding(max_new_tokens=6)) for q in scored]
    want = [g.new_ids for g in loaded.generate(generated)]
    assert [g.new_ids for g in built.generate(generated)] == want
    for a, b in zip(built.answer(scored), loaded.answer(scored), strict=True):
        assert a.text == b.text and a.choices == pytest.approx(b.choices, abs=1e-6)
