"""Every experiment preset composes, each of its cells composes and validates, and the number of
cells is what the paper's table or figure needs (checked without running anything)."""

from __future__ import annotations

import itertools

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from benchmark.build import prepare, shared_tuning_config
from benchmark.config import session
from tests.conftest import CONF, REPO

EXPECTED = {  # preset: (cells, with slm=tiny substituted)
    # envs x {PPO, SLM-only, ASK, ASK+} x {2B, 4B} x the PPO baseline {recipe, match}
    "table1": (3 * 4 * 2 * 2, 3 * 4 * 2),
    "table2": (3 * 5 * 2, 3 * 5),  # envs x 5 prompt variants x models
    "table3": (
        3 * 6 * 2 * 2,
        3 * 6 * 2,
    ),  # envs x (4 thresholds, best, final) x {PPO, ASK+} x models
    "fig2_tau": (3 * 10 * 2, 3 * 10),  # envs x tau 0.1..1.9 x {2B, 4B}
    # envs x 11 grid points (a shorter grid repeats its last tau) x {2B, 4B}
    "released_tau_grid": (3 * 11 * 2, 3 * 11),
    "released_mc_samples": (3 * 5 * 2, 3 * 5),  # envs x N in {5, 10, 20, 30, 50} x models
    "slm_only_prompts": (3 * 5 * 2, 3 * 5),  # envs x 5 prompt variants x models
    "feedback_table5": (3 * 2, 3),  # configurations x {DeepSeek-R1 14B, QwQ 32B}
    "feedback_curves": (3, 3),  # configurations (PPO-CNN only)
    "mc_samples": (3 * 5, 3 * 5),
    "gating": (3 * 2 * 3, 3 * 3),  # envs x {oracle, SLM} x {entropy, epistemic, random}
    "ceiling": (3 * 5, 3 * 5),
    "feedback": (3 * 10 * 2, 3 * 10),  # envs x strategies x {qwen2.5-1.5b, llama3.1-8b}
    "belief": (3 * 2, 3 * 2),
    "brace": (2 * 4 * 2, 2 * 4 * 2),  # envs x {stateful, frozen, SFT, SFT+RL} x {always, entropy}
    "policies": (3 * 3, 3 * 3),
    "smoke": (4 * 3, 4),
    "demo": (3 * 3 * 4, 3 * 4),  # {never, entropy, always} x consultants x (auto + 3 taus)
    # envs x {oracle, dice} x {never, always, entropy, epistemic, learned, random} x (10 taus + auto)
    "gates": (3 * 2 * 6 * 11, 3 * 6 * 11),
}


def _cells(preset: str, *overrides: str) -> list[list[str]]:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "config", overrides=[f"+experiment={preset}", *overrides], return_hydra_config=True
        )
    params = {k: str(v).split(",") for k, v in cfg.hydra.sweeper.params.items()}
    for o in overrides:  # the command line wins over the preset's sweep, as in Hydra
        key, value = o.split("=", 1)
        params[key] = value.split(",")
    keys = sorted(params)
    return [
        [f"{k}={v}" for k, v in zip(keys, combo, strict=False)]
        for combo in itertools.product(*(params[k] for k in keys))
    ]


# the presets with the most cells compose for a while: they run with the slow tests
BIG = {
    "table1",
    "table2",
    "table3",
    "fig2_tau",
    "feedback",
    "mc_samples",
    "gates",
    "ceiling",
    "demo",
    "brace",
    "belief",
    "gating",
    "released_tau_grid",
    "released_mc_samples",
    "slm_only_prompts",
}


@pytest.mark.parametrize(
    "preset", [pytest.param(p, marks=pytest.mark.slow) if p in BIG else p for p in sorted(EXPECTED)]
)
def test_preset_cells_compose_and_count(preset, tmp_path):
    full, tiny = EXPECTED[preset]
    assert len(_cells(preset)) == full
    cells = _cells(preset, "slm=tiny") if preset not in ("policies",) else _cells(preset)
    assert len(cells) == tiny
    # one Hydra composition per choice of config groups, shared by the cells that only change
    # values (benchmark.config.session; tests/test_config.py checks it equals composing each)
    with session(CONF) as composer:
        configs = [composer([f"+experiment={preset}", *c, f"paths.root={tmp_path}"]) for c in cells]
    for cfg in configs:
        prepare(cfg)  # validate against the env's task (taus, checkpoint thresholds)
        source = shared_tuning_config(cfg)  # tuning.scope=shared names a cell that composes
        if source is not None:
            prepare(source)
        assert cfg.experiment_name == preset


def test_policies_preset_trains_two_at_a_time_unless_told_otherwise():
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        default = compose("config", overrides=["+experiment=policies"], return_hydra_config=True)
        slurm = compose(
            "config",
            overrides=["+experiment=policies", "hydra/launcher=slurm_cpu"],
            return_hydra_config=True,
        )
    assert default.hydra.launcher._target_.endswith("JoblibLauncher")
    assert default.hydra.launcher.n_jobs == 2
    assert slurm.hydra.launcher._target_.endswith("SlurmLauncher")


def test_docs_presets_table_is_every_preset():
    """docs/presets.md's table is generated from conf/experiment: a preset added, removed or
    redescribed without re-running `python -m benchmark.presets` fails here."""
    from benchmark.config import options
    from benchmark.presets import table

    text = (REPO / "docs" / "presets.md").read_text()
    start, end = "<!-- presets:start -->\n", "<!-- presets:end -->"
    shown = text[text.index(start) + len(start) : text.index(end)]
    assert shown == table(), "re-run: python -m benchmark.presets (docs/presets.md)"
    assert all(f"| `{name}` |" in shown for name in options("experiment"))


def test_a_preset_without_an_opening_comment_is_named(tmp_path, monkeypatch):
    from benchmark import presets

    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "bare.yaml").write_text("# @package _global_\nseed: 1\n")
    monkeypatch.setattr(presets, "CONF", tmp_path)
    with pytest.raises(ValueError, match=r"conf/experiment/bare.yaml has no opening comment"):
        presets.preset("bare")
    (tmp_path / "experiment" / "told.yaml").write_text(
        "# @package _global_\n# Trains it. Then more.\n#   python -m benchmark.brace.train "
        "+experiment=told -m   # the trainer\n"
    )
    assert presets.preset("told") == presets.Preset(
        "told", "python -m benchmark.brace.train +experiment=told -m", "Trains it"
    )
