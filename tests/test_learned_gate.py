"""The learned gate (gate=learned): its classifier is trained on TRAINING seeds only, built once
and cached by content, and the gate runs as a cell with a tuned threshold."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmark.evaluate import Evaluator
from benchmark.seeds import DEFAULT_SPLITS, TRAIN_SEED_MIN
from tests.conftest import SMALL_POLICY, compose_cfg
from tests.malicious_zip import Payload

LEARNED = [
    "env=empty5x5_random",
    "gate=learned",
    "slm=oracle",
    "prompt=basic",
    "gate.mc_samples=5",
    "gate.train_episodes=12",
    *SMALL_POLICY,
]


def rolled_out_seeds(monkeypatch) -> list[int]:
    """Every seed an Evaluator rolls out from now on (the real run, recorded)."""
    seen: list[int] = []
    real_run = Evaluator.run

    def spy(self, seeds, *args, **kw):
        seen.extend(seeds)
        return real_run(self, seeds, *args, **kw)

    monkeypatch.setattr(Evaluator, "run", spy)
    return seen


def test_the_classifier_never_sees_a_validation_or_test_seed(trained_root, monkeypatch):
    from benchmark.build import build

    seen = rolled_out_seeds(monkeypatch)
    cfg = compose_cfg(trained_root, *LEARNED, "gate.tau=0.5")
    evaluation = build(cfg)
    gate = evaluation.gate()
    assert gate.classifier is not None and len(seen) == 12
    evaluated = set(DEFAULT_SPLITS.ranges["validation"]) | set(DEFAULT_SPLITS.ranges["test"])
    assert min(seen) >= TRAIN_SEED_MIN and not set(seen) & evaluated
    infos = [json.loads(p.read_text()) for p in (trained_root / "gates").glob("*/info.json")]
    (recorded,) = [i for i in infos if i["key"]["features"] == ["total", "aleatoric", "epistemic"]]
    assert recorded["training_seeds"][2] == 12 and recorded["judged_steps"] > 0
    assert evaluation.gate_info["degenerate"] == recorded["degenerate"]  # None or why
    # built once: a second cell of the same checkpoint, env and features rolls out nothing
    seen.clear()
    build(compose_cfg(trained_root, *LEARNED, "gate.tau=0.7")).gate()
    assert seen == []
    # the scores are probabilities, and the gate reads them from step records the same way
    records = [{"total": h, "aleatoric": h / 2, "epistemic": h / 2} for h in (0.1, 1.0, 2.0)]
    scores = gate.scores(records)
    assert ((0 <= scores) & (scores <= 1)).all()


def test_policy_probabilities_are_a_named_feature_of_its_own_classifier(trained_root, monkeypatch):
    """gate.features=[..., policy_probs]: PPO's action probabilities, one column per action,
    in the classifier's identity (another cached classifier, another cell), still trained on
    training seeds only, and read alike from the run-time uncertainty and from step records."""
    from benchmark.build import build
    from benchmark.cell import CellSpec
    from benchmark.uncertainty import mc_dropout

    seen = rolled_out_seeds(monkeypatch)
    cfg = compose_cfg(trained_root, *LEARNED, "gate.tau=0.5", "gate.features=[total,policy_probs]")
    evaluation = build(cfg)
    gate = evaluation.gate()
    n_actions = len(evaluation.task.action_names)
    assert gate.classifier.n_features_in_ == 1 + n_actions
    assert len(seen) == 12 and min(seen) >= TRAIN_SEED_MIN
    keys = [json.loads(p.read_text())["key"] for p in (trained_root / "gates").glob("*/info.json")]
    assert {"features": ["total", "policy_probs"]}.items() <= next(
        k for k in keys if "policy_probs" in k["features"]
    ).items()
    plain = compose_cfg(trained_root, *LEARNED, "gate.tau=0.5")
    assert CellSpec.from_config(cfg).config["gate"] != CellSpec.from_config(plain).config["gate"]
    # the gate's run-time scores equal those it gives the same steps' records
    task = evaluation.task
    obs = np.stack([task.episode(s).obs for s in (100, 101, 102)])
    unc = mc_dropout(evaluation.policy, obs, 5)
    records = [
        {"total": float(unc.total[j]), "policy_probs": unc.policy_probs[j].tolist()}
        for j in range(len(obs))
    ]
    np.testing.assert_allclose(
        gate._score({"total": unc.total, "policy_probs": unc.policy_probs}),
        gate.scores(records),
        atol=1e-6,
    )
    assert (
        gate.mask(unc, [100, 101, 102], [0, 0, 0]).tolist()
        == (gate.scores(records) >= 0.5).tolist()
    )


def test_a_classifier_without_a_mistake_to_learn_scores_zero():
    """Training records where PPO is never wrong give a constant classifier (one class)."""
    from sklearn.dummy import DummyClassifier

    from benchmark.gates import LearnedGate, feature_matrix

    columns = {"total": [0.1, 0.5], "policy_probs": [[0.2, 0.3, 0.5], [0.9, 0.05, 0.05]]}
    x = feature_matrix(columns, ["total", "policy_probs"])
    assert x.tolist() == [[0.1, 0.2, 0.3, 0.5], [0.5, 0.9, 0.05, 0.05]]
    assert feature_matrix({"total": []}, ["total"]).shape == (0, 1)
    model = DummyClassifier(strategy="prior").fit(x, [0, 0])
    gate = LearnedGate(0.5, ["total", "policy_probs"], classifier=model)
    records = [{"total": t, "policy_probs": p} for t, p in zip(*columns.values(), strict=True)]
    assert gate.scores(records).tolist() == [0.0, 0.0]


def test_a_classifier_that_cannot_rank_mistakes_is_flagged_degenerate():
    """One class of training labels, or an AUROC below 0.55 on its own training data: its
    info says why (info.json, the cell summary's gate_degenerate); a useful one says None."""
    from benchmark.learned import degenerate, fit

    x = np.linspace(0, 1, 60)[:, None]  # 60 judged steps: enough for the trees to split
    wrong = (x[:, 0] > 0.5).astype(int)
    _, one_class = fit(x, np.zeros(60, int))  # PPO never wrong on the training seeds
    assert one_class["mistakes"] == 0 and "one class only" in one_class["degenerate"]
    _, blind = fit(np.zeros((60, 1)), wrong)  # features that tell nothing
    assert blind["training_auroc"] == 0.5 and "AUROC" in blind["degenerate"]
    assert "0.500, below 0.55" in blind["degenerate"]
    _, useful = fit(x, wrong)
    assert useful["training_auroc"] == 1.0 and useful["degenerate"] is None
    # an info.json written before the AUROC was recorded: the label counts still tell
    assert "one class" in degenerate({"judged_steps": 9, "mistakes": 9})
    assert degenerate({"judged_steps": 9, "mistakes": 3}) is None


def test_a_classifier_without_both_classes_still_scores_every_step():
    """PPO never wrong, always wrong, or no judged step at all on the training seeds: the
    classifier is a constant one that the gate can still score with (0, 1, 0), its info has no
    training AUROC, and it is named degenerate; an AUROC of exactly 0.55 is not."""
    from benchmark.gates import LearnedGate
    from benchmark.learned import MIN_TRAINING_AUROC, degenerate, fit

    x = np.linspace(0, 1, 6)[:, None]
    records = [{"total": float(t)} for t in x[:, 0]]
    for labels, score in ((np.zeros(6, int), 0.0), (np.ones(6, int), 1.0)):
        model, info = fit(x, labels)
        assert info["training_auroc"] is None and info["judged_steps"] == 6
        assert info["degenerate"] is not None
        assert LearnedGate(0.5, ["total"], classifier=model).scores(records).tolist() == [score] * 6
    model, info = fit(np.zeros((0, 1)), np.zeros(0, int))
    assert (info["judged_steps"], info["mistakes"], info["training_auroc"]) == (0, 0, None)
    assert "one class only (0 of 0" in info["degenerate"]
    assert LearnedGate(0.5, ["total"], classifier=model).scores(records).tolist() == [0.0] * 6
    at_threshold = {"judged_steps": 9, "mistakes": 3, "training_auroc": MIN_TRAINING_AUROC}
    assert degenerate(at_threshold) is None


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


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("gate.tau=1.5", "gate.tau=1.5 is invalid for gate 'learned': allowed 'auto' or a number in [0, 1]"),
        ("gate.tau=-0.1", "gate.tau=-0.1 is invalid for gate 'learned'"),
        ("gate.tau_range=[0.5,1.5]", "gate.tau_range=[0.5, 1.5] is invalid for gate 'learned': allowed 0 <= low < high <= 1"),
    ],
)  # fmt: skip
def test_a_learned_gates_tau_is_a_probability(tmp_path, override, message):
    """Its score is a probability: a tau above 1 never asks, even where log2|A| (fourrooms:
    1.585 bits) would let an entropy gate's tau through. Refused before any training."""
    from benchmark.build import prepare

    cfg = compose_cfg(tmp_path, "env=fourrooms", "gate=learned", override)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        prepare(cfg)
    assert not (tmp_path / "checkpoints").exists()
    prepare(compose_cfg(tmp_path, "env=fourrooms", "gate=learned", "gate.tau=1.0"))
    # a tau grid shared with the entropy gates (+experiment=gates) runs those cells on purpose
    prepare(compose_cfg(tmp_path, "env=fourrooms", "gate=learned", "gate.tau=1.5",
                        "allow_tau_above_max=true"))  # fmt: skip


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
    assert "gate_auroc_gate_score" in summary  # its own score's AUROC (None without a mistake)
    assert "gate_degenerate" in summary  # None, or why its classifier ranks nothing


def test_a_learned_gates_step_records_carry_its_score_and_its_auroc():
    """StepRecorder scores a trained gate's records in one batch (what its threshold applies
    to); gate_quality then reports that score's AUROC beside the entropies'. An untrained gate's
    records get no score and no such field."""
    from sklearn.linear_model import LogisticRegression

    from benchmark.analysis import StepRecorder, gate_quality
    from benchmark.gates import EntropyGate, LearnedGate

    total = [0.1, 0.2, 0.9, 1.0, 0.15, 0.95]
    wrong = [0, 0, 1, 1, 0, 1]
    model = LogisticRegression().fit(np.array(total)[:, None], wrong)
    gate = LearnedGate(0.5, ["total"], classifier=model)

    def records(recorder):
        recorder._records = [
            {
                "seed": 100 + i // 2,
                "step": i % 2,
                "total": t,
                "aleatoric": t,
                "epistemic": 0.0,
                "ppo_optimal": not w,
                "queried": False,
                "action_optimal": not w,
            }
            for i, (t, w) in enumerate(zip(total, wrong, strict=True))
        ]
        return recorder.records

    scored = records(StepRecorder(gate))
    expected = gate.scores(scored)
    assert [r["gate_score"] for r in scored] == pytest.approx(expected.tolist(), abs=1e-6)
    quality = gate_quality(scored)
    assert quality["gate_auroc_gate_score"] == 1.0  # the score ranks every mistake first
    plain = records(StepRecorder(EntropyGate(0.5)))
    assert "gate_score" not in plain[0] and "gate_auroc_gate_score" not in gate_quality(plain)


def test_the_classifier_scores_ppos_mistakes_above_its_good_steps(trained_root):
    """The labels point the right way: on the very records the classifier was trained on (PPO's
    own episodes on the 12 training seeds, replayed), the steps the expert judges PPO wrong on
    score higher than those it judges right (a training-set AUROC well above 1/2; inverted
    labels give one well below)."""
    from benchmark.analysis.quality import auroc
    from benchmark.build import build
    from benchmark.learned import splits_of, training_records

    cfg = compose_cfg(trained_root, *LEARNED, "gate.tau=0.5")
    evaluation = build(cfg)
    gate = evaluation.gate()
    key = {"train_episodes": 12, "mc_samples": 5}
    _, records = training_records(evaluation.task, evaluation.policy, key, splits_of(cfg))
    judged = [r for r in records if r["ppo_optimal"] is not None]
    wrong = [not r["ppo_optimal"] for r in judged]
    assert 0 < sum(wrong) < len(wrong)  # both classes to learn from
    scores = gate.scores(judged)
    mistakes = scores[np.array(wrong)]
    good = scores[~np.array(wrong)]
    assert mistakes.mean() > good.mean()
    assert auroc(scores.tolist(), wrong) > 0.8


def test_training_records_are_ppos_own_unasked_episodes_on_its_training_seeds(untrained):
    """The first `train_episodes` seeds of the learned gate's own training-seed stream, rolled out
    whole by PPO alone (the gate never asks), each step judged, with `mc_samples` passes."""
    from benchmark.learned import SEED_STREAM, training_records
    from benchmark.seeds import dataset_seeds

    task, policy, _ = untrained
    seeds, records = training_records(
        task, policy, {"train_episodes": 2, "mc_samples": 2}, DEFAULT_SPLITS
    )
    # pinned: another stream is another classifier in every cache
    assert SEED_STREAM == 28 and seeds == dataset_seeds(2, 28, DEFAULT_SPLITS)
    assert seeds == [1430922750, 1829299476]
    for seed in seeds:
        steps = [r["step"] for r in records if r["seed"] == seed]
        assert steps == list(range(len(steps))) and steps
    assert {r["seed"] for r in records} == set(seeds)
    assert not any(r["queried"] for r in records)
    assert all(r["action"] == r["ppo"] and r["ppo_optimal"] is not None for r in records)
    # two dropout passes of an untrained PPO disagree a little on nearly every step
    assert sum(r["epistemic"] > 0 for r in records) > len(records) / 2
    # one pass cannot disagree with itself: the records are computed with `mc_samples` passes
    _, single = training_records(
        task, policy, {"train_episodes": 1, "mc_samples": 1}, DEFAULT_SPLITS
    )
    assert [r["seed"] for r in single[:1]] == seeds[:1]
    assert {r["epistemic"] for r in single} == {0.0}


def test_train_labels_ppos_non_optimal_steps_and_fits_the_named_features(untrained):
    """Label 1 is "PPO's action is not optimal" on every judged training step; the classifier
    reads the key's features in the key's order, and its info has the seeds, counts and AUROC."""
    from benchmark.analysis import auroc
    from benchmark.gates import feature_matrix
    from benchmark.learned import train, training_records

    task, policy, _ = untrained
    key = {"train_episodes": 2, "mc_samples": 2, "features": ["policy_probs", "total"]}
    model, info = train(task, policy, key, DEFAULT_SPLITS)
    seeds, records = training_records(task, policy, key, DEFAULT_SPLITS)
    wrong = [not r["ppo_optimal"] for r in records]
    assert info["training_seeds"] == [min(seeds), max(seeds), 2]
    assert info["judged_steps"] == len(records) and info["mistakes"] == sum(wrong)
    assert 0 < sum(wrong) < len(wrong)  # an untrained PPO is wrong often, not always
    x = feature_matrix({f: [r[f] for r in records] for f in key["features"]}, key["features"])
    assert model.n_features_in_ == len(task.action_names) + 1 == x.shape[1]
    scores = model.predict_proba(x)[:, 1].tolist()
    assert info["training_auroc"] == pytest.approx(auroc(scores, wrong))
    assert info["training_auroc"] > 0.8 and info["degenerate"] is None
    assert info == json.loads(json.dumps(info))  # what info.json holds


def test_a_classifier_is_built_once_per_identity_from_training_seeds_only(
    untrained, tmp_path, monkeypatch, caplog
):
    """gate=learned without the minute of PPO training: an untrained policy's own episodes on
    training seeds become the classifier's data; its info.json records the identity it is
    cached under (the checkpoint's bytes, the env, features, episodes, MC samples) and its
    label counts; the same identity is read back without a rollout, another one is built."""
    from omegaconf import OmegaConf

    from benchmark.cell import digest
    from benchmark.learned import (
        CLASSIFIER_VERSION,
        classifier,
        degenerate,
        splits_of,
        training_records,
    )
    from benchmark.store import file_sha256

    task, policy, checkpoint = untrained
    base = ["env=empty5x5_random", "gate=learned", "gate.tau=0.5", "gate.mc_samples=2"]
    cfg = compose_cfg(tmp_path, *base, "gate.train_episodes=2")
    seen = rolled_out_seeds(monkeypatch)
    model, info = classifier(cfg, task, policy, checkpoint)
    trained_on = list(seen)

    evaluated = set(DEFAULT_SPLITS.ranges["validation"]) | set(DEFAULT_SPLITS.ranges["test"])
    assert len(seen) == 2 and min(seen) >= TRAIN_SEED_MIN and not set(seen) & evaluated
    assert info["training_seeds"] == [min(seen), max(seen), 2]
    assert info["key"] == {
        "version": CLASSIFIER_VERSION,
        "checkpoint_sha256": file_sha256(checkpoint),
        "env": OmegaConf.to_container(cfg.env, resolve=True),
        "features": ["total", "aleatoric", "epistemic"],
        "train_episodes": 2,
        "mc_samples": 2,
    }
    (stored,) = (tmp_path / "gates").glob("*/info.json")
    assert stored.parent.name == digest(info["key"])  # cached under its identity
    # the counts are those of the very records it was trained on: PPO's non-optimal steps
    seeds, records = training_records(task, policy, info["key"], splits_of(cfg))
    judged = [r for r in records if r["ppo_optimal"] is not None]
    assert seeds == trained_on
    assert info["judged_steps"] == len(judged) > 0
    assert info["mistakes"] == sum(not r["ppo_optimal"] for r in judged)
    assert info["degenerate"] is None is degenerate(info)  # an untrained PPO: mistakes to learn
    assert "is degenerate" not in caplog.text
    x = np.array([[r[f] for f in info["key"]["features"]] for r in judged])
    scores = model.predict_proba(x)[:, 1]
    assert ((0 <= scores) & (scores <= 1)).all() and scores.min() < scores.max()

    # built once: the same identity is read back, scores and all, without a rollout
    seen.clear()
    again, info_again = classifier(cfg, task, policy, checkpoint)
    assert seen == [] and info_again == info
    np.testing.assert_array_equal(again.predict_proba(x), model.predict_proba(x))
    # another identity (here the number of training episodes) is another classifier
    other = compose_cfg(tmp_path, *base, "gate.train_episodes=1")
    _, info_other = classifier(other, task, policy, checkpoint)
    assert len(seen) == 1 and info_other["training_seeds"][2] == 1
    assert len(list((tmp_path / "gates").glob("*/classifier.json"))) == 2
    assert not list((tmp_path / "gates").rglob("*.pkl"))  # stored as data, never pickled


def test_a_pickled_classifier_in_the_results_root_is_refused_never_loaded(untrained, tmp_path):
    """A gate dir holding `classifier.pkl` (an earlier release's, or planted): the ordinary
    gate=learned load refuses it in one line naming the file and what to do, and never
    unpickles it (its payload's marker file never appears)."""
    import pickle

    from benchmark.learned import classifier

    task, policy, checkpoint = untrained
    cfg = compose_cfg(tmp_path, "env=empty5x5_random", "gate=learned", "gate.mc_samples=2",
                      "gate.train_episodes=1")  # fmt: skip
    classifier(cfg, task, policy, checkpoint)
    (gate_dir,) = (tmp_path / "gates").glob("*/")
    for saved in ("classifier.json", "classifier.safetensors"):  # the earlier release's layout
        (gate_dir / saved).unlink(missing_ok=True)
    marker = tmp_path / "payload-ran"
    (gate_dir / "classifier.pkl").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(ValueError) as refused:
        classifier(cfg, task, policy, checkpoint)
    assert not marker.exists()
    message = str(refused.value)
    assert "\n" not in message and f"refused to read {gate_dir / 'classifier.pkl'}" in message
    assert f"delete {gate_dir} and rerun" in message


def test_the_saved_classifier_scores_as_the_fitted_one(tmp_path):
    """The classifier read back from JSON and safetensors gives the fitted estimator's
    probabilities bit for bit, missing feature values included; a constant one too."""
    from benchmark.learned import fit, load_classifier, save_classifier

    rng = np.random.default_rng(0)
    x = rng.random((300, 3))
    x[rng.random(x.shape) < 0.05] = np.nan
    y = (np.nan_to_num(x[:, 0]) + 0.3 * rng.random(300) > 0.6).astype(int)
    probe = rng.random((1000, 3))
    probe[rng.random(probe.shape) < 0.1] = np.nan
    for labels in (y, np.zeros(300, int)):
        model, _ = fit(x, labels)
        saved = tmp_path / f"c{labels.sum()}"
        saved.mkdir()
        save_classifier(model, saved)
        rebuilt = load_classifier(saved)
        assert rebuilt.classes_.tolist() == model.classes_.tolist()
        np.testing.assert_array_equal(rebuilt.predict_proba(probe), model.predict_proba(probe))


def test_a_cached_classifier_is_judged_again_when_read_and_warned_about(
    untrained, tmp_path, caplog
):
    """An info.json of an earlier release has no `degenerate` (nor an AUROC): reading it judges
    the classifier from its label counts, and a degenerate one is named in a warning."""
    import logging

    from benchmark.learned import classifier

    task, policy, checkpoint = untrained
    cfg = compose_cfg(
        tmp_path, "env=empty5x5_random", "gate=learned", "gate.mc_samples=2",
        "gate.train_episodes=1", "++env.note=${gate.mc_samples}",
    )  # fmt: skip
    classifier(cfg, task, policy, checkpoint)
    (path,) = (tmp_path / "gates").glob("*/info.json")
    stored = json.loads(path.read_text())
    assert stored["key"]["env"]["note"] == 2  # the identity holds the env config resolved
    del stored["degenerate"], stored["training_auroc"]
    stored["mistakes"] = stored["judged_steps"]  # PPO always wrong on its training seeds
    path.write_text(json.dumps(stored))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="benchmark.learned"):
        _, info = classifier(cfg, task, policy, checkpoint)
    judged = stored["judged_steps"]
    why = f"its training labels have one class only ({judged} of {judged} judged steps"
    assert info["degenerate"].startswith(why)
    assert info["degenerate"] == f"{why} are PPO mistakes)"
    assert (
        f"gate=learned: the classifier in {path.parent} is degenerate: {why} are PPO mistakes); "
        "its tau cannot pick out PPO's mistakes (more gate.train_episodes, other gate.features "
        "or another policy may help)"
    ) in caplog.text


def test_the_classifier_recipe_is_the_one_its_version_names(untrained, tmp_path):
    """Gradient-boosted trees with fixed settings (no early stopping, seeded): another recipe is
    another classifier in every cache, so it comes with a new CLASSIFIER_VERSION. The splits it
    checks its training seeds against are the job's."""
    from benchmark.learned import CLASSIFIER_VERSION, fit, splits_of

    x = np.linspace(0, 1, 40)[:, None]
    model, _ = fit(x, (x[:, 0] > 0.5).astype(int))
    recipe = {"max_iter": 100, "max_leaf_nodes": 15, "early_stopping": False, "random_state": 0}
    assert CLASSIFIER_VERSION == 1 and recipe.items() <= model.get_params().items()
    cfg = compose_cfg(tmp_path, "gate=learned", "splits.validation=[0,10]", "splits.test=[10,20]")
    splits = splits_of(cfg)
    assert splits.ranges["validation"] == range(0, 10) and splits.ranges["test"] == range(10, 20)
