"""The learned gate (gate=learned): its classifier is trained on TRAINING seeds only, built once
and cached by content, and the gate runs as a cell with a tuned threshold."""

from __future__ import annotations

import json

import pytest

from benchmark.evaluate import Evaluator
from benchmark.seeds import DEFAULT_SPLITS, TRAIN_SEED_MIN
from tests.conftest import SMALL_POLICY, compose_cfg

LEARNED = [
    "env=empty5x5_random",
    "gate=learned",
    "slm=oracle",
    "prompt=basic",
    "gate.mc_samples=5",
    "gate.train_episodes=12",
    *SMALL_POLICY,
]


def test_the_classifier_never_sees_a_validation_or_test_seed(trained_root, monkeypatch):
    from benchmark.build import build

    seen: list[int] = []
    real_run = Evaluator.run

    def spy(self, seeds, *args, **kw):
        seen.extend(seeds)
        return real_run(self, seeds, *args, **kw)

    monkeypatch.setattr(Evaluator, "run", spy)
    cfg = compose_cfg(trained_root, *LEARNED, "gate.tau=0.5")
    evaluation = build(cfg)
    gate = evaluation.gate()
    assert gate.classifier is not None and len(seen) == 12
    evaluated = set(DEFAULT_SPLITS.ranges["validation"]) | set(DEFAULT_SPLITS.ranges["test"])
    assert min(seen) >= TRAIN_SEED_MIN and not set(seen) & evaluated
    (info,) = (trained_root / "gates").glob("*/info.json")
    recorded = json.loads(info.read_text())
    assert recorded["training_seeds"][2] == 12 and recorded["judged_steps"] > 0
    # built once: a second cell of the same checkpoint, env and features rolls out nothing
    seen.clear()
    build(compose_cfg(trained_root, *LEARNED, "gate.tau=0.7")).gate()
    assert seen == []
    # the scores are probabilities, and the gate reads them from step records the same way
    records = [{"total": h, "aleatoric": h / 2, "epistemic": h / 2} for h in (0.1, 1.0, 2.0)]
    scores = gate.scores(records)
    assert ((0 <= scores) & (scores <= 1)).all()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("gate.features=[total,probs]", "gate.features=['total', 'probs'] is invalid"),
        ("gate.train_episodes=0", "gate.train_episodes=0 is invalid"),
    ],
)
def test_bad_learned_gate_settings_fail_early(tmp_path, override, message):
    from benchmark.build import prepare

    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        prepare(compose_cfg(tmp_path, *LEARNED, override))


@pytest.mark.slow
def test_a_learned_gate_cell_tunes_its_threshold_and_runs(trained_root, tmp_path):
    from benchmark.job import run_job

    cfg = compose_cfg(
        trained_root,
        *LEARNED,
        "eval.n_episodes=5",
        "tuning.n_episodes=5",
        "tuning.n_trials=3",
        "eval.step_records=true",
        "quiet=true",
    )
    summary = run_job(cfg, tmp_path / "job", multirun=False)
    assert summary["gate"] == "learned" and 0 <= summary["tau"] <= 1
    assert summary["gate_judged"] > 0
