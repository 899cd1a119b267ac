"""tests/golden/runs.json (written by `python -m tests.golden_runs record`) pins small real jobs'
episodes.jsonl and steps.jsonl.gz: their non-float content exactly, their floats within the
tolerance tests/golden_runs.py states. The cheapest entries are recomputed here, on the PPO
checkpoint the suite trains anyway (`trained_root`: the committed small policy); the comparison
itself is tested on the recorded values: last-bit noise passes, a real change fails."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from tests.golden_runs import ABS_TOL, GOLDEN, REL_TOL, compare, dump, run_cell

GATED = "empty5x5_random__ask_oracle"


def recorded() -> dict:
    return json.loads(GOLDEN.read_text())


def perturbed(entry: dict, ulps: int) -> dict:
    """`entry` with every float moved by `ulps` float32 ulps (the step records' precision), up
    for even positions and down for odd ones: what another CPU's BLAS does to the last bits."""
    out = copy.deepcopy(entry)
    for file in out.values():
        for field, values in (file or {}).get("floats", {}).items():
            moved = []
            for i, x in enumerate(values):
                y = np.float32(x)
                target = np.float32(np.inf if i % 2 == 0 else -np.inf)
                for _ in range(ulps):
                    y = np.nextafter(y, target)
                moved.append(float(y))
            file["floats"][field] = moved
    return out


def test_the_recorded_file_is_what_dump_writes():
    """runs.json is the script's own output (nothing edited by hand), and holds every cell."""
    want = recorded()
    assert GOLDEN.read_text() == dump(want)
    assert len(want) == 15
    assert all(e["steps.jsonl.gz"]["floats"]["total"] for k, e in want.items() if "ask" in k)


@pytest.mark.parametrize("ulps", [1, 4])
def test_last_bit_noise_on_every_float_passes(ulps):
    want = recorded()
    for cell, entry in want.items():
        noisy = perturbed(entry, ulps)
        assert noisy != entry or not any(f["floats"] for f in entry.values() if f)
        assert compare(entry, noisy) == [], cell
    relative = copy.deepcopy(want[GATED])
    for file in relative.values():
        file["floats"] = {k: [x * (1 + 1e-12) for x in v] for k, v in file["floats"].items()}
    assert compare(want[GATED], relative) == []


@pytest.mark.parametrize("field", ["total", "epistemic", "aleatoric"])
def test_one_entropy_moved_by_a_thousandth_fails(field):
    want = recorded()[GATED]
    changed = copy.deepcopy(want)
    changed["steps.jsonl.gz"]["floats"][field][1] += 1e-3
    (line,) = compare(want, changed)
    assert line.startswith(f"steps.jsonl.gz: {field}: 1 of ") and "first at #1" in line


def test_a_changed_integer_or_record_count_fails():
    want = recorded()[GATED]
    changed = copy.deepcopy(want)
    changed["episodes.jsonl"]["exact"] = "0" * 64
    assert compare(want, changed) == [
        "episodes.jsonl: non-float content differs (3 records recorded, 3 now): an integer, "
        "string, flag or the number of records changed"
    ]


def test_the_tolerance_is_above_float32_noise_and_below_a_real_change():
    eps32 = float(np.finfo(np.float32).eps)
    assert 4 * eps32 < REL_TOL < 1e-3 and 3 * 4 * eps32 < ABS_TOL < 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppo", "ask_oracle"])
def test_the_cheapest_golden_runs_are_unchanged(trained_root, tmp_path, name):
    want = recorded()[f"empty5x5_random__{name}"]
    got = run_cell(trained_root, "empty5x5_random", name, jobs=tmp_path)
    assert compare(want, got) == [], (
        f"empty5x5_random__{name} differs from {GOLDEN}: results changed; if that is intended, "
        "re-record with `PYTHONPATH=$PWD .venv/bin/python -m tests.golden_runs record` and review "
        "the diff"
    )
