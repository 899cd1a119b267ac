"""The cell hashes of every job of every preset (conf/experiment), and of one job per consultant
and gate option, recorded in tests/golden/cell_hashes.json; tests/test_cell_hashes.py compares
a recomputation against them, so a change to how a cell's identity is derived (which keys a
backend, gate or family declares, which it leaves out) cannot silently re-key stored results.

The inputs stand in as fixed placeholders (the policy's weights, a model's weights identity where
the backend has one), so nothing is trained, built or downloaded and the hashes are the same on
every machine; what is pinned is how the config becomes an identity.

    python tests/cell_hashes.py --record     # after a deliberate identity change (say why)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden" / "cell_hashes.json"
POLICY, MODEL = "policy-weights-placeholder", "model-weights-placeholder"
# one job per option of the groups whose keys a backend or gate declares, beside the presets
EXTRA = {
    "slm": ("gate=entropy", "gate.tau=0.5"),
    "gate": ("slm=oracle",),
}


def _model(cfg) -> str | None:
    """A placeholder where the backend names weights (it overrides weights_identity), None where
    its config says it all (dice, oracle, a server)."""
    from hydra.utils import get_class

    from benchmark.consultants.base import Consultant

    target = get_class(str(cfg.slm.backend._target_))
    has = target.weights_identity.__func__ is not Consultant.weights_identity.__func__
    return MODEL if has else None


def _located(cfg):
    from benchmark.build import prepare, shared_tuning_config

    _, _, spec = prepare(cfg)
    inputs = {}
    if spec.uses_policy:
        inputs["policy_weights"] = POLICY
    if spec.uses_consultant:
        inputs["model"] = _model(cfg)
    spec = spec.with_inputs(**inputs)
    if spec.tunes_tau:
        source = shared_tuning_config(cfg)
        study = spec.tuning_key() if source is None else _located(source).tuning_key()
        spec = spec.with_inputs(tau_study=study)
    return spec


def sweeps() -> dict[str, list[str]]:
    """Each sweep's overrides, by a stable name."""
    from benchmark.config import options

    out = {f"+experiment={p}": [f"+experiment={p}"] for p in options("experiment")}
    for group, rest in EXTRA.items():
        for option in options(group):
            out[f"{group}={option}"] = [f"{group}={option}", *rest]
    return out


def compute(names: list[str] | None = None) -> dict[str, list[str]]:
    """Sweep name -> the hash of each job in job order ("invalid: <error type>" where a job
    fails validation, as the plan shows it); `names`: only those sweeps."""
    from benchmark.config import session, sweep_jobs

    out: dict[str, list[str]] = {}
    with session() as compose:
        for name, overrides in sweeps().items():
            if names is not None and name not in names:
                continue
            _, jobs = sweep_jobs(overrides)
            hashes = []
            for job in jobs:
                try:
                    hashes.append(_located(compose(job)).hash)
                except Exception as exc:  # noqa: BLE001 - recorded as the plan shows it
                    hashes.append(f"invalid: {type(exc).__name__}")
            out[name] = hashes
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--record", action="store_true", help=f"write {GOLDEN}")
    args = p.parse_args(argv)
    got = compute()
    if args.record:
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"{sum(map(len, got.values()))} hashes of {len(got)} sweeps -> {GOLDEN}")
        return 0
    want = json.loads(GOLDEN.read_text())
    bad = [k for k in sorted(set(want) | set(got)) if want.get(k) != got.get(k)]
    print("\n".join(bad) or "all hashes unchanged")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
