"""Whole jobs through the real stack: Hydra config, PPO checkpoint, gates, consultants, prompts,
lockstep evaluation, result files."""

from __future__ import annotations

import json

import pytest

from benchmark import results
from benchmark.envs import make_task
from benchmark.job import run_job
from tests.conftest import SMALL_POLICY, compose_cfg, run_cli

SMALL = ["env=empty5x5_random", *SMALL_POLICY, "eval.n_episodes=12"]


def _run(root, tmp_path, *overrides):
    cfg = compose_cfg(root, *SMALL, *overrides)
    summary = run_job(cfg, tmp_path / "job", multirun=False)
    return summary, results.read_jsonl(tmp_path / "job" / "episodes.jsonl")


def _evaluator(cfg):
    from benchmark.build import build

    return build(cfg).evaluator()


@pytest.mark.slow
@pytest.mark.parametrize("slm", ["oracle", "random"])
def test_lockstep_equals_sequential(trained_root, slm):
    cfg = compose_cfg(
        trained_root,
        *SMALL,
        "gate=entropy",
        "gate.tau=0.3",
        "gate.mc_samples=10",
        f"slm={slm}",
        "prompt=basic",
    )
    ev = _evaluator(cfg)
    seeds = list(range(100, 116))
    lockstep = results.split_runtime(ev.run(seeds, mode="lockstep"))[0]
    sequential = results.split_runtime(ev.run(seeds, mode="sequential"))[0]
    assert lockstep == sequential
    assert sum(r["queries"] for r in lockstep) > 0  # the gate did ask


def test_tau_zero_always_asks_and_huge_tau_equals_ppo_only(trained_root, tmp_path):
    ask_all, rows_all = _run(
        trained_root,
        tmp_path / "a",
        "gate=entropy",
        "gate.tau=0",
        "gate.mc_samples=8",
        "slm=tiny",
        "prompt=basic",
    )
    assert ask_all["ir_mean"] == 1.0 and all(r["ir"] == 1.0 for r in rows_all)
    never_asks, rows_never = _run(
        trained_root,
        tmp_path / "b",
        "gate=entropy",
        "gate.tau=5",
        "allow_tau_above_max=true",  # above log2(3): never asks, on purpose
        "gate.mc_samples=8",
        "slm=tiny",
        "prompt=basic",
    )
    ppo, rows_ppo = _run(trained_root, tmp_path / "c", "gate=never")
    assert never_asks["ir_mean"] == 0.0
    keys = ("seed", "reward", "length", "success")
    assert [{k: r[k] for k in keys} for r in rows_never] == [
        {k: r[k] for k in keys} for r in rows_ppo
    ]


def test_tuning_touches_only_validation_seeds_and_evaluation_only_test_seeds(
    trained_root, tmp_path, monkeypatch
):
    from benchmark.envs.minigrid_nav import MiniGridTask

    touched: list[int] = []
    original = MiniGridTask.episode
    monkeypatch.setattr(
        MiniGridTask, "episode", lambda self, seed: touched.append(seed) or original(self, seed)
    )
    cfg = compose_cfg(
        trained_root,
        *SMALL,
        "gate=entropy",
        "gate.tau=auto",
        "gate.mc_samples=8",
        "slm=oracle",
        "prompt=basic",
        "tuning.n_trials=3",
        "tuning.n_episodes=6",
        "eval.workers=1",  # the episodes this process makes are the ones watched
    )
    summary = run_job(cfg, tmp_path / "job", multirun=False)
    tuning, test = touched[:-12], touched[-12:]
    assert tuning and set(tuning) <= set(range(0, 100)) and set(tuning) == set(range(6))
    assert set(test) == set(range(100, 112))
    assert summary["seeds_touched"]["evaluation"] == list(range(100, 112))
    trials = (tmp_path / "job" / "trials.csv").read_text().splitlines()
    assert len(trials) - 1 == 3 or summary["reward_mean"] == 1.0


def test_slm_only_never_trains_a_policy(tmp_path):
    cfg = compose_cfg(
        tmp_path,
        "env=higherlower",
        "gate=always",
        "slm=oracle",
        "prompt=basic",
        "eval.n_episodes=5",
    )
    summary = run_job(cfg, tmp_path / "job", multirun=False)
    assert cfg.paths.checkpoints == str(tmp_path / "checkpoints")
    assert not (tmp_path / "checkpoints").exists()  # nothing trained, nothing cached
    assert not list(tmp_path.rglob("*.zip"))  # no SB3 policy file anywhere under the root
    assert summary["checkpoint"] is None and summary["checkpoint_path"] is None
    assert summary["policy_seed"] is None
    assert summary.get("or_mean") is None  # no policy, so no overwrite rate (absent or None)


def test_a_job_locates_its_inputs_once_and_asks_for_its_cell_once(tmp_path, monkeypatch):
    """Inputs found before building (here the oracle's: nothing to build) are not located a
    second time after building, and whether the cell is complete is asked once, under its
    lock; a rerun finds the complete cell on its first look, without building anything."""
    import benchmark.job as job

    calls, reuses, builds = [], [], []

    def counted(*args, **kwargs):
        calls.append(kwargs.get("train", False))
        return locate(*args, **kwargs)

    locate, reuse, build = job.locate_inputs, job._reuse, job.build
    monkeypatch.setattr(job, "locate_inputs", counted)
    monkeypatch.setattr(job, "_reuse", lambda *a, **k: reuses.append(1) or reuse(*a, **k))
    monkeypatch.setattr(job, "build", lambda *a, **k: builds.append(1) or build(*a, **k))
    over = ["env=higherlower", "gate=always", "slm=oracle", "prompt=basic", "eval.n_episodes=3"]
    first = run_job(compose_cfg(tmp_path, *over), tmp_path / "first", multirun=False)
    assert calls == [False] and reuses == [1] and builds == [1]
    again = run_job(compose_cfg(tmp_path, *over), tmp_path / "again", multirun=False)
    assert calls == [False, False] and reuses == [1, 1] and builds == [1] and again == first
    assert (tmp_path / "again" / results.REUSED_FILE).is_file()


def test_the_resolved_job_config_prints(tmp_path):
    """`--cfg job --resolve` prints the config with every interpolation resolved, the values the
    PPO recipe gives included (a mapping: policy.ppo; a list: a curriculum's train_gym_ids)."""
    import yaml
    from omegaconf import OmegaConf

    proc = run_cli(tmp_path, "env=fourrooms", "--cfg", "job", "--resolve", timeout=120)
    printed = yaml.safe_load(proc.stdout)
    assert isinstance(printed["policy"]["ppo"], dict) and "${" not in proc.stdout
    assert printed["env"]["name"] == "fourrooms" and printed["policy"]["total_timesteps"] > 0
    curriculum = compose_cfg(tmp_path, "env=doorkey8")
    OmegaConf.resolve(curriculum)  # what --resolve does
    assert len(curriculum.env.task.train_gym_ids) > 1


@pytest.mark.slow
def test_oracle_reproduces_card_counting_ceiling_without_a_policy(tmp_path):
    run_cli(
        tmp_path,
        "env=higherlower",
        "gate=always",
        "slm=oracle",
        "prompt=basic",
        "tracking=none",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # independent reference: play the card-counting rule directly against the task, no prompts
    task = make_task(compose_cfg(tmp_path, "env=higherlower").env)
    accs = []
    for seed in range(100, 200):
        ep = task.episode(seed)
        while not ep.done:
            v = ep.view()
            ep.step(task.action_names.index("HIGHER" if v.higher >= v.lower else "LOWER"))
        accs.append(ep.outcome()["accuracy"])
    assert summary["accuracy_mean"] == pytest.approx(sum(accs) / len(accs))
    assert summary["invalid_rate_mean"] == 0.0 and summary["ir_mean"] == 1.0
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.slow
@pytest.mark.parametrize("env", ["fourrooms", "doorkey8"])
def test_oracle_solves_every_test_seed_with_shortest_paths(tmp_path, env):
    cfg = compose_cfg(tmp_path, f"env={env}", "gate=always", "slm=oracle", "prompt=basic")
    run_job(cfg, tmp_path / "job", multirun=False)
    rows = results.read_jsonl(tmp_path / "job" / "episodes.jsonl")
    task = make_task(cfg.env)
    assert len(rows) == 100 and all(r["success"] == 1.0 and r["invalid"] == 0 for r in rows)
    assert [r["length"] for r in rows] == [
        len(task.episode(s).expert_plan()) for s in range(100, 200)
    ]


def test_random_gate_matches_the_entropy_cells_query_rate(trained_root, tmp_path):
    common = ["gate.mc_samples=8", "slm=oracle", "prompt=basic"]
    entropy, _ = _run(trained_root, tmp_path / "e", "gate=entropy", "gate.tau=0.05", *common)
    matched, rows = _run(
        trained_root,
        tmp_path / "r",
        "gate=random",
        "++gate.p=match",
        "++gate.match_tau=0.05",
        "++gate.mc_samples=8",
        "slm=oracle",
        "prompt=basic",
    )
    assert 0 < entropy["ir_pooled"] and matched["p"] == pytest.approx(entropy["ir_pooled"])
    assert sum(r["queries"] for r in rows) > 0


@pytest.mark.parametrize(
    ("env", "prompt", "calls_per_query"),
    [
        ("fourrooms", "belief", 2),
        ("higherlower", "belief", 2),
        ("empty16x16", "hwbp_cot_df_rf_crf_pf", 1),
    ],
)
def test_multi_round_and_stateful_prompts_run_through_the_evaluator(
    tmp_path, env, prompt, calls_per_query
):
    summary, rows = _run(
        tmp_path,
        tmp_path / "j",
        f"env={env}",
        "gate=always",
        "slm=oracle",
        f"prompt={prompt}",
        "eval.n_episodes=3",
    )
    assert summary["invalid_rate_mean"] == 0.0
    assert all(r["calls"] == calls_per_query * r["queries"] for r in rows)
    metric = "accuracy" if env == "higherlower" else "success"
    assert summary[f"{metric}_mean"] > (0.6 if env == "higherlower" else 0.99)


def test_one_shot_plan_is_queried_once_and_executed_open_loop(tmp_path):
    summary, rows = _run(
        tmp_path,
        tmp_path / "j",
        "env=simplecrossing9",
        "gate=always",
        "slm=oracle",
        "prompt=complete",
        "eval.n_episodes=4",
    )
    assert all(r["queries"] == 1 and r["success"] == 1.0 for r in rows)
    assert summary["ir_mean"] < 0.2


@pytest.mark.slow
def test_policy_feedback_across_episodes_runs_episodes_in_order(tmp_path):
    summary, rows = _run(
        tmp_path,
        tmp_path / "j",
        "env=empty5x5_random",
        "gate=always",
        "slm=tiny",
        "prompt=pf_across_episodes",
        "prompt.max_new_tokens=16",  # the order of episodes, not the text: 5x faster
        "eval.n_episodes=2",
    )
    assert [r["seed"] for r in rows] == [100, 101] and summary["ir_mean"] == 1.0


@pytest.mark.slow
def test_shared_tuning_scope_runs_one_study_and_other_checkpoints_reuse_its_tau(
    trained_root, tmp_path
):
    """Table 3's paper reading: every checkpoint's ASK cell uses the tau tuned on `final`."""
    shared = [
        "gate=entropy",
        "gate.tau=auto",
        "gate.mc_samples=8",
        "slm=oracle",
        "prompt=basic",
        "tuning.n_trials=2",
        "tuning.n_episodes=3",
        "tuning.scope=shared",
        "+tuning.shared={policy.checkpoint: final}",
    ]
    best, _ = _run(trained_root, tmp_path / "b", *shared, "policy.checkpoint=best")
    final, _ = _run(trained_root, tmp_path / "f", *shared, "policy.checkpoint=final")
    studies = [d for d in (trained_root / "tuning").iterdir() if (d / "study.journal").exists()]
    assert final["tau"] == best["tau"]
    assert best["tau_from"] == f"{final['cell']} [policy.checkpoint=final]"
    assert final["tau_from"] is None
    assert best["checkpoint_sha256"] != final["checkpoint_sha256"] or best["cell"] != final["cell"]
    assert len([d for d in studies if d.name in (best["cell_hash"], final["cell_hash"])]) == 0
    journals = {d.name for d in studies}
    own = _run(trained_root, tmp_path / "o", *shared[:-2], "policy.checkpoint=best")[0]
    assert own["tau_from"] is None
    assert len({d.name for d in (trained_root / "tuning").iterdir()} - journals) == 1


@pytest.mark.slow
def test_an_identical_job_started_meanwhile_waits_and_reuses_the_cell(tmp_path):
    """Two identical jobs on one root: while the first computes the cell (it holds the cell's
    `computing` lock), the second waits for it, then reuses the complete cell instead of
    running the whole evaluation again."""
    import subprocess
    import sys
    import time

    from filelock import FileLock, Timeout

    from tests.conftest import REPO, _cli_env

    args = ["env=fourrooms", "gate=always", "slm=random", "prompt=basic", "tracking=none"]
    first = subprocess.Popen(
        [sys.executable, "-m", "benchmark", *args, "eval.n_episodes=100"],
        cwd=REPO,
        env=_cli_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    held, deadline = None, time.monotonic() + 120
    while held is None and time.monotonic() < deadline and first.poll() is None:
        for path in (tmp_path / "cells").glob(".*.computing.lock"):
            try:
                FileLock(str(path)).acquire(timeout=0).lock.release()
            except Timeout:
                held = path  # the first job is computing its cell
        time.sleep(0.05)
    assert held is not None, f"the first job never held a cell lock: {first.communicate()[1]}"
    cfg = compose_cfg(tmp_path, *args, "eval.n_episodes=100")
    second = run_job(cfg, tmp_path / "second", multirun=False)
    assert first.wait(timeout=600) == 0
    assert (tmp_path / "second" / results.REUSED_FILE).is_file()  # waited, then reused
    cell = held.parent / held.name.split(".")[1]
    assert second == results.read_json(cell / "summary.json")


def test_a_full_disk_is_one_line_naming_the_results_root(tmp_path, monkeypatch):
    """ENOSPC while computing, and again while recording error.json: one line that names the
    results root and the file, not three chained tracebacks."""
    import errno

    from benchmark import job as job_module
    from benchmark.__main__ import one_line_errors

    root, target = tmp_path / "root", tmp_path / "root" / "cells" / "x" / "steps.jsonl.gz"

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(target))

    monkeypatch.setattr(job_module, "prepare", disk_full)
    monkeypatch.setattr(job_module.results, "write_json", disk_full)
    cfg = compose_cfg(root, "eval.n_episodes=2")
    with pytest.raises(SystemExit) as err, one_line_errors(False, tmp_path / "job", str(root)):
        run_job(cfg, tmp_path / "job", multirun=False)
    message = str(err.value)
    assert "\n" not in message and err.value.__suppress_context__
    assert message.startswith(f"Error: no space left on the disk of the results root {root}")
    assert str(target) in message
