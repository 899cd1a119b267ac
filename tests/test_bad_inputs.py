"""Every row of the README's bad-input table: the exact error text, a non-zero exit, and no
expensive work done first (nothing trained, no model loaded)."""

from __future__ import annotations

import pytest

from tests.bad_inputs import CASES, GOOD
from tests.conftest import REPO, SMALL_POLICY, run_cli


@pytest.mark.slow
@pytest.mark.parametrize(("case", "overrides", "env", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_fast_with_a_clear_error(
    tmp_path, monkeypatch, case, overrides, env, expected
):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("BENCH_MISSING_KEY", raising=False)
    keys = {o.split("=")[0] for o in overrides}
    args = [g for g in GOOD if g.split("=")[0] not in keys] + overrides
    proc = run_cli(
        tmp_path,
        *args,
        "tracking=none",
        f"hydra.run.dir={tmp_path / 'run'}",
        check=False,
        timeout=120,
    )
    assert proc.returncode != 0
    assert expected in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "checkpoints").exists()  # failed before any training


@pytest.mark.slow
def test_checkpoint_from_another_env_is_refused(trained_root, tmp_path):
    from benchmark.policy.checkpoints import checkpoint_dir
    from tests.conftest import compose_cfg

    other = checkpoint_dir(compose_cfg(trained_root, "env=empty5x5_random", *SMALL_POLICY))
    proc = run_cli(
        tmp_path,
        "env=doorkey8",
        "gate=never",
        f"policy.path={other / 'final.zip'}",
        "eval.n_episodes=2",
        "tracking=none",
        f"hydra.run.dir={tmp_path / 'run'}",
        check=False,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "Discrete(7)" in proc.stderr and "Discrete(4)" in proc.stderr, proc.stderr[-2000:]


def test_readme_bad_input_table_matches_the_cases():
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Bad input", 1)[1].split("\n## ", 1)[0]
    rows = [
        r for r in section.splitlines() if r.startswith("| ") and not r.startswith("| bad input")
    ]
    assert len(rows) >= 15
    for case, overrides, _, expected in CASES:
        row = next((r for r in rows if r.startswith(f"| {case} |")), None)
        assert row is not None, f"README lacks the row {case!r}"
        assert expected in row and all(o in row for o in overrides), row
    assert any("another env" in r for r in rows)
