"""Gates decide, per live episode and step, whether the consultant is asked.

Every gate is batch-independent: its decision for an episode depends only on that episode's
uncertainty and (seed, episode seed, step), never on which other episodes share the batch, so
lockstep and sequential evaluation agree.

A gate class is built from its own typed constructor arguments only; what a job needs to know
about it (does it use a policy, MC-dropout uncertainty, a threshold to tune) are class
attributes, the one source of truth. The job-level settings of conf/gate (tau=auto, tau_range,
mc_samples, match_tau) are read by `GateSettings`; values are checked once, in validate.py."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np
from hydra.utils import get_class

from benchmark.uncertainty import Uncertainty

TAU_AUTO = "auto"  # gate.tau=auto: tuned with Optuna on validation seeds
P_MATCH = "match"  # gate.p=match: the random gate spends the entropy cell's query budget


class Gate:
    """Base gate: `needs_policy` False means the job never loads or trains a PPO policy."""

    name = "gate"
    needs_policy = True
    needs_uncertainty = False
    threshold_field: str | None = None  # which Uncertainty field a threshold applies to
    score_is_probability = False  # True: tau compares a probability, so it lies in [0, 1]

    def mask(self, unc: Uncertainty | None, seeds: list[int], step: list[int]) -> np.ndarray:
        raise NotImplementedError

    def scores(self, records: list[dict]) -> np.ndarray:
        """The signal a threshold applies to, from per-step records (benchmark.analysis.steps),
        for analyses of a gate's score offline (ROC, AUROC)."""
        if self.threshold_field is None:
            raise ValueError(f"gate {self.name!r} has no threshold to tune")
        return np.asarray([r[self.threshold_field] for r in records], float)


class ConstantGate(Gate):
    """A gate that never or always asks, whatever the uncertainty."""

    asks = False

    def mask(self, unc, seeds, step):
        return np.full(len(seeds), self.asks, dtype=bool)


class NeverGate(ConstantGate):
    """PPO-only."""

    name = "never"


class AlwaysGate(ConstantGate):
    """SLM-only: the consultant acts every step and sees no PPO suggestion."""

    name = "always"
    needs_policy = False
    asks = True


class EntropyGate(Gate):
    """ASK: query when the total predictive entropy H(o) >= tau (bits)."""

    name = "entropy"
    needs_uncertainty = True
    threshold_field = "total"

    def __init__(self, tau: float) -> None:
        self.tau = float(tau)

    def mask(self, unc, seeds, step):
        return getattr(unc, self.threshold_field) >= self.tau


class EpistemicGate(EntropyGate):
    """Query when the epistemic part (mutual information) >= tau."""

    name = "epistemic"
    threshold_field = "epistemic"


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
    trained = True  # the job builds `classifier` (benchmark.learned.classifier)

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


class RandomGate(Gate):
    """Query with probability p, seeded per (seed, episode seed, step): the IR-matched control
    that asks whether the entropy signal beats chance at the same query budget."""

    name = "random"

    def __init__(self, p: float, seed: int = 0) -> None:
        self.p, self.seed = float(p), int(seed)

    def mask(self, unc, seeds, step):
        draws = [
            np.random.default_rng([self.seed, s, t]).random()
            for s, t in zip(seeds, step, strict=False)
        ]
        return np.asarray(draws) < self.p


@dataclass(frozen=True)
class GateSettings:
    """A gate config (conf/gate/<name>.yaml) read once: the class, its constructor arguments,
    and the job-level settings around it."""

    cls: type[Gate]
    args: dict[str, Any]  # the constructor arguments the config gives (tau may be "auto")
    tau_range: tuple[float, float] | None
    mc_samples: int | None  # None when the gate needs no uncertainty
    match_tau: Any = None
    normalise: bool = False  # entropies over log2 of the admissible actions, in [0, 1]

    @classmethod
    def from_config(cls, gate_cfg: Any) -> GateSettings:
        gate = dict(gate_cfg)
        gate_cls = get_class(gate["_target_"])
        if not (isinstance(gate_cls, type) and issubclass(gate_cls, Gate)):
            raise ValueError(
                f"gate._target_={gate['_target_']!r} is not a benchmark.gates.Gate subclass"
            )
        params = inspect.signature(gate_cls.__init__).parameters
        args = {k: gate[k] for k in params if k != "self" and k in gate}
        tau_range = gate.get("tau_range")
        return cls(
            cls=gate_cls,
            args=args,
            tau_range=tuple(float(v) for v in tau_range) if tau_range is not None else None,
            mc_samples=int(gate.get("mc_samples", 50)) if gate_cls.needs_uncertainty else None,
            match_tau=gate.get("match_tau"),
            normalise=gate.get("normalise") is True,
        )

    @property
    def name(self) -> str:
        return self.cls.name

    @property
    def needs_policy(self) -> bool:
        return self.cls.needs_policy

    @property
    def asks(self) -> bool:
        """False for PPO-only: no consultant and no prompt are built."""
        return self.cls is not NeverGate

    @property
    def tunes_tau(self) -> bool:
        return str(self.args.get("tau")) == TAU_AUTO

    @property
    def matches_ir(self) -> bool:
        return str(self.args.get("p")) == P_MATCH

    def build(self, **resolved: Any) -> Gate:
        """The gate, with `resolved` replacing settings decided at run time (a tuned tau, a
        matched p)."""
        return self.cls(**{**self.args, **resolved})
