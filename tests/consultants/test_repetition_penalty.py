"""slm.decoding.repetition_penalty: validated, out of cell identities and cache keys at 1.0 (the
value of everything made before it existed), applied by the hf backend exactly as transformers'
generate applies it (generate, the lean greedy loop and choice scoring, on the tiny model), sent
by the openai backend, and set by protocol=official (greedy, 1.1, as the ASK+ released code)."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import pytest
import yaml

from benchmark.cell import without_default_decoding
from benchmark.consultants import check_slm
from benchmark.consultants.base import Decoding, Query, sampling_fields
from benchmark.consultants.cache import cache_key, decoding_key
from benchmark.consultants.hf import HFConsultant
from benchmark.consultants.openai_compat import OpenAIConsultant
from tests.conftest import REPO, compose_cfg
from tests.consultants.test_prefix import ask_queries

PENALTY = 1.1


def with_penalty(queries: list[Query], penalty: float = PENALTY) -> list[Query]:
    return [
        dataclasses.replace(q, decoding=dataclasses.replace(q.decoding, repetition_penalty=penalty))
        for q in queries
    ]


@pytest.fixture(scope="module")
def models(tiny_model):
    """(reuse on, lean; reuse off, generate()) of the tiny model."""
    import torch

    threads = torch.get_num_threads()
    path = str(tiny_model())
    on = HFConsultant(path=path, num_threads=1)
    off = HFConsultant(path=path, num_threads=1, prefix_cache=0, lean_max_new_tokens=0)
    yield on, off
    torch.set_num_threads(threads)


def test_bad_penalties_are_refused_naming_the_key(tmp_path):
    for bad in (0, -1.0, "x", True):
        with pytest.raises(ValueError, match="slm.decoding.repetition_penalty"):
            Decoding(repetition_penalty=bad)
        with pytest.raises(ValueError, match=r"slm.decoding.repetition_penalty.*> 0"):
            sampling_fields({"repetition_penalty": bad})
    assert sampling_fields({"repetition_penalty": 1}) == {"repetition_penalty": 1.0}
    cfg = compose_cfg(tmp_path, "slm=tiny", "slm.decoding.repetition_penalty=0")
    with pytest.raises(ValueError, match=r"slm.decoding.repetition_penalty=0 is invalid"):
        check_slm(cfg.slm)


def test_penalty_enters_cell_identity_and_cache_key_only_when_on():
    q = Query([{"role": "user", "content": "hi"}], ("A",), lambda a, r: a)
    assert "repetition_penalty" not in decoding_key(q.decoding)
    on = dataclasses.replace(q, decoding=Decoding(repetition_penalty=PENALTY))
    assert decoding_key(on.decoding)["repetition_penalty"] == PENALTY
    assert cache_key("m", on) != cache_key("m", q)
    plain = {"temperature": 0.0, "mode": "generate", "source": "config"}
    assert without_default_decoding({**plain, "repetition_penalty": 1.0}) == {"temperature": 0.0}
    assert without_default_decoding({**plain, "repetition_penalty": PENALTY}) == {
        "temperature": 0.0,
        "repetition_penalty": PENALTY,
    }


def test_lean_loop_and_batched_generate_give_generates_tokens_under_the_penalty(models, tmp_path):
    """Each answer is what transformers' own generate(repetition_penalty=1.1) gives for that
    prompt alone; the lean loop and batched, padded generate() agree with it, and the penalty
    changes answers (else this would test nothing)."""
    import torch

    on, off = models
    plain = ask_queries(tmp_path, "fourrooms", "stateful", n=3)
    plain += ask_queries(tmp_path, "higherlower", "enriched", n=2)
    queries = with_penalty(plain)
    assert len({len(on.encode(q)) for q in queries}) > 2  # padded batches in generate()
    reference = []
    for q in queries:
        ids = torch.tensor([on.encode(q)])
        out = on.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=q.decoding.max_new_tokens,
            do_sample=False,
            repetition_penalty=PENALTY,
            eos_token_id=on.eos_ids,
            pad_token_id=on.pad_id,
        )[0, ids.shape[1] :].tolist()
        cut = next((k for k, t in enumerate(out) if t in on.eos_ids), None)
        reference.append(out if cut is None else out[: cut + 1])
    before = on.prefill_stats()["decode_seconds"]
    assert [g.new_ids for g in on.generate(queries)] == reference  # lean
    assert on.prefill_stats()["decode_seconds"] > before  # the lean loop ran
    assert [g.new_ids for g in off.generate(queries)] == reference  # batched generate()
    assert [g.new_ids for g in on.generate(plain)] != reference


def test_choice_scores_are_generates_penalized_log_probabilities(models, tmp_path):
    """Each action token's log-probability is log_softmax of the scores generate() chooses from
    (output_scores, after its RepetitionPenaltyLogitsProcessor) with the prompt and the action's
    earlier tokens as the context; folded (on) and separate (off) scoring alike."""
    import torch

    on, off = models
    plain = ask_queries(tmp_path, "doorkey8", "basic", "slm.decoding.mode=choices", n=2)
    queries = with_penalty(plain)
    for model in (on, off):
        got = [v for v, _, _ in model.choice_logprobs(queries)]
        unpenalized = [v for v, _, _ in model.choice_logprobs(plain)]
        for q, values, free in zip(queries, got, unpenalized, strict=True):
            prompt = model.encode(q)
            for action, value, value_free in zip(q.actions, values, free, strict=True):
                cont = model.choice_ids(action)
                want = 0.0
                for t in range(len(cont)):
                    ids = torch.tensor([prompt + cont[:t]])
                    out = model.model.generate(
                        input_ids=ids,
                        attention_mask=torch.ones_like(ids),
                        max_new_tokens=1,
                        do_sample=False,
                        repetition_penalty=PENALTY,
                        output_scores=True,
                        return_dict_in_generate=True,
                        pad_token_id=model.pad_id,
                    )
                    want += float(torch.log_softmax(out.scores[0][0].float(), -1)[cont[t]])
                assert value == pytest.approx(want, abs=1e-4)
                assert not math.isclose(value, value_free, abs_tol=1e-4)


def test_openai_sends_the_penalty_only_when_on_and_refuses_it_for_choices(tmp_path):
    c = OpenAIConsultant.__new__(OpenAIConsultant)  # no server: only the request body
    c.model, c.extra_body = "m", {}
    q = Query([{"role": "user", "content": "hi"}], ("A",), lambda a, r: a)
    assert "repetition_penalty" not in c._body(q)
    on = dataclasses.replace(q, decoding=Decoding(repetition_penalty=PENALTY))
    assert c._body(on)["repetition_penalty"] == PENALTY
    assert c._body(on)["temperature"] == 0.0
    cfg = compose_cfg(
        tmp_path,
        "slm=openai",
        "slm.decoding.mode=choices",
        "slm.backend.prompt_logprobs=true",
        "slm.decoding.repetition_penalty=1.1",
    )
    with pytest.raises(ValueError, match=r"slm.decoding.repetition_penalty=1.0"):
        check_slm(cfg.slm)


def test_official_protocol_decodes_greedily_with_the_released_penalty(tmp_path):
    """`python -m benchmark ... protocol=official --cfg job`: greedy, repetition penalty 1.1;
    `paper` takes the released penalty too (the text is silent), `suite` none."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmark",
            "env=fourrooms",
            "method=ask_plus",
            "protocol=official",
            "--cfg",
            "job",
            "--resolve",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    decoding = yaml.safe_load(out)["slm"]["decoding"]
    assert decoding["source"] == "config"
    assert decoding["temperature"] == 0.0
    assert decoding["repetition_penalty"] == PENALTY
    for protocol, penalty in (("paper", PENALTY), ("suite", 1.0)):
        cfg = compose_cfg(tmp_path, f"protocol={protocol}")
        assert cfg.slm.decoding.repetition_penalty == penalty


def test_padding_of_a_batch_is_never_penalized():
    """generate()'s processor (row_penalty) gives each padded row the processor's own output
    over that row's tokens alone."""
    import torch
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    from benchmark.consultants.penalty import row_penalty

    scores = torch.randn(2, 10)
    prompts = torch.tensor([[0, 0, 3, 4], [5, 6, 7, 8]])  # row 0 left-padded with token 0
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    ids = torch.cat([prompts, torch.tensor([[2], [9]])], dim=1)  # one generated token each
    got = row_penalty(PENALTY, mask)(ids, scores.clone())
    alone = RepetitionPenaltyLogitsProcessor(PENALTY)
    assert torch.equal(got[0], alone(torch.tensor([[3, 4, 2]]), scores[:1].clone())[0])
    assert torch.equal(got[1], alone(torch.tensor([[5, 6, 7, 8, 9]]), scores[1:].clone())[0])
    assert not torch.equal(got[0], alone(ids[:1], scores[:1].clone())[0])


def test_a_checkpoints_own_penalty_never_applies_when_the_decoding_says_off(models, tmp_path):
    """A model whose generation config carries repetition_penalty (Qwen2.5's has 1.05) answers
    at decoding 1.0 exactly as without it, in generate() and the lean loop alike: the cell says
    1.0, so 1.0 is what runs."""
    import shutil

    from transformers import GenerationConfig

    on, off = models
    path = tmp_path / "tiny-with-penalty"
    shutil.copytree(on.model.name_or_path, path)
    gc = GenerationConfig.from_pretrained(path)
    gc.repetition_penalty = 1.5
    gc.save_pretrained(path)
    queries = ask_queries(tmp_path, "fourrooms", "stateful", n=3)
    plain = [g.new_ids for g in off.generate(queries)]
    assert [g.new_ids for g in off.generate(with_penalty(queries, 1.5))] != plain  # it matters
    for kw in ({"prefix_cache": 0, "lean_max_new_tokens": 0}, {}):  # generate(), lean
        own = HFConsultant(path=str(path), num_threads=1, **kw)
        assert own.model.generation_config.repetition_penalty == 1.5
        assert [g.new_ids for g in own.generate(queries)] == plain, kw
