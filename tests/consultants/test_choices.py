"""Choice scoring (slm.decoding.mode=choices), the lean greedy decode loop and the prefix-causal
attention of the hf backend, on the tiny model and the tiny Qwen3.5 hybrid: scores are
a plain forward pass's log-likelihoods, multi-token actions are scored whole, answers do not
depend on batching or on prefix reuse, the lean loop gives generate's tokens, and which queries
take choice scoring."""

from __future__ import annotations

import dataclasses
import math

import pytest

from benchmark.consultants.base import Decoding, Query, scores_choices
from benchmark.consultants.hf import HFConsultant
from tests.consultants.test_prefix import ask_queries

# the architectures the backend tests run on: the tiny model, the tiny hybrid (tiny_model kinds)
ARCHITECTURES = {"qwen3": "tiny", "qwen3.5": "hybrid"}


@pytest.fixture(scope="module", params=["qwen3", pytest.param("qwen3.5", marks=pytest.mark.slow)])
def models(request, tiny_model):
    """(reuse on, lean; reuse off, generate()) of the tiny model or the tiny hybrid."""
    import torch

    threads = torch.get_num_threads()
    path = str(tiny_model(ARCHITECTURES[request.param]))
    on = HFConsultant(path=path, num_threads=1)
    off = HFConsultant(path=path, num_threads=1, prefix_cache=0, lean_max_new_tokens=0)
    yield on, off
    torch.set_num_threads(threads)


def choice_queries(tmp_path, env: str = "fourrooms", n: int = 5) -> list[Query]:
    return ask_queries(tmp_path, env, "stateful", "slm.decoding.mode=choices", n=n)


def forward_logprob(model: HFConsultant, query: Query, action: str) -> float:
    """log p(action's continuation | prompt) from one plain forward pass over prompt + action."""
    return forward_logprob_of(model, query, model.choice_ids(action))


def forward_logprob_of(model: HFConsultant, query: Query, cont: list[int]) -> float:
    """log p(the tokens `cont` | prompt) from one plain forward pass over prompt + cont."""
    import torch

    prompt = model.encode(query)
    with torch.inference_mode():
        logits = model.model(input_ids=torch.tensor([prompt + cont])).logits[0]
    logp = torch.log_softmax(logits.float(), -1)
    return sum(float(logp[len(prompt) - 1 + t, c]) for t, c in enumerate(cont))


def test_scores_are_plain_forward_log_likelihoods_of_whole_actions(models, tmp_path):
    on, off = models
    queries = choice_queries(tmp_path, n=3)
    lengths = {len(on.choice_ids(a)) for a in queries[0].actions}
    assert len(lengths) > 1 and max(lengths) >= 3  # TURN_LEFT takes several tokens, FORWARD one
    for model in (on, off):
        for q, (logp, n, _) in zip(queries, model.choice_logprobs(queries), strict=True):
            assert n == len(model.encode(q))
            want = [forward_logprob(model, q, a) for a in q.actions]
            assert logp == pytest.approx(want, abs=1e-4)


def test_the_mean_score_ranks_by_log_likelihood_per_token(models, tmp_path):
    """choice_score=mean: an action's score is its continuation's log-likelihood over its token
    count; the answer and the probabilities over the valid set follow that score."""
    on, _ = models
    queries = [
        dataclasses.replace(q, decoding=dataclasses.replace(q.decoding, choice_score="mean"))
        for q in choice_queries(tmp_path, n=3)
    ]
    for q, answer in zip(queries, on.score_choices(queries), strict=True):
        per = [forward_logprob(on, q, a) / len(on.choice_ids(a)) for a in q.actions]
        weights = [math.exp(v - max(per)) for v in per]
        want = {a: w / sum(weights) for a, w in zip(q.actions, weights, strict=True)}
        assert answer.choices == pytest.approx(want, abs=1e-4)
        assert answer.text == q.actions[per.index(max(per))]


def test_the_mean_score_can_take_the_long_action_the_sum_passes_over():
    from benchmark.consultants.choices import choice_answer

    actions = ("go east", "take red potato from counter")
    logp = [-2.0, -3.0]  # the whole continuations: 2 and 6 tokens
    assert choice_answer(actions, logp, 10).text == "go east"
    mean = choice_answer(actions, logp, 10, tokens=[2, 6])  # -1.0 against -0.5 per token
    assert mean.text == "take red potato from counter"
    assert mean.choices[actions[1]] == pytest.approx(1 / (1 + math.exp(-0.5)))


def test_answers_do_not_depend_on_batching_or_prefix_reuse(models, tmp_path):
    on, off = models
    queries = choice_queries(tmp_path) + choice_queries(tmp_path, "fourrooms", n=2)[::-1]
    batched = on.answer(queries)
    for other in (off.answer(queries), [on.answer([q])[0] for q in queries]):
        for a, b in zip(batched, other, strict=True):
            assert a.text == b.text
            assert a.choices == pytest.approx(b.choices, abs=1e-6)
    for q, a in zip(queries, batched, strict=True):
        assert list(a.choices) == list(q.actions)  # every valid action, in the query's order
        assert sum(a.choices.values()) == pytest.approx(1.0)
        assert a.text == max(a.choices, key=a.choices.get) and a.generated_tokens == 0
        assert a.prompt_tokens == len(on.encode(q))


def test_lean_decode_gives_generates_tokens(models, tmp_path):
    """Short greedy answers (the lean loop) and a thinking phase (rationale) as generate gives
    them, batched with rows of different lengths and one by one."""
    on, off = models
    queries = ask_queries(tmp_path, "fourrooms", "stateful", n=4)
    queries += ask_queries(tmp_path, "higherlower", "enriched", n=2)
    queries += ask_queries(tmp_path, "fourrooms", "stateful", "prompt.rationale=true", n=2)
    assert on.lean.enabled and not off.lean.enabled
    reference = [g.new_ids for g in off.generate(queries)]
    assert len({len(on.encode(q)) for q in queries}) > 3
    before = on.prefill_stats()["decode_seconds"]
    assert [g.new_ids for g in on.generate(queries)] == reference
    assert on.prefill_stats()["decode_seconds"] > before  # the lean loop ran
    assert [on.generate([q])[0].new_ids for q in queries] == reference


def test_prefix_attention_equals_the_masked_one(models):
    """A suffix on a cached prefix, prefilled without the mask ("prefix_sdpa"), has the logits
    of the whole sequence's plain forward pass."""
    import torch

    on, _ = models
    ids = torch.randint(3, on.model.config.vocab_size, (2, 40))
    with torch.inference_mode():
        whole = on.model(input_ids=ids).logits[:, -1]
        cache = on.prefix.new_cache()
        on.model(input_ids=ids[:, :25], use_cache=True, **{on.runtime.cache_arg: cache})
        split = on.model(input_ids=ids[:, 25:], use_cache=True, **{on.runtime.cache_arg: cache})
    if on.device.type == "cpu" and on.kernels["attention"] == "sdpa":
        assert on.model.config._attn_implementation == "prefix_sdpa"
    assert torch.allclose(split.logits[:, -1], whole, atol=1e-5)


def test_which_queries_take_choice_scoring(tmp_path):
    plain = choice_queries(tmp_path, n=1)[0]
    assert scores_choices(plain)
    assert not scores_choices(dataclasses.replace(plain, decoding=Decoding()))  # generate mode
    rationale = ask_queries(tmp_path, "fourrooms", "stateful", "prompt.rationale=true", n=1)[0]
    rationale.decoding = dataclasses.replace(rationale.decoding, mode="choices")  # validation
    assert not scores_choices(rationale)  # thinking and a Reason line: generation (refuses it)
    belief = ask_queries(tmp_path, "doorkey8", "belief", "slm.decoding.mode=choices", n=1)[0]
    assert belief.decoding.mode == "choices" and not scores_choices(belief)  # a belief update


def test_bad_mode_and_sampled_choices_fail_clearly():
    with pytest.raises(ValueError, match="mode='vote'.*generate"):
        Decoding(mode="vote")
    with pytest.raises(ValueError, match="temperature=0"):
        Decoding(mode="choices", temperature=0.7)
    with pytest.raises(ValueError, match="choice_score='max'.*sum"):
        Decoding(mode="choices", choice_score="max")


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ("slm=openai", "slm.decoding.mode=choices", "slm.decoding.repetition_penalty=1.0"),
            "prompt_logprobs=true",
        ),
        (("slm=tiny", "slm.decoding.mode=vote"), "mode='vote' is invalid"),
        (
            ("slm=tiny", "slm.decoding.mode=choices", "slm.decoding.choice_score=max"),
            r"choice_score='max' is invalid: allowed \['sum', 'mean'\]",
        ),
        (("slm=tiny", "slm.decoding.choice_score=mean"), "with mode='generate' it changes nothing"),
        (("slm=tiny", "slm.decoding.mode=choices", "slm.decoding.temperature=0.5"), "temperature"),
        (  # a Reason line: choice scoring would silently fall back to generation
            ("slm=tiny", "slm.decoding.mode=choices", "prompt.rationale=true"),
            "slm.decoding.mode=choices cannot score any answer of prompt=stateful with "
            "prompt.rationale=true",
        ),
        (  # a JSON answer (the feedback paper's prompts)
            ("slm=tiny", "slm.decoding.mode=choices", "prompt=hwbp"),
            "slm.decoding.mode=choices cannot score any answer of prompt=hwbp:",
        ),
    ],
)
def test_validation_refuses_choices_where_they_cannot_run(tmp_path, overrides, expected):
    from benchmark.validate import validate
    from tests.conftest import compose_cfg

    cfg = compose_cfg(tmp_path, "env=fourrooms", "prompt=stateful", "gate=always", *overrides)
    with pytest.raises(ValueError, match=expected):
        validate(cfg)
    # a belief update generates, its action is scored: choices has a query to score
    validate(compose_cfg(tmp_path, "env=doorkey8", "prompt=belief", "gate=always",
                         "slm=tiny", "slm.decoding.mode=choices"))  # fmt: skip
    # PPO-only asks no consultant: its slm and prompt settings are not used
    validate(compose_cfg(tmp_path, "env=fourrooms", "gate=never", "slm=tiny",
                         "slm.decoding.mode=choices", "prompt.rationale=true"))  # fmt: skip
    ok = compose_cfg(tmp_path, "env=fourrooms", "slm=openai", "slm.decoding.mode=choices",
                     "slm.backend.prompt_logprobs=true",
                     "slm.decoding.repetition_penalty=1.0")  # fmt: skip
    validate(ok)


def test_mode_generate_leaves_identity_and_cache_keys_as_they_were(tmp_path):
    """The default mode is left out of the cell identity and the response cache's key (cells
    and cached answers from before the key existed stay valid); choices is a cell of its own."""
    from benchmark.cell import CellSpec
    from benchmark.consultants.cache import decoding_key
    from tests.conftest import compose_cfg

    def identity(*overrides: str) -> dict:
        cfg = compose_cfg(tmp_path, "env=fourrooms", "slm=tiny", "gate=always", *overrides)
        return CellSpec.from_config(cfg).with_inputs(model="m").identity

    plain, choices = identity(), identity("slm.decoding.mode=choices")
    cfg = compose_cfg(
        tmp_path, "env=fourrooms", "slm=tiny", "gate=always", "slm.decoding.mode=choices"
    )
    spec = CellSpec.from_config(cfg)
    assert spec.labels()["slm"] == "tiny+choices" and "/tiny+choices/" in spec.name
    assert "mode" not in plain["slm"]["decoding"] and "mode" not in plain["prompt"]["sampling"]
    assert choices["slm"]["decoding"]["mode"] == "choices" and plain != choices
    assert identity("slm.backend.lean_max_new_tokens=0") == plain  # an execution setting
    assert "mode" not in decoding_key(Decoding())
    assert decoding_key(Decoding(mode="choices"))["mode"] == "choices"
    # the per-token score: a cell of its own, the sum (the default) left out as mode is
    mean = identity("slm.decoding.mode=choices", "slm.decoding.choice_score=mean")
    assert "choice_score" not in choices["slm"]["decoding"]
    assert "choice_score" not in plain["slm"]["decoding"]
    assert mean["slm"]["decoding"]["choice_score"] == "mean" and mean != choices
    cfg.slm.decoding.choice_score = "mean"
    assert CellSpec.from_config(cfg).labels()["slm"] == "tiny+choices-mean"
    assert "choice_score" not in decoding_key(Decoding(mode="choices"))
    assert decoding_key(Decoding(mode="choices", choice_score="mean"))["choice_score"] == "mean"


def test_step_records_carry_the_choice_probabilities_only_when_scored(tmp_path):
    from benchmark.analysis.steps import step_record
    from benchmark.build import prepare
    from benchmark.consultants.base import Answer
    from benchmark.evaluate import StepEvent
    from benchmark.prompts.base import Decision
    from tests.conftest import compose_cfg

    task = prepare(compose_cfg(tmp_path, "env=fourrooms", "slm=tiny", "gate=always"))[0]
    ep = task.episode(0)
    probs = {"TURN_LEFT": 0.25, "TURN_RIGHT": 0.25, "FORWARD": 0.5}
    scored = Decision(2, [Answer("FORWARD", choices=probs)])
    record = step_record(StepEvent(ep, None, None, scored, 2))
    assert record["consultant_probs"] == probs and record["consultant"] == 2
    generated = step_record(StepEvent(ep, None, None, Decision(2, [Answer("FORWARD")]), 2))
    assert "consultant_probs" not in generated  # earlier records stay byte-identical


@pytest.mark.parametrize("prefix,suffix", [(7, 5), (300, 256), (40, 600)])
def test_prefix_sdpa_equals_masked_sdpa_in_blocks(prefix, suffix):
    """The split attention (blocks of BLOCK query rows: earlier keys unmasked, own block causal,
    merged by log-sum-exp) equals sdpa with the explicit bottom-right causal mask, for a suffix
    shorter than a block, exactly one block, and several blocks with a ragged last one, with
    grouped key/value heads."""
    import torch
    import torch.nn.functional as F

    from benchmark.consultants import attention

    assert suffix <= attention.BLOCK or suffix % attention.BLOCK  # (40, 600): ragged blocks
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, suffix, 16, generator=gen)
    k, v = (torch.randn(2, 2, prefix + suffix, 16, generator=gen) for _ in range(2))
    module = type("Attn", (), {"num_key_value_groups": 2, "is_causal": True})()
    out, _ = attention.prefix_sdpa_attention(module, q, k, v, None, scaling=0.25)
    mask = torch.ones(suffix, prefix + suffix, dtype=torch.bool).tril(prefix)
    kk, vv = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    want = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, scale=0.25).transpose(1, 2)
    assert out.shape == want.shape == (2, suffix, 4, 16)
    assert torch.allclose(out, want, atol=1e-5)


def test_folded_scoring_equals_a_separate_forward(models, tmp_path):
    """Choice scoring with the actions' tokens in the prefill's own forward (branches after the
    prompt, each blind to the others) gives the scores of the unfolded path (prefill, then one
    forward over the actions on the prompt's cache), in one forward per length group instead of
    two. The hybrid model (recurrent layers) never folds."""
    on, off = models
    queries = choice_queries(tmp_path, n=4)
    assert on.prefix.folds_choices == off.prefix.folds_choices == (on.reuse_mode == "padded")
    if not on.prefix.folds_choices:
        return
    on.choice_logprobs(queries)  # the stored prefix computed once, before counting
    calls = []
    hook = on.model.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        folded = on.choice_logprobs(queries)
        n_folded = len(calls)
        on.prefix.folds_choices = False
        calls.clear()
        plain = on.choice_logprobs(queries)
        n_plain = len(calls)
    finally:
        on.prefix.folds_choices = True
        hook.remove()
    groups = len({len(on.encode(q)) for q in queries})  # equal-length prompts share a forward
    assert 1 < groups < len(queries) and n_plain == n_folded + groups
    for (a, n, _), (b, m, _) in zip(folded, plain, strict=True):
        assert n == m and a == pytest.approx(b, abs=1e-5)


def test_branched_attention_equals_one_masked_attention_per_branch():
    """Branches after a shared context (the actions after the prompt): each branch row attends
    to the whole context and causally to its own branch only, as if every branch ran alone."""
    import torch
    import torch.nn.functional as F

    from benchmark.consultants.attention import branched_attention

    gen = torch.Generator().manual_seed(1)
    lengths, context = [3, 1, 2], 9
    q = torch.randn(2, 4, sum(lengths), 16, generator=gen)
    k, v = (torch.randn(2, 4, context, 16, generator=gen) for _ in range(2))
    own_k, own_v = (torch.randn(2, 4, sum(lengths), 16, generator=gen) for _ in range(2))
    out = branched_attention(q, k, v, own_k, own_v, lengths, 0.25)
    start = 0
    for n in lengths:
        rows = slice(start, start + n)
        keys = torch.cat([k, own_k[:, :, rows]], dim=2)
        values = torch.cat([v, own_v[:, :, rows]], dim=2)
        mask = torch.ones(n, context + n, dtype=torch.bool).tril(context)
        alone = F.scaled_dot_product_attention(
            q[:, :, rows], keys, values, attn_mask=mask, scale=0.25
        )
        assert torch.allclose(out[:, rows], alone.transpose(1, 2), atol=1e-5)
        start += n


@pytest.mark.slow  # about 20 s: 50 small training steps
def test_the_best_choice_is_greedy_generations_answer_where_it_must_be(tmp_path, tiny_model):
    """Choice scoring against greedy generation on real prompts (HigherLower: two actions;
    DoorKey: seven, of 2 to 5 tokens each). The two legitimately differ in general: greedy picks
    the likeliest token at each step, choice scoring the likeliest whole continuation (action
    tokens + end of answer), and the random tiny model's greedy text is no action at all. They
    must agree where greedy's answer is exactly an action A (its tokens, then the end token) and
    that continuation has probability > 1/2: the continuations of distinct actions are disjoint
    events, so every other action has probability < 1/2 and A scores highest. To get such
    answers the tiny model is first taught (a few seconds of AdamW) to answer each prompt with
    an action of its own; A's probability is measured by a plain forward pass."""
    import torch

    queries = ask_queries(tmp_path, "higherlower", "basic", "slm.decoding.mode=choices", n=2)
    queries += ask_queries(tmp_path, "doorkey8", "basic", "slm.decoding.mode=choices", n=4)
    assert all(scores_choices(q) for q in queries)
    # each prompt its own answer; TURN_LEFT and TURN_RIGHT share their first tokens
    targets = ["HIGHER", "LOWER", "TURN_RIGHT", "TURN_LEFT", "DROP", "PICKUP"]
    base = HFConsultant(path=str(tiny_model()), num_threads=1)
    tok, model = base.tokenizer, base.model
    end = tok.convert_tokens_to_ids("<|im_end|>")
    rows = [
        (base.encode(q), [*tok.encode(a, add_special_tokens=False), end])
        for q, a in zip(queries, targets, strict=True)
    ]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(50):
        opt.zero_grad()
        loss = 0.0
        for prompt, answer in rows:
            logits = model(input_ids=torch.tensor([prompt + answer])).logits[
                0, len(prompt) - 1 : -1
            ]
            loss = loss + torch.nn.functional.cross_entropy(logits, torch.tensor(answer))
        loss.backward()
        opt.step()
    model.eval()
    model.save_pretrained(tmp_path / "taught")
    tok.save_pretrained(tmp_path / "taught")
    taught = HFConsultant(path=str(tmp_path / "taught"), num_threads=1)

    greedy = taught.answer(
        [
            dataclasses.replace(q, decoding=dataclasses.replace(q.decoding, mode="generate"))
            for q in queries
        ]
    )
    chosen = taught.answer(queries)
    checked = 0
    for q, g, c in zip(queries, greedy, chosen, strict=True):
        assert c.generated_tokens == 0 and g.generated_tokens > 0  # scored, and generated
        if g.text not in q.actions:
            continue
        answer = [*tok.encode(g.text, add_special_tokens=False), end]
        if math.exp(forward_logprob_of(taught, q, answer)) <= 0.5:
            continue
        assert c.text == g.text, (g.text, c.choices)
        checked += 1
    assert checked >= len(queries) // 2, checked  # most answers are decisive
