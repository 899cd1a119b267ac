"""Gates decide, per live episode and step, whether the consultant is asked.

Every gate is batch-independent: its decision for an episode depends only on that episode's
uncertainty and (seed, episode seed, step), never on which other episodes share the batch, so
lockstep and sequential evaluation agree.

A gate class is built from its own typed constructor arguments only; what a job needs to know
about it (does it use a policy, MC-dropout uncertainty, a threshold to tune) are class
attributes, the one source of truth. The job-level settings of conf/gate (tau=auto, tau_range,
mc_samples, match_tau) are read by `GateSettings`; values are checked once, in validate.py."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np
from hydra.utils import get_class

from benchmark.settings import STUDY, added, identity
from benchmark.uncertainty import Uncertainty

TAU_AUTO = "auto"  # gate.tau=auto: tuned with Optuna on validation seeds
P_MATCH = "match"  # gate.p=match: the random gate spends the entropy cell's query budget


class Gate:
    """Base gate: `needs_policy` False means the job never loads or trains a PPO policy.

    What the rest of the suite asks of a gate is declared here, on its class, and nowhere else
    (docs/gates.md, "Adding a gate"): cell.py, validate.py, build.py and the report read these
    from the class `gate._target_` names (the report: every gate of `available_gates()`), so a
    gate in another installed package needs no edit outside its own files."""

    name = "gate"
    needs_policy = True
    needs_uncertainty = False
    threshold_field: str | None = None  # which Uncertainty field a threshold applies to
    score_is_probability = False  # True: tau compares a probability, so it lies in [0, 1]
    # trained before it runs (by the job, on TRAINING seeds only): `trainer`, "module.function"
    # (cfg, task, policy, checkpoint) -> (constructor arguments it fills, info dict or None)
    needs_training = False
    trainer: str | None = None
    min_mc_samples = 1  # the fewest MC-dropout samples its signal means something with
    min_mc_samples_why = ""  # why, in the message that refuses fewer
    # the report: whether its cells form a frontier over a threshold (or p) to sweep, its place
    # in the tables' method order (None: after the ordered ones), its marker in the IR figure
    swept = False
    report_order: int | None = None
    marker: str | None = None
    # gate config keys its constructor does not take (read by the job or by tuning)
    SETTINGS = ("_target_", "name", "tau", "tau_range", "mc_samples", "match_tau")

    @classmethod
    def config_keys(cls) -> frozenset[str]:
        """The gate config keys it takes: its constructor's arguments and the job's settings."""
        params = inspect.signature(cls.__init__).parameters
        return frozenset(k for k in params if k not in ("self", "args", "kwargs")) | frozenset(
            cls.SETTINGS
        )

    @classmethod
    def check_config(cls, gate: Any) -> None:
        """Fail, naming the bad value and what is allowed, on a value of the gate config this
        gate cannot run with; validate.py calls it after the checks every gate shares."""
        n = gate.get("mc_samples")
        if cls.needs_uncertainty and isinstance(n, int) and n < cls.min_mc_samples:
            raise ValueError(
                f"gate.mc_samples={n} is invalid for gate {cls.name!r}: {cls.min_mc_samples_why}; "
                f"allowed an integer >= {cls.min_mc_samples}"
            )

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
    report_order, marker = 0, "s"


class AlwaysGate(ConstantGate):
    """SLM-only: the consultant acts every step and sees no PPO suggestion."""

    name = "always"
    needs_policy = False
    asks = True
    report_order, marker = 1, "^"


class EntropyGate(Gate):
    """ASK: query when the total predictive entropy H(o) >= tau (bits)."""

    name = "entropy"
    needs_uncertainty = True
    threshold_field = "total"
    swept, report_order, marker = True, 2, "o"
    # gate.normalise: the job divides the entropies by log2 of each step's admissible actions
    SETTINGS = (*Gate.SETTINGS, "normalise")

    def __init__(self, tau: float) -> None:
        self.tau = float(tau)

    def mask(self, unc, seeds, step):
        return getattr(unc, self.threshold_field) >= self.tau


class EpistemicGate(EntropyGate):
    """Query when the epistemic part (mutual information) >= tau."""

    name = "epistemic"
    threshold_field = "epistemic"
    report_order, marker = 3, "v"
    min_mc_samples = 2
    min_mc_samples_why = "one sample has no epistemic spread, so the gate could never fire"


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


class RandomGate(Gate):
    """Query with probability p, seeded per (seed, episode seed, step): the IR-matched control
    that asks whether the entropy signal beats chance at the same query budget."""

    name = "random"
    swept, report_order, marker = True, 4, "D"

    @classmethod
    def check_config(cls, gate: Any) -> None:
        p = gate.get("p")
        if p is not None and str(p) != P_MATCH and not (_number(p) and 0 <= p <= 1):
            raise ValueError(f"gate.p={p!r} is invalid: allowed 'match' or a number in [0, 1]")

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
    # entropies over log2 of the admissible actions, in [0, 1]; every cell before it: off
    normalise: bool = added(False, old=False)
    tau: Any = identity(None, outside=(STUDY,))  # also in args; what a study tunes, not its key

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
            tau=gate.get("tau"),
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


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# ----------------------------------------------------------------------------- the registry
ENTRY_POINT_GROUP = "benchmark.gates"  # how a gate class in another installed package is found


@functools.cache
def available_gates() -> dict[str, type[Gate]]:
    """Every gate class by its `name`: this module's, then those other installed packages
    register under the entry-point group `benchmark.gates` (the value names the class,
    `package.module:Class`). The report reads their declarations (order, marker, swept)."""
    from benchmark.plugins import entry_point_classes

    found = {
        c.name: c
        for c in globals().values()
        if isinstance(c, type)
        and issubclass(c, Gate)
        and c.name != Gate.name
        and c.__module__ == __name__
        and c is not ConstantGate
    }
    plugins = entry_point_classes(ENTRY_POINT_GROUP, Gate, lambda _, cls: cls.name)
    for name, cls in plugins.items():  # this package's own win over a plugin's name
        found.setdefault(name, cls)
    return found


def gate_order() -> tuple[str, ...]:
    """The report's method order of gates: those that declare a `report_order`, by it."""
    ordered = [g for g in available_gates().values() if g.report_order is not None]
    return tuple(g.name for g in sorted(ordered, key=lambda g: (g.report_order, g.name)))


def swept_gates() -> tuple[str, ...]:
    """The gates whose cells form a frontier over a swept threshold or p (`swept`)."""
    return tuple(name for name, g in available_gates().items() if g.swept)


def gate_markers() -> dict[str, str]:
    """Each gate's marker in the IR figure, where it declares one."""
    return {name: g.marker for name, g in available_gates().items() if g.marker}
