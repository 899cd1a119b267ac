"""Decoding settings: the sampling fields reach every query from `slm.decoding`, greedy cache keys
are the ones made before those fields existed, sampled answers are reproducible with a fixed
seed, independent of batching and evaluation mode, and never cached."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from benchmark import results
from benchmark.consultants.base import Decoding, Query, query_seed, sampling_fields
from benchmark.consultants.cache import CachedConsultant, cache_key
from benchmark.consultants.dice import DiceConsultant
from benchmark.consultants.errors import ConsultantError
from benchmark.consultants.hf import HFConsultant
from benchmark.consultants.openai_compat import OpenAIConsultant
from tests.conftest import compose_cfg

MESSAGES = [
    {"role": "system", "content": "You guide an agent. Answer with one action."},
    {"role": "user", "content": "Wall ahead. Action?"},
]
IDENTITY = "hf:Qwen/Qwen2.5-1.5B-Instruct@abc123"
# cache_key(IDENTITY, query) as the code computed it before top_p, top_k and seed existed
# (commit c63a16e): the default Decoding and the ASK+ rationale decoding.
KEY_DEFAULT = "360d60a6569827fa1a7e03af72b3b081cf68388faf95dde5c017d33beaa2e6a7"
KEY_RATIONALE = "69bdb83664b4fc74fa69d3308f1ee277d08cfdfa4ce7b52b5e4c430ac7011c70"
SAMPLED = Decoding(max_new_tokens=12, temperature=0.8, top_p=0.9, top_k=40, seed=5)


def query(decoding: Decoding, messages=MESSAGES, rng_key=(100, 3, 0)) -> Query:
    return Query(messages, ("FORWARD",), lambda a, r: a, decoding, rng_key=rng_key)


def test_greedy_cache_keys_are_the_keys_before_the_sampling_fields():
    rationale = Decoding(max_new_tokens=64, enable_thinking=True, thinking_budget=10)
    assert cache_key(IDENTITY, query(Decoding())) == KEY_DEFAULT
    assert cache_key(IDENTITY, query(rationale)) == KEY_RATIONALE
    # greedy: top_p, top_k and seed act on nothing, so they leave the key alone
    assert cache_key(IDENTITY, query(Decoding(top_p=0.9, top_k=40, seed=3))) == KEY_DEFAULT
    assert cache_key(IDENTITY, query(replace(rationale, seed=0))) == KEY_RATIONALE
    # sampled keys carry every field (the cache never stores them, but they never collide)
    keys = {cache_key(IDENTITY, query(replace(SAMPLED, **kw))) for kw in ({}, {"seed": 6})}
    assert len(keys) == 2 and KEY_DEFAULT not in keys


def test_decoding_validation_and_sampling_fields():
    assert sampling_fields(None) == {}
    assert sampling_fields({"temperature": 1, "top_k": 40, "seed": None}) == {
        "temperature": 1.0,
        "top_k": 40,
    }
    assert sampling_fields(OmegaConf.create({"top_p": 0.9, "seed": 7})) == {"top_p": 0.9, "seed": 7}
    with pytest.raises(ValueError, match="unknown key"):
        sampling_fields({"temperatur": 0.7})
    with pytest.raises(ValueError, match="integer"):
        sampling_fields({"top_k": 2.5})
    for bad in ({"temperature": -0.1}, {"top_p": 0.0}, {"top_p": 1.5}, {"top_k": -1}):
        with pytest.raises(ValueError, match="must be"):
            Decoding(**bad)


def test_query_seed_depends_on_seed_rng_key_and_messages_only():
    base = query(SAMPLED)
    assert query_seed(query(replace(SAMPLED, seed=None))) is None
    assert query_seed(base) == query_seed(query(SAMPLED))  # stable across calls
    assert query_seed(base) == query_seed(query(replace(SAMPLED, temperature=0.5)))
    others = [
        query(replace(SAMPLED, seed=6)),
        query(SAMPLED, rng_key=(100, 4, 0)),
        query(SAMPLED, messages=[MESSAGES[0], {"role": "user", "content": "Door ahead."}]),
    ]
    assert len({query_seed(base), *(query_seed(q) for q in others)}) == 4
    assert 0 <= query_seed(base) < 2**63


def test_openai_body_sends_sampling_fields_only_when_sampling():
    c = OpenAIConsultant.__new__(OpenAIConsultant)  # no server: only the request body
    c.model, c.extra_body = "m", {}
    greedy = c._body(query(Decoding(max_new_tokens=8, top_p=0.9, top_k=40, seed=3)))
    assert greedy == {
        "model": "m",
        "messages": MESSAGES,
        "max_tokens": 8,
        "temperature": 0.0,
        "top_p": 1.0,  # explicit, and neutral when greedy: never the server's model default
        "chat_template_kwargs": {"enable_thinking": False},
    }
    sampled = c._body(query(SAMPLED))
    assert sampled["temperature"] == 0.8 and sampled["top_p"] == 0.9 and sampled["top_k"] == 40
    assert sampled["seed"] == query_seed(query(SAMPLED)) % 2**31
    plain = c._body(query(Decoding(temperature=1.0)))
    assert plain["top_p"] == 1.0 and "top_k" not in plain and "seed" not in plain


# ------------------------------------------------------------------------------ config


def test_slm_decoding_reaches_every_query(tmp_path):
    from benchmark.build import build_prompt, prepare

    def decoding(*overrides):
        cfg = compose_cfg(tmp_path, "env=fourrooms", "gate=always", *overrides)
        prompt = build_prompt(cfg, prepare(cfg)[0])
        return getattr(prompt, "decoding", None) or prompt.act_decoding

    # the protocol's repetition penalty (paper: the released code's 1.1) reaches the query too
    assert decoding("slm=tiny", "prompt=basic") == Decoding(
        max_new_tokens=8, seed=0, repetition_penalty=1.1
    )
    d = decoding(
        "slm=tiny",
        "prompt=stateful",
        "prompt.rationale=true",
        "slm.decoding.temperature=0.7",
        "slm.decoding.top_k=20",
        "seed=4",
    )
    assert (d.temperature, d.top_p, d.top_k, d.seed, d.enable_thinking) == (0.7, 1.0, 20, 4, True)
    assert decoding("slm=openai", "prompt=belief", "slm.decoding.top_p=0.5").top_p == 0.5
    assert decoding("slm=oracle", "prompt=basic").temperature == 0.0  # no slm.decoding: greedy


@pytest.mark.parametrize("protocol", ["paper", "official"])
def test_feedback_preset_samples_like_ollama(tmp_path, protocol):
    """Ollama's defaults whatever the protocol (official's repetition penalty is the ASK+
    code's)."""
    cfg = compose_cfg(
        tmp_path, "+experiment=feedback", "env=empty16x16", "prompt=hwbp", f"protocol={protocol}"
    )
    assert OmegaConf.to_container(cfg.slm.decoding, resolve=True) == {
        "temperature": 0.8,
        "top_p": 0.9,
        "top_k": 40,
        "seed": 0,
        "mode": "generate",
        "choice_score": "sum",
        "source": "config",
        "repetition_penalty": 1.0,
    }


def test_decoding_source_is_checked_where_it_cannot_act(tmp_path):
    from benchmark.validate import validate

    def check(*overrides):
        validate(compose_cfg(tmp_path, "env=fourrooms", "gate=always", *overrides))

    with pytest.raises(ValueError, match=r"slm.decoding.source='both' is invalid: allowed"):
        check("slm.decoding.source=both")
    with pytest.raises(ValueError, match="openai backend cannot read"):
        check("slm=openai", "slm.decoding.source=model")
    with pytest.raises(ValueError, match="choices .* needs slm.decoding.source=config"):
        check("slm.decoding.mode=choices", "slm.decoding.source=model")
    with pytest.raises(ValueError, match="source='both' is not one of"):
        Decoding(source="both")
    # protocol=official leaves the openai backend on its configured values (a named override)
    assert compose_cfg(tmp_path, "slm=openai", "protocol=official").slm.decoding.source == "config"


# ------------------------------------------------------------------------------ tiny model


@pytest.fixture(scope="module")
def tiny(tiny_model):
    import torch

    threads = torch.get_num_threads()
    yield HFConsultant(path=str(tiny_model()), num_threads=1)
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def own_sampling_model(tmp_path_factory, tiny_model) -> Path:
    """The tiny model saved with a generation config that samples with non-default values."""
    from transformers import GenerationConfig

    base = tmp_path_factory.getbasetemp()
    target = base / "tiny-own-sampling"
    shutil.copytree(tiny_model(), target)
    gc = GenerationConfig.from_pretrained(target)
    gc.update(do_sample=True, temperature=0.7, top_p=0.8, top_k=20)
    gc.save_pretrained(target)
    return target


@pytest.mark.parametrize("source", ["config", "model"])
def test_source_model_samples_with_the_models_generation_config(
    own_sampling_model, tmp_path, source
):
    """slm.decoding.source=model decodes as generate() on the checkpoint's own
    generation_config.json, seeded; config stays greedy. Through the job's own builders: the
    prompt's decoding, make_consultant (the response cache around the hf backend)."""
    import torch

    from benchmark.build import build_prompt, prepare
    from benchmark.consultants import make_consultant

    cfg = compose_cfg(
        tmp_path,
        "env=fourrooms",
        "gate=always",
        "slm=tiny",
        f"slm.backend.path={own_sampling_model}",
        "prompt=basic",
        "seed=3",
        f"slm.decoding.source={source}",
        "slm.decoding.repetition_penalty=1.0",  # the model's own sampling alone
    )
    decoding = build_prompt(cfg, prepare(cfg)[0]).decoding
    threads = torch.get_num_threads()
    consultant = make_consultant(cfg.slm, cfg.paths)
    try:
        assert isinstance(consultant, CachedConsultant)
        qs = _queries(4, decoding)
        (resolved,) = {q.decoding for q in consultant.inner.resolve_decoding(qs)}
        own = Decoding(max_new_tokens=8, temperature=0.7, top_p=0.8, top_k=20, seed=3)
        greedy = Decoding(max_new_tokens=8, seed=3)
        assert resolved == (own if source == "model" else greedy)
        answers = [a.text for a in consultant.answer(qs)]
        assert answers == [a.text for a in consultant.answer(qs)]  # seeded: it repeats

        def texts(d):
            return [a.text for a in consultant.inner.answer([replace(q, decoding=d) for q in qs])]

        assert answers == texts(resolved)
        if source == "model":
            assert answers != texts(greedy) and answers != texts(replace(own, seed=4))
            assert len(consultant.store) == 0  # sampled: never cached
        else:
            assert len(consultant.store) == 4
    finally:
        consultant.close()
        torch.set_num_threads(threads)


def test_model_sampling_reads_the_generation_config_as_generate_does(tiny):
    from transformers import GenerationConfig

    saved = tiny.model.generation_config
    try:
        assert tiny.model_sampling() == {"temperature": 0.0, "top_p": 1.0, "top_k": 0}
        tiny.model.generation_config = GenerationConfig(do_sample=True, temperature=0.5)
        # unset fields: transformers' defaults (top_k 50), as generate() samples with them
        assert tiny.model_sampling() == {"temperature": 0.5, "top_p": 1.0, "top_k": 50}
        tiny.model.generation_config = GenerationConfig(do_sample=True, min_p=0.1)
        with pytest.raises(ConsultantError, match="min_p"):
            tiny.model_sampling()
    finally:
        tiny.model.generation_config = saved
    with pytest.raises(ConsultantError, match="cannot read the model's own generation config"):
        DiceConsultant().resolve_decoding(_queries(1, Decoding(source="model")))


def _queries(n: int, decoding: Decoding) -> list[Query]:
    words = "the agent faces a wall ; goal is north , door key Action: FORWARD 3 4".split()
    out = []
    for i in range(n):
        text = " ".join(words[(i * 7 + k) % len(words)] for k in range(20 + 9 * i))
        out.append(query(decoding, [MESSAGES[0], {"role": "user", "content": text}], (i, 0, 0)))
    return out


def test_sampling_with_a_seed_is_reproducible_and_batch_independent(tiny):
    for d in (SAMPLED, Decoding(24, True, 6, temperature=1.0, seed=1)):  # thinking phases too
        qs = _queries(6, d)
        first = [g.new_ids for g in tiny.generate(qs)]
        assert [g.new_ids for g in tiny.generate(qs)] == first  # the same again
        assert [tiny.generate([q])[0].new_ids for q in qs] == first  # one at a time
        assert [g.new_ids for g in tiny.generate(qs[::-1])][::-1] == first  # another batch order
        greedy = [
            g.new_ids
            for g in tiny.generate([replace(q, decoding=replace(d, temperature=0)) for q in qs])
        ]
        assert first != greedy
        other = [
            g.new_ids for g in tiny.generate([replace(q, decoding=replace(d, seed=9)) for q in qs])
        ]
        assert first != other
    unseeded = _queries(6, replace(SAMPLED, seed=None))
    assert [g.new_ids for g in tiny.generate(unseeded)] != [
        g.new_ids for g in tiny.generate(unseeded)
    ]


def test_sampled_queries_bypass_the_cache(tiny, tmp_path):
    cached = CachedConsultant(tiny, tmp_path / "responses.sqlite")
    qs = _queries(4, SAMPLED)
    a = cached.answer(qs)
    b = cached.answer(qs)
    assert [x.text for x in a] == [x.text for x in b]  # reproducible, yet asked twice
    assert not any(x.cached for x in a + b)
    assert len(cached.store) == 0 and cached.stats()["bypassed"] == 8
    cached.answer(_queries(4, replace(SAMPLED, temperature=0.0)))
    assert len(cached.store) == 4


def test_sampled_evaluation_is_identical_lockstep_and_sequential(tmp_path):
    """SLM-only on the tiny model with sampling: every episode is the same in both modes."""
    from benchmark.build import build

    cfg = compose_cfg(
        tmp_path,
        "env=empty5x5_random",
        "gate=always",
        "slm=tiny",
        "slm.cache=false",
        "prompt=basic",
        "slm.decoding.temperature=1.5",
        "env.task.max_steps=6",
        "eval.n_episodes=4",
    )
    ev = build(cfg).evaluator()
    seeds = list(range(100, 104))
    lockstep = results.split_runtime(ev.run(seeds, mode="lockstep"))[0]
    sequential = results.split_runtime(ev.run(seeds, mode="sequential"))[0]
    assert lockstep == sequential
    assert sum(r["queries"] for r in lockstep) == sum(r["length"] for r in lockstep) > 0


def test_repo_config_greedy_by_default():
    for name in ("tiny", "qwen2.5-1.5b", "llama3.1-8b", "qwen3.5-2b", "qwen3.5-4b", "openai"):
        cfg = OmegaConf.load(Path(__file__).resolve().parents[2] / "conf" / "slm" / f"{name}.yaml")
        assert cfg.decoding.temperature == 0.0, name
