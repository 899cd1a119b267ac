"""Consultant backends on real transformers objects: the locally built tiny Qwen3 model loaded
through from_pretrained, offline; plus the dice and oracle consultants and the retry helper."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from benchmark.consultants import ConsultantError, make_consultant
from benchmark.consultants.base import Decoding, Query
from benchmark.consultants.cache import CachedConsultant
from benchmark.consultants.dice import DiceConsultant
from benchmark.consultants.fingerprint import local_fingerprint
from benchmark.consultants.hf import HFConsultant, strip_thinking
from benchmark.consultants.oracle import OracleConsultant
from benchmark.consultants.retry import Retryable, with_retries
from benchmark.consultants.tiny import TinyConsultant, build_tiny

REPO = Path(__file__).resolve().parents[2]
WORDS = "the agent faces a wall ; goal is north , door key Action: TURN_LEFT FORWARD 3 4".split()


def render(action: str, reason: str) -> str:
    return f"Action: {action}\nReason: {reason}"


def make_query(n_words: int, seed: int, decoding: Decoding | None = None) -> Query:
    import random

    rng = random.Random(seed)
    text = " ".join(rng.choice(WORDS) for _ in range(n_words))
    return Query(
        messages=[
            {"role": "system", "content": "You guide an agent. Answer with one action."},
            {"role": "user", "content": text},
        ],
        actions=("TURN_LEFT", "TURN_RIGHT", "FORWARD"),
        render_answer=render,
        decoding=decoding or Decoding(max_new_tokens=12),
        rng_key=(seed, 0, 0),
    )


@pytest.fixture(scope="module")
def tiny(tiny_model):
    import torch

    threads = torch.get_num_threads()  # 1 thread: OpenMP threads thrash on a shared 2-core CPU
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")  # loading must work without the hub
        model = HFConsultant(path=str(tiny_model()), max_batch_size=3, num_threads=1)
    yield model
    torch.set_num_threads(threads)


def test_tiny_build_is_small_fast_and_deterministic(tmp_path, tiny_model) -> None:
    d0 = tiny_model()
    t0 = time.perf_counter()
    again = build_tiny(tmp_path / "copy", seed=0)
    build_s = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in again.iterdir())
    print(f"tiny build {build_s:.2f}s, {size / 1e6:.2f} MB")
    assert size < 1_000_000
    assert (again / "model.safetensors").exists() and not list(again.glob("*.bin"))
    assert local_fingerprint(again) == local_fingerprint(d0)
    assert local_fingerprint(tiny_model(seed=1)) != local_fingerprint(d0)
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # temp dir renamed away


def test_hf_batched_equals_single_and_order_restored(tiny: HFConsultant) -> None:
    # prompt lengths deliberately unsorted; max_batch_size=3 makes several sorted batches
    queries = [make_query(n, seed=i) for i, n in enumerate([40, 300, 5, 120, 260, 80, 10, 200])]
    batched = tiny.generate(queries)
    single = [tiny.generate([q])[0] for q in queries]
    # float32 + left padding with an attention mask: greedy token ids match batch-1 exactly
    assert [g.new_ids for g in batched] == [g.new_ids for g in single]
    assert [len(g.prompt_ids) for g in batched] == [len(tiny.encode(q)) for q in queries]
    answers = tiny.answer(queries)
    assert [a.text for a in answers] == [g.text for g in single]
    assert all(a.prompt_tokens > 0 and 0 < a.generated_tokens <= 12 for a in answers)
    assert all(a.seconds > 0 and not a.cached for a in answers)


def test_thinking_budget_respected_and_stripped(tiny: HFConsultant) -> None:
    budget, answer_max = 6, 10
    d = Decoding(max_new_tokens=answer_max, enable_thinking=True, thinking_budget=budget)
    queries = [make_query(n, seed=i, decoding=d) for i, n in enumerate([30, 90, 15])]
    gens = tiny.generate(queries)
    close = tiny.close_ids
    for g in gens:
        assert g.thinking_tokens <= budget
        assert len(g.new_ids) <= budget + len(close) + answer_max
        assert tiny.think_end in g.new_ids  # closed, by the model or forced
        assert "<think>" not in g.text and "</think>" not in g.text
    assert max(g.thinking_tokens for g in gens) == budget  # a random model rarely stops itself
    # the template opened the block in the prompt; without a budget nothing is closed -> ""
    unbounded = Decoding(max_new_tokens=8, enable_thinking=True, thinking_budget=0)
    g = tiny.generate([make_query(30, 0, unbounded)])[0]
    assert tiny.think_end not in g.new_ids and g.text == ""


def test_strip_thinking_variants() -> None:
    assert strip_thinking("<think>a b</think>\n\nAction: FORWARD") == "Action: FORWARD"
    assert strip_thinking("Action: FORWARD <think>never closed") == "Action: FORWARD"
    assert strip_thinking("opened in the prompt</think>Action: TURN_LEFT") == "Action: TURN_LEFT"


def test_offline_unknown_hub_id_fails_at_construction(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(ConsultantError) as err:
        HFConsultant(model="no-such-org/no-such-model-xyz")
    msg = str(err.value)
    assert "no-such-org/no-such-model-xyz" in msg and "slm.backend.path" in msg
    assert "huggingface-cli download" in msg and "HF_HOME" in msg
    assert time.perf_counter() - t0 < 5


def test_missing_local_path_is_named(tmp_path) -> None:
    bad = tmp_path / "nowhere"
    with pytest.raises(ConsultantError, match="nowhere"):
        HFConsultant(path=str(bad))


def _slm_cfg(name: str, root: Path, **override):
    cfg = OmegaConf.create(
        {
            "paths": {"root": str(root), "models": str(root / "models"), "cache": str(root / "c")},
            "slm": OmegaConf.load(REPO / "conf" / "slm" / f"{name}.yaml"),
        }
    )
    for k, v in override.items():
        OmegaConf.update(cfg, f"slm.{k}", v)
    return cfg


def test_make_consultant_from_presets(tmp_path, tiny_model) -> None:
    # the tiny preset builds into <paths.models>/tiny-qwen3-s0 (here: a copy of the session's)
    cfg = _slm_cfg("tiny", tmp_path)
    import shutil

    shutil.copytree(tiny_model(), tmp_path / "models" / "tiny-qwen3-s0")
    c = make_consultant(cfg.slm, cfg.paths)
    assert isinstance(c, CachedConsultant) and isinstance(c.inner, TinyConsultant)
    assert Path(c.inner.model.name_or_path) == tmp_path / "models" / "tiny-qwen3-s0"
    assert (tmp_path / "c" / "responses").is_dir()
    c.close()
    plain = make_consultant(_slm_cfg("tiny", tmp_path, cache=False).slm, cfg.paths)
    assert isinstance(plain, TinyConsultant)
    for name, cls in [("random", DiceConsultant), ("oracle", OracleConsultant)]:
        c = make_consultant(_slm_cfg(name, tmp_path, cache=True).slm, cfg.paths)
        assert type(c) is cls  # never wrapped in the cache
    for name in ["qwen3.5-2b", "qwen3.5-4b", "qwen2.5-1.5b", "llama3.1-8b", "openai"]:
        assert OmegaConf.load(REPO / "conf" / "slm" / f"{name}.yaml").backend._target_


def test_dice_is_reproducible_and_batch_order_free() -> None:
    qs = [make_query(3, seed=i) for i in range(40)]
    a = [x.text for x in DiceConsultant(seed=7).answer(qs)]
    b = [x.text for x in DiceConsultant(seed=7).answer(qs[::-1])][::-1]
    assert a == b
    assert all(t.startswith("Action: ") and t.endswith("dice") for t in a)
    chosen = {t.split()[1] for t in a}
    assert chosen == {"TURN_LEFT", "TURN_RIGHT", "FORWARD"}  # 40 draws cover all 3
    assert a != [x.text for x in DiceConsultant(seed=8).answer(qs)]


def test_oracle_answers_expert_and_joins_plans() -> None:
    o = OracleConsultant()
    assert o.needs_expert and o.identity == "oracle"
    step, plan = make_query(3, 0), make_query(3, 1)
    step.expert, plan.expert = ["FORWARD"], ["FORWARD", "FORWARD", "TURN_LEFT"]
    texts = [a.text for a in o.answer([step, plan])]
    assert texts == [render("FORWARD", "oracle"), render("FORWARD FORWARD TURN_LEFT", "oracle")]
    with pytest.raises(ConsultantError, match="with_expert"):
        o.answer([make_query(3, 2)])


def test_retry_helper_backs_off_then_names_the_target() -> None:
    calls = []

    def flaky() -> str:
        calls.append(time.perf_counter())
        if len(calls) < 3:
            raise Retryable("HTTP 503")
        return "ok"

    assert with_retries(flaky, what="POST http://x/v1", max_retries=3, base_delay=0.01) == "ok"
    assert len(calls) == 3
    with pytest.raises(ConsultantError, match=r"POST http://x/v1.*3 attempt.*HTTP 503"):
        with_retries(
            lambda: (_ for _ in ()).throw(Retryable("HTTP 503")),
            what="POST http://x/v1",
            max_retries=2,
            base_delay=0.01,
        )


@pytest.mark.slow
def test_concurrent_builds_build_once(tmp_path) -> None:
    code = (
        "import sys; from benchmark.consultants.tiny import build_tiny; build_tiny(sys.argv[1], 3)"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "m")], cwd=REPO)
        for _ in range(2)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "m.lock"]
    assert TinyConsultant(str(tmp_path / "m"), seed=3).answer([make_query(5, 0)])[0].prompt_tokens


@pytest.mark.slow
def test_cpu_timing_8x600_tokens(tiny: HFConsultant) -> None:
    queries = [make_query(450, seed=i, decoding=Decoding(max_new_tokens=16)) for i in range(8)]
    lengths = [len(tiny.encode(q)) for q in queries]
    big = HFConsultant(path=tiny.model.name_or_path, max_batch_size=8)
    big.answer(queries)  # warm-up
    t0 = time.perf_counter()
    big.answer(queries)
    dt = time.perf_counter() - t0
    print(f"8 prompts of {min(lengths)}-{max(lengths)} tokens: {dt * 1000:.0f} ms")
    assert min(lengths) > 550 and dt < 10


_HUB_CHECK = """
import sys
from benchmark.consultants.hf import HFConsultant
c = HFConsultant(model="local-org/tiny-qwen3", max_batch_size=2)
print(c.identity)
"""


@pytest.mark.slow
def test_hub_id_loads_from_local_hf_cache_offline(tmp_path, tiny_model) -> None:
    # lay the tiny model out as the hub cache would (refs/main -> snapshots/<commit>/)
    import shutil

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--local-org--tiny-qwen3"
    shutil.copytree(tiny_model(), repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    env = {**os.environ, "HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", _HUB_CHECK], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == f"hf:local-org/tiny-qwen3@{commit}"


def test_tiny_build_sets_an_incomplete_leftover_aside_and_never_deletes(tmp_path):
    from benchmark.consultants.tiny import build_tiny

    target = tmp_path / "tiny-qwen3-s0"
    target.mkdir()
    (target / "model.safetensors").write_bytes(b"half")  # no config.json: an incomplete build
    build_tiny(target, 0)
    assert (target / "config.json").exists()
    (aside,) = tmp_path.glob(".tiny-qwen3-s0.incomplete-*")
    assert (aside / "model.safetensors").read_bytes() == b"half"
