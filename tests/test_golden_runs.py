"""tests/golden/runs.json (written by `python -m tests.golden_runs record`) pins the bytes of
small real jobs' episodes.jsonl and steps.jsonl.gz; the cheapest entries are recomputed here, on
the PPO checkpoint the suite trains anyway (`trained_root`: the same recipe as the script's)."""

from __future__ import annotations

import json

import pytest

from tests.golden_runs import GOLDEN, run_cell


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppo", "ask_oracle"])
def test_the_cheapest_golden_runs_are_byte_identical(trained_root, tmp_path, name):
    want = json.loads(GOLDEN.read_text())[f"empty5x5_random__{name}"]
    got = run_cell(trained_root, "empty5x5_random", name, jobs=tmp_path)
    assert got == want, (
        f"empty5x5_random__{name} differs from {GOLDEN}: results changed (or this torch build "
        "trains another PPO); if that is intended, re-record with "
        "`PYTHONPATH=$PWD .venv/bin/python -m tests.golden_runs record` and review the diff"
    )
