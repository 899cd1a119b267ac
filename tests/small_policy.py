"""The tests' small PPO policy, committed: the checkpoint directory that `ensure` trains for
Empty-Random-5x5 with `SMALL_POLICY` (tests/conftest.py), kept in tests/data/small-policy/ so a test
run copies it instead of training it (about 30 s of a core). Its folder name carries the recipe
hash (`<env>-<config_hash>`): when the recipe, the split or TRAINING_VERSION changes, the name no
longer matches, the fixture trains as before, and tests/test_conftest.py fails until it is
rebuilt with

    make test-policy        # PYTHONPATH=$PWD .venv/bin/python -m tests.small_policy

The weights are checked against the results they give by tests/test_golden_runs.py (slow), which
recomputes its Empty-Random-5x5 digests on this checkpoint."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

COMMITTED = Path(__file__).parent / "data" / "small-policy"
ENV = "env=empty5x5_random"


def wanted(root: Path) -> Path:
    """The checkpoint directory `ensure` would use for the small policy under `root`."""
    from benchmark.policy.checkpoints import checkpoint_dir
    from tests.conftest import SMALL_POLICY, compose_cfg

    return checkpoint_dir(compose_cfg(root, ENV, *SMALL_POLICY))


def committed() -> Path | None:
    """The committed checkpoint directory (None when there is none)."""
    found = sorted(p for p in COMMITTED.glob("*-*") if p.is_dir()) if COMMITTED.is_dir() else []
    return found[0] if len(found) == 1 else None


def seed(root: Path) -> bool:
    """Put the committed policy where `ensure` looks for it under `root`, when it is the one the
    current recipe trains and nothing is there yet; True when it is in place. Copied to a
    temporary name and renamed, so processes that seed the same root at once never see half a
    directory."""
    from benchmark.policy.checkpoints import intact

    target, source = wanted(root), committed()
    if target.exists() or source is None or source.name != target.name:
        return target.exists()
    target.parent.mkdir(parents=True, exist_ok=True)
    work = target.parent / f".{target.name}.{uuid.uuid4().hex}"
    shutil.copytree(source, work)
    try:
        os.rename(work, target)
    except OSError:  # another process got there first
        shutil.rmtree(work, ignore_errors=True)
    return intact(target)


def rebuild() -> Path:
    """Train the small policy from nothing and replace the committed copy with it."""
    from benchmark.policy import ensure
    from tests.conftest import SMALL_POLICY, compose_cfg

    with tempfile.TemporaryDirectory() as tmp:
        ensure(compose_cfg(Path(tmp), ENV, *SMALL_POLICY))
        built = wanted(Path(tmp))
        shutil.rmtree(COMMITTED, ignore_errors=True)
        COMMITTED.mkdir(parents=True)
        shutil.copytree(built, COMMITTED / built.name)
    return COMMITTED / built.name


if __name__ == "__main__":
    if sys.argv[1:] not in ([], ["rebuild"]):
        sys.exit(f"usage: python -m tests.small_policy [rebuild] (got {' '.join(sys.argv[1:])})")
    print(f"wrote {rebuild()}")
