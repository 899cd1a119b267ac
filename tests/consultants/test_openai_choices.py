"""The openai backend against the small vLLM-compatible server (tests/vllm_server.py, the real
tiny model): choice scoring gives the hf backend's choice probabilities by one-token requests with
`logprob_token_ids` and by the prompt_logprobs fallback; /tokenize once per action set; every
sampling key sent explicitly; the end of a reply taken from the chat template (Llama-3.1's
`<|eot_id|>`); requests that wait through an engine restart."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from benchmark.consultants.base import Decoding, Query
from benchmark.consultants.errors import ConsultantError
from benchmark.consultants.hf import HFConsultant
from benchmark.consultants.openai_compat import OpenAIConsultant
from tests.consultants.test_prefix import ask_queries
from tests.vllm_server import VLLMServer


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return str(tiny_model())


@pytest.fixture(scope="module")
def local(tiny):
    return HFConsultant(path=tiny, num_threads=1)


@pytest.fixture
def server(tiny):
    s = VLLMServer(tiny)
    yield s
    s.stop()


def choice_queries(tmp_path, env: str, n: int) -> list[Query]:
    return ask_queries(tmp_path, env, "stateful", "slm.decoding.mode=choices", n=n)


def posts(server: VLLMServer, path: str) -> list[dict]:
    return [b for p, b in server.bodies if p == path]


@pytest.mark.parametrize("how", ["token_ids", "prompt_logprobs"])
def test_hf_and_openai_give_the_same_choice_probabilities(server, local, tmp_path, how):
    """FourRooms (TURN_LEFT and TURN_RIGHT share their first tokens) and DoorKey (seven actions
    of one to five tokens): the server's scores are the hf backend's, action for action."""
    queries = choice_queries(tmp_path, "fourrooms", 3) + choice_queries(tmp_path, "doorkey8", 2)
    remote = OpenAIConsultant(base_url=server.url, prompt_logprobs=True, choice_logprobs=how)
    lengths = {len(local.choice_ids(a)) for a in queries[-1].actions}
    assert min(lengths) == 2 and max(lengths) >= 4  # one-token and multi-token actions
    got, want = remote.answer(queries), local.answer(queries)
    for q, a, b in zip(queries, got, want, strict=True):
        assert remote.choice_sequences(q) == (
            local.encode(q),
            [local.choice_ids(x) for x in q.actions],
        )
        assert a.text == b.text and a.prompt_tokens == b.prompt_tokens
        assert list(a.choices) == list(q.actions)
        assert a.choices == pytest.approx(b.choices, abs=1e-5)
    assert max(max(a.choices.values()) - min(a.choices.values()) for a in got) > 0.01
    done = posts(server, "/v1/completions")
    if how == "token_ids":
        assert all(b["max_tokens"] == 1 and b["logprob_token_ids"] for b in done)
        assert not any("prompt_logprobs" in b or "allowed_token_ids" in b for b in done)
        assert len(done) == 2 * len(queries)  # the prompt, then every deeper node batched
        prompts = {tuple(local.encode(q)) for q in queries}
        roots = [b for b in done if len(b["prompt"]) == 1 and tuple(b["prompt"][0]) in prompts]
        assert len(roots) == len(queries)
    else:
        assert len(done) == len(queries) and all(b["prompt_logprobs"] == 0 for b in done)


def test_tokenize_is_called_once_per_query_after_the_first_of_an_action_set(server, tmp_path):
    queries = choice_queries(tmp_path, "fourrooms", 4)
    remote = OpenAIConsultant(base_url=server.url, prompt_logprobs=True, concurrency=4)
    remote.answer(queries)
    n = len(queries[0].actions)
    assert len(posts(server, "/tokenize")) == 2 * n + len(queries)
    remote.answer(queries)
    assert len(posts(server, "/tokenize")) == 2 * n + 2 * len(queries)


def test_auto_falls_back_to_prompt_logprobs_on_a_server_without_token_ids(tiny, local, tmp_path):
    old = VLLMServer(tiny, token_ids=False)  # ignores logprob_token_ids, as vLLM did
    try:
        queries = choice_queries(tmp_path, "fourrooms", 2)
        strict = OpenAIConsultant(
            base_url=old.url, prompt_logprobs=True, choice_logprobs="token_ids"
        )
        with pytest.raises(ConsultantError, match="choice_logprobs=token_ids.*without tokens"):
            strict.answer(queries[:1])
        auto = OpenAIConsultant(base_url=old.url, prompt_logprobs=True)
        got = auto.answer(queries)
        assert auto.choice_logprobs == "prompt_logprobs"  # learnt once, kept
        for a, b in zip(got, local.answer(queries), strict=True):
            assert a.text == b.text and a.choices == pytest.approx(b.choices, abs=1e-5)
    finally:
        old.stop()


def decoding_query(**decoding) -> Query:
    return Query(
        messages=[{"role": "user", "content": "Wall ahead. Action?"}],
        actions=("TURN_LEFT", "FORWARD"),
        render_answer=lambda a, r: a,
        decoding=Decoding(max_new_tokens=4, **decoding),
    )


def test_every_sampling_key_is_sent_explicitly(server) -> None:
    """Off keys go with their neutral values (vLLM would otherwise fill them from the model's
    generation config); the server checks them as vLLM does."""
    remote = OpenAIConsultant(base_url=server.url)
    assert remote.vllm_like
    remote.answer([decoding_query(), decoding_query(temperature=0.7, top_p=0.9, top_k=5, seed=3)])
    greedy, sampled = sorted(posts(server, "/v1/chat/completions"), key=lambda b: b["temperature"])
    neutral = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0}
    assert {k: greedy[k] for k in neutral} == neutral and greedy["repetition_penalty"] == 1.0
    assert "seed" not in greedy
    assert (sampled["temperature"], sampled["top_p"], sampled["top_k"]) == (0.7, 0.9, 5)
    assert sampled["min_p"] == 0.0 and isinstance(sampled["seed"], int)
    # a server that is not vLLM-like gets OpenAI's fields, the others only when on
    remote.owned_by = "someone"
    body = remote._body(decoding_query(repetition_penalty=1.1))
    assert (body["temperature"], body["top_p"], body["repetition_penalty"]) == (0.0, 1.0, 1.1)
    assert "top_k" not in body and "min_p" not in body
    assert "top_k" not in remote._body(decoding_query())


def test_a_request_waits_through_an_engine_restart(server) -> None:
    """The engine goes away mid-run (connection refused), comes back on the same address,
    answers 503 while it loads, then answers: the request waits, within restart_wait_s."""
    remote = OpenAIConsultant(base_url=server.url, restart_wait_s=30, max_retries=0)
    [before] = remote.answer([decoding_query()])
    server.stop()

    def restart() -> None:
        server.status = 503
        server.start()
        time.sleep(1.0)
        server.status = 200

    threading.Timer(1.5, restart).start()
    t0 = time.monotonic()
    [after] = remote.answer([decoding_query()])
    assert 2.0 <= time.monotonic() - t0 < 20
    assert after.text == before.text
    server.stop()  # and never comes back
    remote.restart_wait_s = 1.0
    t0 = time.monotonic()
    with pytest.raises(ConsultantError) as err:
        remote.answer([decoding_query()])
    assert 1.0 <= time.monotonic() - t0 < 5
    msg = str(err.value)
    assert f"POST {server.url}/chat/completions" in msg
    assert "stayed unavailable for slm.backend.restart_wait_s=1 s" in msg


LLAMA_TEMPLATE = (  # Llama-3.1's structure: a header per turn, <|eot_id|> after each message
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}"
)
LLAMA_SPECIAL = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
)


def build_tiny_llama(directory) -> str:
    """A tiny random Llama with a Llama-3.1-style tokenizer, template and generation config
    (eos: end_of_text, eom, eot, in Llama-3.1-Instruct's order), built locally."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        GenerationConfig,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
    )

    from benchmark.consultants.tiny import _CORPUS

    raw = Tokenizer(models.BPE(unk_token=None))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=list(LLAMA_SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(_CORPUS.splitlines(), trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        additional_special_tokens=list(LLAMA_SPECIAL[2:5]),
    )
    tok.chat_template = LLAMA_TEMPLATE
    ids = [tok.convert_tokens_to_ids(t) for t in LLAMA_SPECIAL]
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        bos_token_id=ids[0],
        eos_token_id=[ids[1], ids[4], ids[5]],
    )
    import torch

    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=ids[0], eos_token_id=[ids[1], ids[4], ids[5]], do_sample=False
    )
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return str(directory)


def test_the_end_of_a_reply_is_the_chat_templates_own_token(tmp_path) -> None:
    """Llama-3.1 ends a reply with <|eot_id|>; its generation config's first stop token is
    <|end_of_text|>. Both backends score the actions followed by <|eot_id|>, and agree."""
    path = build_tiny_llama(tmp_path / "tiny-llama")
    llama = HFConsultant(path=path, num_threads=1)
    eot = llama.tokenizer.convert_tokens_to_ids("<|eot_id|>")
    end_of_text = llama.tokenizer.convert_tokens_to_ids("<|end_of_text|>")
    assert llama.eos_ids[0] == end_of_text != eot
    actions = ("TURN_LEFT", "FORWARD", "PICKUP")
    assert all(llama.choice_ids(a)[-1] == eot for a in actions)
    server = VLLMServer(path)
    try:
        remote = OpenAIConsultant(base_url=server.url, prompt_logprobs=True)
        assert remote.continuations(actions) == [llama.choice_ids(a) for a in actions]
        q = dataclasses.replace(decoding_query(mode="choices"), actions=actions)
        [a], [b] = remote.answer([q]), llama.answer([q])
        assert a.text == b.text and a.choices == pytest.approx(b.choices, abs=1e-5)
    finally:
        server.stop()
