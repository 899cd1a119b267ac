"""Gates (conf/gate/<name>.yaml) decide, per live episode and step, whether the consultant is
asked; `GateSettings` reads a gate config once, and `available_gates()` finds every gate class.

The interface and its declarations live in `base` (`Gate`); each in-tree gate lives in a module
of this package (constant: never and always; entropy: entropy and epistemic; learned; chance:
random), found by a folder scan, and a gate of another installed package by the entry-point
group `benchmark.gates`."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

from hydra.utils import get_class

from benchmark.gates.base import P_MATCH, TAU_AUTO, Gate
from benchmark.gates.chance import RandomGate
from benchmark.gates.constant import AlwaysGate, ConstantGate, NeverGate
from benchmark.gates.entropy import EntropyGate, EpistemicGate
from benchmark.gates.learned import FEATURES, LearnedGate, feature_matrix
from benchmark.settings import STUDY, added, identity

__all__ = [
    "FEATURES",
    "P_MATCH",
    "TAU_AUTO",
    "AlwaysGate",
    "ConstantGate",
    "EntropyGate",
    "EpistemicGate",
    "Gate",
    "GateSettings",
    "LearnedGate",
    "NeverGate",
    "RandomGate",
    "available_gates",
    "feature_matrix",
    "gate_markers",
    "gate_order",
    "swept_gates",
]


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


# ----------------------------------------------------------------------------- the registry
ENTRY_POINT_GROUP = "benchmark.gates"  # how a gate class in another installed package is found


@functools.cache
def available_gates() -> dict[str, type[Gate]]:
    """Every gate class by its `name`: the classes of this package's modules that declare one
    (a folder scan), then those other installed packages register under the entry-point group
    `benchmark.gates` (the value names the class, `package.module:Class`). The report reads
    their declarations (order, marker, swept)."""
    from benchmark.plugins import entry_point_classes, package_classes

    found: dict[str, type[Gate]] = package_classes(__name__, Gate, "name")
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
