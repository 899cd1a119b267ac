"""How the suite finds env families: the modules and sub-packages of benchmark.envs that define a
`FAMILY`, and the families other installed packages declare in the entry-point group
`benchmark.families` (tests/family_pkg is such a package, installed for real by the slow test)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import benchmark.envs
from benchmark.envs import family as fam

REPO = Path(__file__).resolve().parents[2]
FAMILY_PKG = REPO / "tests" / "family_pkg"


@pytest.fixture(autouse=True)
def fresh_lookup():
    """get_family caches by name; each test here changes what is installed."""
    fam.get_family.cache_clear()
    yield
    fam.get_family.cache_clear()


def test_the_package_families_are_its_modules_that_define_family():
    found = fam.package_families()
    assert {"cards", "grid", "memory"} <= set(found)
    assert not {"base", "expert", "navfeatures", "family"} & set(found)  # modules, no FAMILY
    assert set(fam.package_families()) <= set(fam.available_families())
    for name in found:
        assert fam.get_family(name).name == name


def test_a_family_in_its_own_folder_is_found(tmp_path, monkeypatch):
    """A sub-package benchmark/envs/<name>/ with FAMILY in its __init__.py is listed and found."""
    folder = tmp_path / "folderfam"
    folder.mkdir()
    (folder / "__init__.py").write_text(
        textwrap.dedent(
            """
            from benchmark.envs.family import Family

            class FolderFamily(Family):
                name = "folderfam"

            FAMILY = FolderFamily()
            """
        )
    )
    (tmp_path / "helpers.py").write_text("X = 1\n")  # a module without FAMILY: not a family
    monkeypatch.setattr(benchmark.envs, "__path__", [*benchmark.envs.__path__, str(tmp_path)])
    assert "folderfam" in fam.package_families() and "helpers" not in fam.package_families()
    assert fam.get_family("folderfam").name == "folderfam"
    monkeypatch.delitem(sys.modules, "benchmark.envs.folderfam")


def _install_dist(
    site: Path, name: str, entry_points: dict[str, str], group: str = "benchmark.families"
) -> None:
    """An installed distribution as importlib.metadata sees one: a dist-info on sys.path."""
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = [f"{key} = {value}" for key, value in entry_points.items()]
    (info / "entry_points.txt").write_text(f"[{group}]\n" + "\n".join(lines) + "\n")


def test_entry_point_families_are_listed_and_bad_ones_named(tmp_path, monkeypatch):
    _install_dist(
        tmp_path,
        "odd_families",
        {"plain": "json", "clash": "benchmark.envs.grid:FAMILY", "grid": "benchmark.envs.grid"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert {"plain", "clash", "grid"} <= set(fam.entry_point_families())
    assert {"plain", "clash", "cards", "memory"} <= set(fam.available_families())
    # module:OBJECT names the Family itself
    assert fam.get_family("clash") is fam.get_family("benchmark.envs.grid")
    with pytest.raises(
        ValueError, match=r"entry point plain = 'json' .* gives module json has no FAMILY"
    ):
        fam.get_family("plain")
    with pytest.raises(ValueError, match=r"'grid' is both benchmark.envs.grid and the entry point"):
        fam.get_family("grid")
    with pytest.raises(ValueError, match=r"unknown env family 'nope'; available: \[.*'plain'"):
        fam.get_family("nope")


def test_unknown_families_name_the_available_ones():
    with pytest.raises(ValueError, match=r"unknown env family 'nope'; available: \['cards'"):
        fam.get_family("nope")
    with pytest.raises(ValueError, match=r"no Family named FAMILY in module json.decoder\)"):
        fam.get_family("json.decoder")
    with pytest.raises(ValueError, match=r"unknown env family 'nopkg.fam' \(no Family named"):
        fam.get_family("nopkg.fam")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_family_in_another_pip_package_runs_a_job(tmp_path):
    """tests/family_pkg, pip-installed into a folder on PYTHONPATH: its entry point names the
    family `toy`, its Hydra search-path plugin adds its conf/ (env=toy_empty5); a real job runs
    the oracle on it, and its prompts render at every level."""
    from tests.conftest import installed_package

    env = installed_package(FAMILY_PKG, tmp_path)
    check = textwrap.dedent(
        """
        import json
        from benchmark.envs import available_families, family_of
        from benchmark.prompts.ask import AskPrompt
        from benchmark.vocabulary import LEVELS
        from benchmark_toyfamily import ToyTask

        task = ToyTask("toy_empty5", "MiniGrid-Empty-5x5-v0", None, ["TURN_LEFT", "FORWARD"])
        ep = task.episode(100)
        texts = {}
        for level in LEVELS:
            prompt = AskPrompt(level, level)
            prompt.check(task)
            texts[level] = prompt.session(ep, with_expert=False).messages(1)[1]["content"]
        print(json.dumps({"families": available_families(), "family": family_of(task).name,
                          "texts": texts}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", check], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert "toy" in found["families"] and found["family"] == "toy"
    assert "Recent actions" in found["texts"]["stateful"]
    assert "Goal:" not in found["texts"]["basic"] and "Goal:" in found["texts"]["enriched"]

    job = subprocess.run(
        [sys.executable, "-m", "benchmark", "env=toy_empty5", "method=slm_only", "slm=oracle"]
        + ["eval.n_episodes=2", "tracking=none", "quiet=true"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert job.returncode == 0, job.stderr[-3000:]
    (path,) = (tmp_path / "root" / "runs").rglob("summary.json")
    summary = json.loads(path.read_text())
    assert summary["env"] == "toy_empty5" and summary["n_episodes"] == 2
    assert summary["success_mean"] == 1.0  # the oracle: the suite's BFS expert on its task
