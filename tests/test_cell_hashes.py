"""Cell hashes stay where they were: every job of every preset, and one job per consultant and
gate option, hashed as the plan hashes them (placeholder inputs, tests/cell_hashes.py), against
tests/golden/cell_hashes.json. A backend, gate or family that declares its keys differently
(identity or execution) re-keys stored results; this fails first, naming the sweep."""

from __future__ import annotations

import json

import pytest

from tests.cell_hashes import EXTRA, GOLDEN, compute, sweeps


def _check(names: list[str]) -> None:
    want = json.loads(GOLDEN.read_text())
    got = compute(names)
    assert sorted(got) == sorted(names)
    changed = {n: (want.get(n), got[n]) for n in names if want.get(n) != got[n]}
    assert not changed, f"cell hashes changed: {changed}"


def test_every_consultant_and_gate_option_keeps_its_hash():
    _check([n for n in sweeps() if n.split("=")[0] in EXTRA])


def test_the_golden_file_names_every_sweep_and_no_other():
    """A preset added or removed without `python tests/cell_hashes.py --record` fails here."""
    assert sorted(json.loads(GOLDEN.read_text())) == sorted(sweeps())


@pytest.mark.slow
@pytest.mark.timeout(900)  # the largest preset (gates) is about 400 jobs
@pytest.mark.parametrize("preset", sorted(n for n in sweeps() if n.startswith("+experiment=")))
def test_every_presets_jobs_keep_their_hashes(preset: str):
    """One test per preset, so the ~1,000 jobs spread over the test workers."""
    _check([preset])
