"""The learned gate's classifier (gate=learned): built once per (checkpoint, env, features,
training episodes, MC samples) and cached under `<paths.root>/gates/<key>/` with an identity by
content (the checkpoint's SHA-256, the resolved env config), like the suite's other artefacts.

Its data are PPO's own episodes on TRAINING seeds (benchmark.seeds.training_seeds, all >= 200,
checked against every evaluation split): the gate computes its entropies but never asks, and
each judged step (the expert has an answer) is labelled "PPO's action is not optimal". No
validation or test seed is ever rolled out here, so tuning tau on validation seeds and
evaluating on test seeds stay clean.

The fitted classifier is stored as data, never as a pickle: `classifier.json` (its kind, classes
and baseline) and `classifier.safetensors` (each tree's nodes), read back into `SavedClassifier`,
whose scores equal the fitted estimator's bit for bit (checked when it is saved). A
`classifier.pkl` of an earlier release is refused, never loaded: unpickling runs code."""

from __future__ import annotations

import json
import logging
import math
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
        save_classifier(model, work)

    refuse_pickle(out)
    build_once(out, make, lambda d: (d / SAVED_JSON).is_file())
    info = json.loads((out / "info.json").read_text())
    info["degenerate"] = degenerate(info)  # also for an info.json of an earlier release
    if info["degenerate"]:
        log.warning(
            "gate=learned: the classifier in %s is degenerate: %s; its tau cannot pick out PPO's "
            "mistakes (more gate.train_episodes, other gate.features or another policy may help)",
            out,
            info["degenerate"],
        )
    return load_classifier(out), info


# -- the classifier as data ---------------------------------------------------------------------

SAVED_JSON, SAVED_ARRAYS, OLD_PICKLE = "classifier.json", "classifier.safetensors", "classifier.pkl"
SAVED_FORMAT = 1
TREE_FIELDS = ("value", "feature_idx", "num_threshold", "missing_go_to_left", "left", "right",
               "is_leaf")  # fmt: skip


class SavedClassifier:
    """A fitted classifier rebuilt from `classifier.json` and `classifier.safetensors`: what the
    learned gate calls (`classes_`, `n_features_in_`, `predict_proba`) and nothing else. `kind` "prior": constant
    class probabilities (sklearn's DummyClassifier); "trees": binary gradient-boosted trees,
    P(class 1) = expit(baseline + the trees' leaf values, summed in order), as sklearn's
    HistGradientBoostingClassifier computes it."""

    def __init__(self, kind: str, classes: list, n_features: int, prior: list[float] | None = None,
                 baseline: float = 0.0, trees: list[dict[str, np.ndarray]] | None = None
                 ) -> None:  # fmt: skip
        self.kind, self.classes_, self.n_features_in_ = kind, np.asarray(classes), n_features
        self.prior, self.baseline, self.trees = prior, baseline, trees or []

    def predict_proba(self, x: Any) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if self.kind == "prior":
            return np.tile(np.asarray(self.prior, dtype=np.float64), (len(x), 1))
        from scipy.special import expit

        raw = np.full(len(x), self.baseline, dtype=np.float64)
        for tree in self.trees:
            raw += _tree_values(tree, x)
        proba = np.empty((len(x), 2), dtype=np.float64)
        proba[:, 1] = expit(raw)
        proba[:, 0] = 1 - proba[:, 1]
        return proba


def _tree_values(tree: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """Each row's leaf value: left where the feature <= the threshold (a NaN goes where the
    node says), as sklearn's TreePredictor walks its numeric nodes."""
    node = np.zeros(len(x), dtype=np.int64)
    rows = np.arange(len(x))
    while True:
        inner = tree["is_leaf"][node] == 0
        if not inner.any():
            return tree["value"][node]
        r, n = rows[inner], node[inner]
        v = x[r, tree["feature_idx"][n]]
        go_left = np.where(np.isnan(v), tree["missing_go_to_left"][n] == 1,
                           v <= tree["num_threshold"][n])  # fmt: skip
        node[r] = np.where(go_left, tree["left"][n], tree["right"][n]).astype(np.int64)


def as_data(model: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The fitted parameters `predict_proba` needs: (JSON, arrays). Refused (ValueError) for an
    estimator this rebuilds inexactly (categorical features, more than two classes)."""
    from sklearn.dummy import DummyClassifier
    from sklearn.ensemble import HistGradientBoostingClassifier

    classes = np.asarray(model.classes_).tolist()
    common = {"format": SAVED_FORMAT, "classes": classes, "n_features": int(model.n_features_in_)}
    if isinstance(model, DummyClassifier):
        prior = np.asarray(model.class_prior_, dtype=np.float64).tolist()
        return {**common, "kind": "prior", "prior": prior}, {}
    if not isinstance(model, HistGradientBoostingClassifier) or model.n_trees_per_iteration_ != 1:
        raise ValueError(f"cannot save a {type(model).__name__} with classes {classes} as data")
    if model.is_categorical_ is not None and np.any(model.is_categorical_):
        raise ValueError("cannot save gradient-boosted trees with categorical features as data")
    arrays = {}
    for i, (predictor,) in enumerate(model._predictors):
        for f in TREE_FIELDS:
            arrays[f"tree{i}.{f}"] = np.ascontiguousarray(predictor.nodes[f])
    baseline = float(np.asarray(model._baseline_prediction).reshape(-1)[0])
    meta = {**common, "kind": "trees", "baseline": baseline, "trees": len(model._predictors)}
    return meta, arrays


def from_data(meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> SavedClassifier:
    if meta.get("format") != SAVED_FORMAT or meta.get("kind") not in ("prior", "trees"):
        raise ValueError(f"a saved classifier of format {meta.get('format')!r}, kind "
                         f"{meta.get('kind')!r}: allowed format {SAVED_FORMAT}, prior or trees")  # fmt: skip
    n = int(meta["n_features"])
    if meta["kind"] == "prior":
        return SavedClassifier("prior", meta["classes"], n, prior=meta["prior"])
    trees = [{f: arrays[f"tree{i}.{f}"] for f in TREE_FIELDS} for i in range(int(meta["trees"]))]
    return SavedClassifier(
        "trees", meta["classes"], n, baseline=float(meta["baseline"]), trees=trees
    )


def save_classifier(model: Any, directory: Path, check: np.ndarray | None = None) -> None:
    """Write the classifier as data, after checking that the rebuilt one scores `check` (by
    default a grid of feature values) exactly as `model` does."""
    from safetensors.numpy import save_file

    meta, arrays = as_data(model)
    rows = check if check is not None else _check_rows(arrays, model)
    rebuilt = from_data(meta, arrays)
    if len(rows) and not np.array_equal(rebuilt.predict_proba(rows), model.predict_proba(rows)):
        raise ValueError("the classifier rebuilt from its saved parameters scores differently")
    save_file(arrays, str(directory / SAVED_ARRAYS))
    write_json(directory / SAVED_JSON, meta)


def _check_rows(arrays: dict[str, np.ndarray], model: Any) -> np.ndarray:
    """Every split threshold of every feature, and just past it: each side of every split."""
    n = int(model.n_features_in_)
    values = {i: [0.0] for i in range(n)}
    for key, column in arrays.items():
        if key.endswith(".feature_idx"):
            tree = key.rsplit(".", 1)[0]
            inner = arrays[f"{tree}.is_leaf"] == 0
            for f, t in zip(column[inner], arrays[f"{tree}.num_threshold"][inner], strict=True):
                values[int(f)] += [float(t), float(np.nextafter(t, np.inf))]
    longest = max(len(v) for v in values.values())
    return np.array([[v[k % len(v)] for v in values.values()] for k in range(longest)])


def refuse_pickle(directory: Path) -> None:
    """A classifier pickled by an earlier release is never loaded (unpickling runs code)."""
    old = Path(directory) / OLD_PICKLE
    if old.exists():
        raise ValueError(
            f"refused to read {old}: a learned-gate classifier pickled by an earlier release is "
            f"never loaded (unpickling runs code); delete {Path(directory)} and rerun to train it "
            "again"
        )


def load_classifier(directory: Path) -> SavedClassifier:
    """The classifier saved in `directory` (read as data: JSON and safetensors)."""
    from safetensors.numpy import load_file

    refuse_pickle(directory)
    meta = json.loads((Path(directory) / SAVED_JSON).read_text())
    arrays = load_file(str(Path(directory) / SAVED_ARRAYS)) if meta.get("kind") == "trees" else {}
    return from_data(meta, arrays)


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
