"""The golden prompt files of tests/golden: what each one holds, and the one command that
records them.

    make golden                                          # the same as the line below
    PYTHONPATH=$PWD .venv/bin/python -m tests.golden_prompts record

The tests (tests/prompts/test_prompts.py) only compare: a test run never writes a golden file, and
one started with UPDATE_GOLDEN in its environment (the old way to re-record) fails, naming this
command, so that no CI run can pass by comparing freshly written files with themselves. Review
the diff of a recording, and bump the prompt version of each family whose texts changed with it
(Family.prompt_version; tests/test_cell.py says how)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from benchmark.prompts import showcase

RECORD_COMMAND = "make golden (PYTHONPATH=$PWD .venv/bin/python -m tests.golden_prompts record)"
# ASK+ (stateful + rationale) with a PPO suggestion shown (prompt.autopilot=true) and hidden
AUTOPILOT_CASES = [
    (env, ap) for env in ("fourrooms", "doorkey8", "higherlower") for ap in (True, False)
]
PPO_ACTION = {"higherlower": "LOWER", "repeatprevious_easy": "SPADES"}  # (TURN_LEFT elsewhere)


def prompt_text(env: str, prompt: str, rationale: bool) -> str:
    """A variant's prompt at step 5 of the expert-driven episode of seed 100."""
    return showcase.show(env, prompt, seed=100, step=5, rationale=rationale)


def autopilot_path(env: str, autopilot: bool) -> Path:
    flag = str(autopilot).lower()
    return showcase.GOLDEN_DIR / f"{env}__stateful__rationale__autopilot_{flag}.txt"


def autopilot_text(env: str, autopilot: bool) -> str:
    """ASK+ at step 5 of the expert-driven episode of seed 100, PPO suggesting PPO_ACTION."""
    from hydra.utils import instantiate

    ppo = PPO_ACTION.get(env, "TURN_LEFT")
    cfg = showcase.prompt_cfg("stateful", True)
    cfg.autopilot = autopilot
    variant = instantiate(cfg, _convert_="all")
    _, task = showcase.variant_for(env, "stateful", True)
    *_, last = showcase.drive(variant, task, 100, 5, autopilot=ppo)
    flag = str(autopilot).lower()
    return (
        f"# env={env} prompt=stateful rationale=true prompt.autopilot={flag} seed=100 step=5 "
        f"policy=expert ppo_action={ppo}\n" + showcase.render_consult(last)
    )


def refuse_update_env() -> None:
    """Fail a golden test run with UPDATE_GOLDEN set: only RECORD_COMMAND records."""
    import pytest

    if "UPDATE_GOLDEN" in os.environ:
        pytest.fail(
            f"UPDATE_GOLDEN={os.environ['UPDATE_GOLDEN']!r} is set, but a test run never writes "
            f"golden files any more; record them with {RECORD_COMMAND}, review the diff, and "
            "run the tests without UPDATE_GOLDEN",
            pytrace=False,
        )


def expected(path: Path) -> str:
    """The recorded content of a golden file (a missing one names the record command)."""
    assert path.is_file(), f"missing {path}; record it with {RECORD_COMMAND}"
    return path.read_text()


def record() -> int:
    """Write every golden prompt file; returns how many."""
    files = [(showcase.golden_path(*case), prompt_text(*case)) for case in showcase.golden_cases()]
    files += [(autopilot_path(*case), autopilot_text(*case)) for case in AUTOPILOT_CASES]
    showcase.GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    changed = 0
    for path, text in files:
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            changed += 1
    print(f"{len(files)} golden prompt files under {showcase.GOLDEN_DIR}, {changed} rewritten")
    return len(files)


if __name__ == "__main__":
    if sys.argv[1:] != ["record"]:
        sys.exit(f"usage: python -m tests.golden_prompts record\n{__doc__}")
    record()
