"""Agent-BRACE's RL sampler (benchmark.brace.joint.Sampler) samples exactly what PPO scores: a
checkpoint whose generation config ships a repetition penalty and top-k (as Qwen2.5 ships
repetition_penalty 1.05) still samples from softmax(logits / temperature), so the first PPO
ratio new/old is 1 and the first tokens' frequencies follow the scorer's probabilities."""

from __future__ import annotations

import pytest

from benchmark.brace import ppo
from benchmark.brace.joint import Sampler
from benchmark.brace.settings import RLSettings
from benchmark.consultants import Query
from benchmark.consultants.base import Decoding
from benchmark.finetune import lm


@pytest.fixture(scope="module")
def penalised(tmp_path_factory, tiny_model):
    """A copy of the small tiny model made peaky (its final norm x 8: the likeliest next token has p ~ 0.35,
    so a penalty on repeated tokens moves the distribution a lot), its generation config
    sampling with repetition_penalty 2, top_k 5 and temperature 0.7."""
    import shutil

    import torch
    from transformers import GenerationConfig

    path = tmp_path_factory.mktemp("tiny") / "m"
    shutil.copytree(tiny_model("small"), path)
    model, tok = lm.load(path)
    with torch.no_grad():
        model.model.norm.weight.mul_(8.0)
    lm.save(model, tok, path)
    gc = GenerationConfig.from_pretrained(path)
    gc.update(do_sample=True, repetition_penalty=2.0, top_k=5, temperature=0.7)
    gc.save_pretrained(path)
    return path


def _queries(n: int, max_new: int) -> list[Query]:
    text = "You are in the kitchen. Exits: north, east. You carry a key. What now?"
    return [
        Query(
            [{"role": "user", "content": text}],
            ("north",),
            lambda a, r: a,
            Decoding(max_new_tokens=max_new),
        )  # fmt: skip
        for _ in range(n)
    ]


def test_sampled_tokens_repeat_as_often_as_the_scored_distribution_says(penalised):
    """64 completions of 16 tokens: at each step the scorer's distribution p_t (softmax of
    the logits at temperature 1, the full vocabulary) gives the tokens already in the prompt
    or the completion a mass q_t; whether the sampled token is one of them is a Bernoulli(q_t)
    draw, so sum(repeats) - sum(q_t) over sqrt(sum q_t (1 - q_t)) is within 4 (a z-score). A
    sampler that applies the checkpoint's repetition penalty repeats far less."""
    import torch

    model, tok = lm.load(penalised)
    sampler = Sampler({"policy": (model, tok), "belief": (model, tok)}, temperature=1.0, seed=3)
    answers = sampler.answer(_queries(64, 16))
    repeats = expected = variance = 0.0
    with torch.no_grad():
        for a in answers:
            p, c = a.extra["prompt_ids"], a.extra["completion_ids"]
            probs = torch.softmax(
                model(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1 : -1].double(), -1
            )
            for t, token in enumerate(c):
                seen = sorted(set(p + c[:t]))
                q = float(probs[t, seen].sum())
                repeats += token in seen
                expected += q
                variance += q * (1 - q)
    z = (repeats - expected) / variance**0.5
    assert abs(z) < 4, (z, repeats, expected)


def test_the_first_ppo_ratio_is_one(penalised):
    """Completions of 12 tokens, batched with padding: PPO's scorer gives every sampled token
    the log-prob it was sampled with, so the ratio of the first epoch is 1."""
    import torch

    model, tok = lm.load(penalised)
    sampler = Sampler({"policy": (model, tok), "belief": (model, tok)}, temperature=0.8, seed=0)
    queries = _queries(6, 12)
    queries[1].messages[0]["content"] += " A longer prompt, so that the batch is padded."
    answers = sampler.answer(queries)
    learner = ppo.Learner(model, tok, RLSettings(temperature=0.8))
    pairs = [(a.extra["prompt_ids"], a.extra["completion_ids"]) for a in answers]
    with torch.no_grad():
        scored, _ = learner.forward(pairs)
    for a, new in zip(answers, scored, strict=True):
        old = torch.tensor(a.extra["sample_logp"])
        assert old.shape == new.shape
        assert torch.exp(new - old).numpy() == pytest.approx(1.0, abs=1e-4)
    traj = ppo.Trajectory("policy", pairs, 1.0, [a.extra["sample_logp"] for a in answers])
    learner.score([traj])
    assert ppo.sampling_gap([traj]) < 1e-4


def test_a_non_finite_logit_raises_instead_of_sampling(tiny_model):
    """A model whose logits hold a NaN (its LM head poisoned in memory: what a GPU attention
    kernel's NaN in a left-padded row leads to) fails the batch with the hf backend's error,
    naming the sampler and the rows, instead of sampling garbage; the models get the hf
    backend's attention, which zeroes fully masked rows."""
    import torch

    from benchmark.consultants.attention import MASKED, NAME
    from benchmark.consultants.errors import ConsultantError

    model, tok = lm.load(tiny_model("small"))
    sampler = Sampler({"belief": (model, tok), "policy": (model, tok)}, temperature=1.0)
    assert model.config._attn_implementation in (NAME, MASKED)
    assert all(a.text is not None for a in sampler.answer(_queries(2, 3)))  # finite: it samples
    with torch.no_grad():
        model.lm_head.weight[7, 0] = float("nan")
    for temperature in (1.0, 0.0):  # sampled and greedy (the held-out rollouts)
        sampler.temperature = temperature
        with pytest.raises(ConsultantError, match=r"brace RL sampler \(policy model\): non-finite"):
            sampler.answer(_queries(2, 3))
