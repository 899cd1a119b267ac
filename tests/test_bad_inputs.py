"""Every row of the bad-input table (docs/bad-input.md): the exact error text, a non-zero exit, and no
expensive work done first (nothing trained, no model loaded)."""

from __future__ import annotations

import pytest

from tests.bad_inputs import CASES, GOOD
from tests.conftest import REPO, SMALL_POLICY, run_cli


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "overrides", "env", "expected"),
    CASES,
    ids=[c[0] for c in CASES],
)
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
def test_a_refused_single_job_prints_one_line(tmp_path, monkeypatch):
    """Hydra's traceback only with HYDRA_FULL_ERROR=1; the line names the value and error.json."""
    args = ("eval.n_episodes=0", "tracking=none", f"hydra.run.dir={tmp_path / 'run'}")
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    proc = run_cli(tmp_path, *args, check=False, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("Error: ValueError: eval.n_episodes=0 is invalid"), lines[0]
    assert f"error.json in {tmp_path / 'run'}" in lines[0]
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    full = run_cli(tmp_path, *args, check=False, timeout=120)
    assert full.returncode == 1 and "Traceback" in full.stderr


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


def test_docs_bad_input_table_matches_the_cases():
    section = (REPO / "docs" / "bad-input.md").read_text()
    rows = [
        r for r in section.splitlines() if r.startswith("| ") and not r.startswith("| bad input")
    ]
    assert len(rows) >= 15
    for case, overrides, _, expected in CASES:
        row = next((r for r in rows if r.startswith(f"| {case} |")), None)
        assert row is not None, f"docs/bad-input.md lacks the row {case!r}"
        assert expected in row and all(o in row for o in overrides), row
    assert any("another env" in r for r in rows)


def _numeric_keys(node, prefix=""):
    """Dotted keys of the int/float leaves of a config node (lists and nested dicts of SB3
    arguments aside: env.ppo.KEY is the documented open extension point)."""
    from omegaconf import DictConfig

    for key, value in node.items_ex(resolve=True):
        dotted = f"{prefix}{key}"
        if isinstance(value, DictConfig):
            if dotted not in ("policy.ppo",):
                yield from _numeric_keys(value, dotted + ".")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield dotted


@pytest.mark.slow  # validates every numeric key (~4 s)
def test_every_numeric_key_rejects_a_non_number_before_any_work(tmp_path):
    """README: every bad value fails before any training. Walk the numeric keys a job reads
    (seed, eval, tuning, gate, policy) and give each a string: validation must name it."""
    from omegaconf import OmegaConf, open_dict

    from benchmark.build import prepare
    from tests.conftest import compose_cfg

    base = ["env=empty5x5_random", "gate=entropy", "gate.tau=auto"]
    cfg = compose_cfg(tmp_path, *base)
    keys = ["seed"] + [
        k
        for group in ("eval", "tuning", "gate", "policy")
        for k in _numeric_keys(cfg[group], group + ".")
    ]
    assert {"eval.n_episodes", "tuning.n_trials", "gate.mc_samples", "policy.seed"} <= set(keys)
    for key in keys:
        bad = compose_cfg(tmp_path, *base)
        with open_dict(bad):
            OmegaConf.update(bad, key, "abc", merge=False)
        with pytest.raises(ValueError, match=key.split(".")[-1]):
            prepare(bad)
    assert not (tmp_path / "checkpoints").exists()
