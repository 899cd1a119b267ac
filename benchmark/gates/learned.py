"""The learned gate: a classifier of the step's uncertainty (and PPO's action probabilities),
trained on TRAINING seeds by benchmark.learned, asks when PPO's action is likely wrong."""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmark.gates.entropy import EntropyGate

# what a learned gate may read at run time: the MC-dropout entropies (one column each) and PPO's
# action probabilities with dropout off (`policy_probs`: one column per action, in index order)
FEATURES = ("total", "aleatoric", "epistemic", "policy_probs")


def feature_matrix(columns: dict[str, Any], features: tuple[str, ...] | list[str]) -> np.ndarray:
    """The classifier's input, (rows, columns): the `features` in their order, a per-action
    feature (policy_probs, (rows, A)) spread over A columns. `columns` maps each feature to its
    values, from a gate's Uncertainty or from per-step records alike."""
    blocks = [np.asarray(columns[f], float) for f in features]
    rows = len(blocks[0])
    if rows == 0:  # no step: the per-action width is unknown (only a constant model sees this)
        return np.zeros((0, len(blocks)))
    return np.column_stack([b.reshape(rows, -1) for b in blocks])


class LearnedGate(EntropyGate):
    """Query when a classifier's score of the step's MC-dropout entropies (and, when named,
    PPO's action probabilities) is >= tau: its estimate that PPO's action is not optimal. The
    classifier is trained on step records of TRAINING seeds only and handed in by the job
    (benchmark.learned builds and caches it)."""

    name = "learned"
    threshold_field = None
    score_is_probability = True
    needs_training = True  # the job builds `classifier`
    trainer = "benchmark.learned.gate_inputs"
    report_order, marker = None, None

    @classmethod
    def config_keys(cls) -> frozenset[str]:
        return super().config_keys() - {"classifier"}  # its trainer's, never configured

    @classmethod
    def check_config(cls, gate: Any) -> None:
        super().check_config(gate)
        features = gate.get("features")
        if features is not None:
            listed = not isinstance(features, str)
            bad = [f for f in features if f not in FEATURES] if listed else [features]
            if bad or not features:
                raise ValueError(
                    f"gate.features={list(features) if listed else features!r} is invalid: "
                    f"allowed a non-empty list of {', '.join(FEATURES)}"
                )
        n_train = gate.get("train_episodes")
        if n_train is not None and not (
            isinstance(n_train, int) and not isinstance(n_train, bool) and n_train >= 1
        ):
            raise ValueError(f"gate.train_episodes={n_train!r} is invalid: allowed an integer >= 1")

    def __init__(
        self,
        tau: float,
        features: list[str] | tuple[str, ...] = FEATURES,
        train_episodes: int = 200,
        classifier: Any = None,
    ) -> None:
        super().__init__(tau)
        self.features, self.train_episodes = tuple(features), int(train_episodes)
        self.classifier = classifier

    def _score(self, columns: dict[str, np.ndarray]) -> np.ndarray:
        if self.classifier is None:
            raise RuntimeError("the learned gate has no classifier: build it through the job")
        proba = self.classifier.predict_proba(feature_matrix(columns, self.features))
        classes = list(self.classifier.classes_)
        if 1 not in classes:  # a constant classifier of training records without a mistake
            return np.zeros(len(proba))
        return proba[:, classes.index(1)]

    def mask(self, unc, seeds, step):
        return self._score({f: getattr(unc, f) for f in self.features}) >= self.tau

    def scores(self, records: list[dict]) -> np.ndarray:
        return self._score({f: [r[f] for r in records] for f in self.features})
