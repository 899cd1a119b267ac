"""The learned gate's classifier (gate=learned): built once per (checkpoint, env, features,
training episodes, MC samples) and cached under `<paths.root>/gates/<key>/` with an identity by
content (the checkpoint's SHA-256, the resolved env config), like the suite's other artefacts.

Its data are PPO's own episodes on TRAINING seeds (benchmark.seeds.training_seeds, all >= 200,
checked against every evaluation split): the gate computes its entropies but never asks, and
each judged step (the expert has an answer) is labelled "PPO's action is not optimal". No
validation or test seed is ever rolled out here, so tuning tau on validation seeds and
evaluating on test seeds stay clean."""

from __future__ import annotations

import json
import logging
import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from benchmark.cell import digest
from benchmark.envs.base import env_identity
from benchmark.results import file_sha256, write_json
from benchmark.store import Store, build_once

CLASSIFIER_VERSION = 1  # bump with any change here that changes a trained classifier
SEED_STREAM = 28  # the training-seed stream the rollouts draw from (not PPO's own)
MIN_TRAINING_AUROC = 0.55  # below it on its own training data, the score ranks nothing

log = logging.getLogger(__name__)


def gate_inputs(cfg: DictConfig, task: Any, policy: Any, checkpoint: Path) -> tuple[dict, dict]:
    """The learned gate's trainer (`LearnedGate.trainer`, called by build.py): its
    `classifier` argument and the classifier's info."""
    model, info = classifier(cfg, task, policy, checkpoint)
    return {"classifier": model}, info


def classifier(cfg: DictConfig, task: Any, policy: Any, checkpoint: Path) -> tuple[Any, dict]:
    """The fitted classifier of this cell's gate, trained on first use, and its info.json with
    `degenerate` (why its score cannot rank PPO's mistakes, None when it can), warned about."""
    gate = cfg.gate
    features = [str(f) for f in gate.features]
    key = {
        "version": CLASSIFIER_VERSION,
        "checkpoint_sha256": file_sha256(checkpoint),
        "env": env_identity(OmegaConf.to_container(cfg.env, resolve=True)),
        "features": features,
        "train_episodes": int(gate.train_episodes),
        "mc_samples": int(gate.mc_samples),
    }
    out = Store.of(cfg).gate_dir(digest(key))

    def make(work: Path) -> None:
        model, info = train(task, policy, key, splits_of(cfg))
        write_json(work / "info.json", {"key": key, **info})
        (work / "classifier.pkl").write_bytes(pickle.dumps(model))

    build_once(out, make, lambda d: (d / "classifier.pkl").is_file())
    info = json.loads((out / "info.json").read_text())
    info["degenerate"] = degenerate(info)  # also for an info.json of an earlier release
    if info["degenerate"]:
        log.warning(
            "gate=learned: the classifier in %s is degenerate: %s; its tau cannot pick out PPO's "
            "mistakes (more gate.train_episodes, other gate.features or another policy may help)",
            out,
            info["degenerate"],
        )
    return pickle.loads((out / "classifier.pkl").read_bytes()), info


def splits_of(cfg: DictConfig):
    from benchmark.seeds import Splits

    return Splits.from_config(cfg.get("splits"))


def training_records(
    task: Any, policy: Any, key: dict, splits: Any
) -> tuple[list[int], list[dict]]:
    """PPO's own episodes on the first `train_episodes` training seeds: (seeds, step records)."""
    from benchmark.analysis import StepRecorder
    from benchmark.evaluate import Evaluator
    from benchmark.gates import EntropyGate
    from benchmark.seeds import dataset_seeds

    seeds = dataset_seeds(int(key["train_episodes"]), SEED_STREAM, splits)
    recorder = StepRecorder()
    Evaluator(
        task=task, gate=EntropyGate(math.inf), policy=policy, mc_samples=int(key["mc_samples"])
    ).run(seeds, on_step=recorder)
    return seeds, recorder.records


def train(task: Any, policy: Any, key: dict, splits: Any) -> tuple[Any, dict]:
    """Fit the classifier on the training-seed records."""
    from benchmark.gates import feature_matrix

    seeds, records = training_records(task, policy, key, splits)
    judged = [r for r in records if r.get("ppo_optimal") is not None]
    x = feature_matrix({f: [r[f] for r in judged] for f in key["features"]}, key["features"])
    y = np.array([not r["ppo_optimal"] for r in judged], int)
    model, info = fit(x, y)
    info = {"training_seeds": [min(seeds), max(seeds), len(seeds)], **info}
    return model, json.loads(json.dumps(info))


def fit(x: np.ndarray, y: np.ndarray) -> tuple[Any, dict]:
    """The classifier of features `x` and labels `y` (1: PPO's action not optimal), a constant
    one when PPO is never (or always) wrong, and its info: the counts, its AUROC on its own
    training data and `degenerate`."""
    from sklearn.dummy import DummyClassifier
    from sklearn.ensemble import HistGradientBoostingClassifier

    from benchmark.analysis import auroc

    training_auroc = None
    if len(set(y.tolist())) < 2:
        model = DummyClassifier(strategy="prior").fit(
            np.zeros((max(len(y), 1), x.shape[1])), y if len(y) else np.zeros(1, int)
        )
    else:
        model = HistGradientBoostingClassifier(
            max_iter=100, max_leaf_nodes=15, early_stopping=False, random_state=0
        ).fit(x, y)
        training_auroc = auroc(model.predict_proba(x)[:, 1].tolist(), y.astype(bool).tolist())
    info = {"judged_steps": len(y), "mistakes": int(y.sum()), "training_auroc": training_auroc}
    return model, {**info, "degenerate": degenerate(info)}


def degenerate(info: dict) -> str | None:
    """Why a classifier's score cannot rank PPO's mistakes, from its info; None when it can."""
    judged, mistakes = info["judged_steps"], info["mistakes"]
    if mistakes in (0, judged):
        return (
            f"its training labels have one class only ({mistakes} of {judged} judged steps are "
            "PPO mistakes)"
        )
    value = info.get("training_auroc")  # absent in an info.json of an earlier release
    if value is not None and value < MIN_TRAINING_AUROC:
        return f"its AUROC on its own training data is {value:.3f}, below {MIN_TRAINING_AUROC}"
    return None
