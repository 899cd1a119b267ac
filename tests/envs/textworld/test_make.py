"""Making TextWorld games ahead of time (benchmark/envs/textworld/make.py): the same games
(same digests) on one worker or two, a killed generation resumes without making a finished game
again, SLURM array shards partition the games, bad options are refused with the allowed values."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from benchmark.envs.textworld import games, make
from benchmark.seeds import TRAIN_SEED_MIN
from benchmark.store import WORK_TAG

# three level-1 Treasure training games (under a second each)
ENV = ["env=tw_treasure", "env.task.generation.level=1", "env.task.train_games=3"]


@pytest.fixture
def real_games_root(monkeypatch):
    """Games under each job's paths.root (the run's shared cache is patched in conftest)."""
    monkeypatch.setattr(games, "games_root", games.games_root.unpatched)


def run(root, *args):
    report = root / "report.json"
    code = make.main(
        [*ENV, f"paths.root={root}", "--splits", "train", "--report", str(report), *args]
    )
    return code, json.loads(report.read_text())["games"]


def test_two_workers_make_the_same_games_and_a_killed_generation_resumes(
    tmp_path, real_games_root, capsys
):
    code, one = run(tmp_path / "a")
    assert code == 0 and [g["seed"] for g in one] == [TRAIN_SEED_MIN + i for i in range(3)]
    assert all(g["made"] for g in one) and all(
        g["path"].startswith(str(tmp_path / "a" / "textworld")) for g in one
    )
    code, two = run(tmp_path / "b", "--workers", "2")
    assert code == 0 and [g["digest"] for g in two] == [g["digest"] for g in one]
    assert len({g["digest"] for g in one}) == 3  # three different games
    # a generation killed after its first game: the second's half-made work directory is left
    shutil.rmtree(one[1]["path"])
    shutil.rmtree(one[2]["path"])
    half = Path(one[1]["path"])
    stale = half.with_name(f".{half.name}{WORK_TAG}{socket.gethostname()}-{2**22 + 7}")
    (stale / "partial").mkdir(parents=True)  # a process id no process has here
    capsys.readouterr()
    code, again = run(tmp_path / "a")
    assert code == 0 and [g["made"] for g in again] == [False, True, True]
    assert [g["digest"] for g in again] == [g["digest"] for g in one]
    assert "3 games (2 made, 0 refused)" in capsys.readouterr().out
    assert not stale.exists()  # the killed process's work directory is cleaned up


def test_array_shards_partition_the_games(monkeypatch):
    tasks = make.tasks_of(ENV, multirun=False)
    items = make.plan(tasks, ["train", "test"])
    assert len(items) == 3 + 100
    shards = [items[i::3] for i in range(3)]
    assert sorted(s for shard in shards for _, s in shard) == sorted(s for _, s in items)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "5")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "4")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "4")
    assert make.shard_of(None) == (1, 4) and make.shard_of("2/3") == (2, 3)


def test_a_sweep_makes_the_games_of_each_env_once():
    tasks = make.tasks_of(["env=tw_treasure,tw_quest", "method=slm_only,ask"], multirun=True)
    assert sorted(t.name for t, _ in tasks) == ["tw_quest", "tw_treasure"]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--workers", "0"], "--workers '0' is invalid: allowed a positive integer or 'auto'"),
        (["--shard", "3/3"], "--shard '3/3' is invalid: allowed I/N with 0 <= I < N"),
        (["--splits", "training"], "--splits 'training' is invalid: allowed a comma list of"),
        (["env=fourrooms"], "env=fourrooms is not a TextWorld env"),
    ],
)
def test_bad_options_are_refused_before_any_game_is_made(args, match, tmp_path):
    with pytest.raises(SystemExit, match=match):
        overrides = [] if args[0].startswith("env=") else ENV  # another env, or these games
        make.main([*overrides, f"paths.root={tmp_path}", *args])
    assert not (tmp_path / "textworld").exists()
