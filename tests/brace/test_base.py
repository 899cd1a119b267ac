"""The base that reads its prompt (benchmark.brace.base, benchmark.brace.corpus): the corpus'
seeds lie outside every evaluated split and training pool, it holds transcripts in the TextWorld
family's format and no belief blocks, its names come from a large pool with held-out names kept
for the probe; pretraining lowers the loss, resumes to the same weights a straight run reaches
and refuses a folder made with other settings; the probe fails an untrained model."""

from __future__ import annotations

import json

import pytest
import yaml

from benchmark.brace import corpus
from benchmark.brace.base import (
    BaseError,
    BaseSettings,
    main,
    model_config,
    pretrain,
    probe,
    wilson,
)
from benchmark.seeds import DEFAULT_SPLITS, TRAIN_SEED_MIN, Splits, check_training_seeds
from benchmark.vocabulary import LABELS
from tests.conftest import CONF

TINY = dict(
    layers=1, width=32, heads=2, kv_heads=1, mlp=64, context=256, batch=2, lr=3e-3, warmup=2
)


def conf_values(key: str) -> list:
    """Every value of `key` anywhere in conf/ (interpolations left out)."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == key and v is not None and not isinstance(v, str):
                    found.append(v)
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for path in sorted(CONF.rglob("*.yaml")):
        walk(yaml.safe_load(path.read_text()))
    return found


def test_corpus_seeds_are_disjoint_from_every_evaluated_split_and_training_pool():
    splits = [DEFAULT_SPLITS] + [Splits.from_config(s) for s in conf_values("splits")]
    assert len(splits) > 1, "conf/config.yaml's splits were not found"
    evaluated = max(r.stop for s in splits for r in s.ranges.values())
    pools = [*conf_values("train_games"), *conf_values("brace_tw_train_games")]
    assert pools and all(isinstance(n, int) for n in pools)
    # TextWorld's training seeds fold onto [TRAIN_SEED_MIN, + train_games); Agent-BRACE's RL and
    # reward seeds start at TRAIN_SEED_MIN + 1,000 and + 5,000
    used = max(evaluated, TRAIN_SEED_MIN + max(pools), TRAIN_SEED_MIN + 1_000_000)
    for seeds in (corpus.CORPUS_SEEDS, corpus.PROBE_SEEDS):
        assert seeds.start > used
        assert seeds.stop <= 2**31 - 1
        check_training_seeds([seeds.start, seeds.stop - 1], DEFAULT_SPLITS)
    assert not set(range(corpus.CORPUS_SEEDS.stop - 5, corpus.CORPUS_SEEDS.stop)) & set(
        corpus.PROBE_SEEDS
    )
    assert corpus.CORPUS_SEEDS.stop <= corpus.PROBE_SEEDS.start
    with pytest.raises(ValueError, match="out of range"):
        corpus.document(corpus.PROBE_SEEDS.start)  # a held-out seed is no training document
    with pytest.raises(ValueError, match="out of range"):
        corpus.document(150, held_out=True)  # a test seed is neither


def test_the_corpus_is_transcripts_in_the_family_format_without_belief_blocks():
    docs = [corpus.document(corpus.CORPUS_SEEDS[i]) for i in range(100)]
    text = "\n".join(d.text for d in docs)
    for forbidden in ("<belief_state>", "</belief_state>", "EXAMPLES:", "ROLE:", "RULES:"):
        assert forbidden not in text
    assert not any(f"[{label}]" in text for label in LABELS)
    for shown in ("VALID ACTIONS (the commands the game accepts now):", "OBSERVATION: ", "INVENTORY: ",
                  "OBJECTIVE: ", "ROOM (", "Action: go ", "Action: take "):  # fmt: skip
        assert shown in text, shown
    assert text.count(corpus.QUESTION_ROOM) >= 100  # at least one question pair per document
    assert (
        corpus.document(corpus.CORPUS_SEEDS[7]).text == docs[7].text
    )  # a seed's document is fixed


def test_names_are_drawn_from_a_large_pool_and_answered_from_the_context():
    train, held = corpus.POOLS[False], corpus.POOLS[True]
    assert len(train["room"]) > 3000 and len(train["portable"]) > 5000
    assert len(held["room"]) > 300 and not set(train["room"]) & set(held["room"])
    rooms_seen = set()
    for i in range(200):
        for held_out, pool in ((False, train), (True, held)):
            seeds = corpus.PROBE_SEEDS if held_out else corpus.CORPUS_SEEDS
            doc = corpus.document(seeds[i], held_out)
            for question, start, end in doc.answers:
                answer = doc.text[start:end].strip()
                assert doc.text[start - len(question) : start] == question
                if question == corpus.QUESTION_ROOM:
                    assert answer in pool["room"]
                    rooms_seen.add(answer)
                # every name of the answer was shown before the question: copying answers it
                names = [] if answer == corpus.NOTHING else answer.split(", ")
                assert all(name in doc.text[: start - len(question)] for name in names)
    assert len(rooms_seen) > 500  # names per document drawn afresh, not one game's few


def test_pretraining_lowers_the_loss(tmp_path):
    summary = pretrain(BaseSettings(**TINY, steps=10), tmp_path / "base", progress=False)
    assert summary["steps"] == 10 and summary["tokens"] > 0
    assert summary["last_loss"] < summary["first_loss"] - 0.2
    made = json.loads((tmp_path / "base/made_with.json").read_text())
    assert made["identity"] == BaseSettings(**TINY, steps=10).digest()
    digest = (tmp_path / "base/model.sha256").read_text().split()[0]
    assert digest == summary["weights_sha256"] and len(digest) == 64
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "base/model"))
    assert model.config.model_type == "qwen3" and model.config.num_hidden_layers == 1


def test_a_stopped_run_resumes_to_the_weights_of_a_straight_run(tmp_path):
    import torch
    from safetensors.torch import load_file

    settings = BaseSettings(**TINY, steps=8, checkpoint_every=3)
    straight = pretrain(settings, tmp_path / "straight", progress=False)
    first = pretrain(settings, tmp_path / "resumed", stop_after=4, progress=False)
    assert first["steps"] == 4 and not (tmp_path / "resumed/model").exists()
    steps = sorted(p.name for p in (tmp_path / "resumed/checkpoints").iterdir())
    assert steps == ["step-0000003", "step-0000004"]  # the newest two, whole
    resumed = pretrain(settings, tmp_path / "resumed", progress=False)
    assert resumed["steps"] == 8 and resumed["tokens"] == straight["tokens"]
    a = load_file(str(tmp_path / "straight/model/model.safetensors"))
    b = load_file(str(tmp_path / "resumed/model/model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)
    assert resumed["last_loss"] == pytest.approx(straight["last_loss"], abs=1e-4)
    with pytest.raises(BaseError, match=r"other settings \(lr differ"):
        pretrain(
            BaseSettings(**{**TINY, "lr": 1e-3}, steps=8), tmp_path / "resumed", progress=False
        )
    # a runtime setting is not identity: the finished folder is found, not refused
    again = pretrain(
        BaseSettings(**TINY, steps=8, checkpoint_every=5), tmp_path / "resumed", progress=False
    )
    assert again["weights_sha256"] == resumed["weights_sha256"]


def test_the_probe_fails_an_untrained_model(tmp_path):
    import torch
    from transformers import Qwen3ForCausalLM

    from benchmark.brace.base import build_tokenizer

    settings = BaseSettings(**TINY)
    tokenizer = build_tokenizer(settings.vocab)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(model_config(settings, tokenizer))
    model.save_pretrained(tmp_path / "untrained")
    tokenizer.save_pretrained(tmp_path / "untrained")
    result = probe(tmp_path / "untrained", n=12)
    for key in ("room", "visible", "visible_names", "score"):
        assert 0.0 <= result[key] <= 1.0
    assert result["score"] < 0.2
    low, high = result["room_ci"]
    assert low <= result["room"] <= high and high > 0  # an interval, not a point
    assert result["examples"][0]["expected"] in corpus.POOLS[True]["room"]


def test_wilson_interval():
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == 1.0
    low, high = wilson(50, 100)
    assert low == pytest.approx(0.4038, abs=1e-3) and high == pytest.approx(0.5962, abs=1e-3)


def test_bad_settings_and_folders_are_one_line_errors(tmp_path, capsys):
    assert main(["--heads", "3"]) == 2
    assert "heads=3" in capsys.readouterr().err
    assert main(["probe", str(tmp_path)]) == 2
    assert "holds no model" in capsys.readouterr().err
    with pytest.raises(ValueError, match="min_lr=2"):
        BaseSettings(min_lr=2.0)
