"""Agent-BRACE's trainer as a Hydra job (benchmark.brace.train): every setting checked before
any work (a bad one named by its key, in seconds), the pipeline at toy size end to end with its
report in the job dir, a rerun with the same settings that does nothing again, other settings
refused, and kill -9 while a model is saved followed by a rerun that recomputes and finishes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmark.brace import checks as settings
from benchmark.brace.models import COMPLETE, model_complete
from tests.conftest import REPO, compose_cfg, run_cli

# a toy run on the fastest env: 2 teacher episodes, 4 SFT examples, one RL iteration
TOY = ["env=empty5x5_random", "brace.teacher_episodes=2", "brace.sft_examples=4",
       "brace.sft_epochs=1", "brace.held_out_episodes=1", "brace.reward_episodes=1",
       "brace.rl_max_steps=2", "brace.rl.iterations=1", "brace.rl.policy_iterations=1",
       "brace.rl.seeds_per_step=1", "brace.rl.group=2", "brace.rl.minibatch=4"]  # fmt: skip


@pytest.mark.parametrize(
    "override, message",
    [
        ("brace.rl.iterations=-1", "brace.rl.iterations=-1: must be >= 1"),
        ("brace.rl.dtype=fp8", "brace.rl.dtype='fp8': allowed float32, bfloat16"),
        ("brace.algorithm=dpo", "brace.algorithm='dpo': allowed ppo, grpo"),
        ("brace.mode=always", "brace.mode='always': allowed slm, ask"),
        ("brace.policy_input=raw", "brace.policy_input='raw': allowed belief, summary, history"),
        ("brace.sft_examples=0", "brace.sft_examples=0: must be >= 1"),
        ("brace.sft_random_trajectories=-1", "brace.sft_random_trajectories=-1: must be >= 0"),
        ("brace.sft_lr=0", "brace.sft_lr=0: must be > 0"),
        ("brace.sft_roles=[critic]", "brace.sft_roles=['critic']: allowed a list of belief"),
        ("brace.train_belief=maybe", "brace.train_belief='maybe': allowed true, false"),
        ("+brace.nope=1", "brace.nope: unknown key; allowed algorithm, base"),
        ("+brace.rl.nope=1", "brace.rl ['nope']: unknown; allowed"),
        ("brace.base=/no/such/model", "brace.base='/no/such/model': not a model directory"),
        ("brace.tiny_size=huge", "brace.tiny_size='huge': allowed tiny, small, text, words"),
    ],
)
def test_a_bad_setting_is_refused_naming_its_key(tmp_path, override, message):
    with pytest.raises(settings.SettingsError, match=re.escape(message)):
        settings.check(compose_cfg(tmp_path, override))


def test_a_cap_the_env_refuses_fails_before_any_work(tmp_path):
    """HigherLower always plays 51 decisions: capping its RL episodes is refused up front."""
    with pytest.raises(settings.SettingsError, match=r"brace.rl_max_steps=6: .*51 decisions; 0 "):
        settings.check(compose_cfg(tmp_path, "env=higherlower", "brace.rl_max_steps=6"))


def test_the_rows_and_their_model_folders(tmp_path):
    """The rows are conf/brace options; each row's models go to its own folder per training
    seed, named by the env they train on, which the evaluation methods read."""
    s = {
        row: settings.check(compose_cfg(tmp_path, "env=tw_quest", f"brace={row}", "brace.seed=2"))
        for row in ("agent_brace", "frozen_belief", "direct_rl")  # fmt: skip
    }
    assert s["agent_brace"].algorithm == "ppo" and s["agent_brace"].train_belief
    assert not s["frozen_belief"].train_belief and s["frozen_belief"].roles == ("belief", "policy")
    assert s["direct_rl"].raw_history and s["direct_rl"].roles == ("policy",)
    assert s["direct_rl"].sft_roles == []
    outs = {r: x.out for r, x in s.items()}
    assert outs["agent_brace"] == tmp_path / "models/brace/tw_quest/agent_brace-s2"
    assert len(set(outs.values())) == 3
    # a test-env cell of +experiment=brace_tw reads the models trained on Quest
    cell = compose_cfg(tmp_path, "+experiment=brace_tw", "env=tw_cooking",
                       "method=brace_frozen_belief", "brace.seed=2")  # fmt: skip
    assert cell.slm.backend.path.belief == str(outs["frozen_belief"] / "rl-always" / "belief")
    direct = compose_cfg(tmp_path, "+experiment=brace_tw", "method=brace_direct_rl")
    assert direct.prompt.name == "history"
    assert direct.slm.backend.path.policy.endswith("brace/tw_quest/direct_rl-s0/rl-always/policy")


def test_a_model_made_with_another_lambda_or_other_rules_is_never_reused(tmp_path, monkeypatch):
    """The completion record keeps every setting that changes a trained model: a folder made
    with GAE lambda 0.95, another number of random SFT trajectories, under the old format
    score or on another env config is refused (naming what differs), never reused."""
    from benchmark.brace.models import build_model, check_reusable

    now = settings.check(compose_cfg(tmp_path, *TOY))
    old = settings.check(compose_cfg(tmp_path, *TOY, "brace.rl.lam=0.95"))
    folder = tmp_path / "rl"
    build_model(folder, lambda w: (w / "weights.bin").write_bytes(b"x"), old.rl_identity())
    check_reusable(folder, old.rl_identity())  # the same settings: reused
    with pytest.raises(SystemExit, match=r"trained with other settings \(rl: .*'lam': 0.95"):
        check_reusable(folder, now.rl_identity())
    sft = tmp_path / "sft"
    fewer = settings.check(compose_cfg(tmp_path, *TOY, "brace.sft_random_trajectories=0"))
    build_model(sft, lambda w: (w / "weights.bin").write_bytes(b"x"), fewer.sft_identity())
    with pytest.raises(SystemExit, match=r"sft_random_trajectories"):
        check_reusable(sft, now.sft_identity())
    build_model(tmp_path / "rl2", lambda w: (w / "w.bin").write_bytes(b"x"), now.rl_identity())
    monkeypatch.setitem(settings.RULES, "format_score", "binary-gate")  # the code's rules change
    with pytest.raises(SystemExit, match=r"\(rules: "):
        check_reusable(tmp_path / "rl2", now.rl_identity())
    other_games = settings.check(compose_cfg(tmp_path, *TOY, "env.task.max_steps=7"))
    assert other_games.rl_identity()["env"] != now.rl_identity()["env"]  # the env config counts
    assert now.rl_identity()["env_name"] == "empty5x5_random"


def test_the_rl_iteration_count_of_minus_one_is_refused_in_seconds_before_any_work(tmp_path):
    """The CLI, as a user runs it: exit status 1, one line naming the key and what is allowed,
    no model folder, no report, within seconds."""
    t0 = time.perf_counter()
    proc = run_cli(tmp_path, "env=tw_quest", "brace.rl.iterations=-1", check=False,
                   module="benchmark.brace.train", timeout=120)  # fmt: skip
    seconds = time.perf_counter() - t0
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Error: brace.rl.iterations=-1: must be >= 1" in proc.stderr
    assert not (tmp_path / "models").exists() and not list(tmp_path.rglob(COMPLETE))
    assert seconds < 60, seconds  # composing and checking only (seconds on an idle core)


def _toy(tmp_path, *more):
    return compose_cfg(tmp_path, *TOY, *more)


@pytest.mark.slow
def test_the_trainer_job_trains_reports_and_a_rerun_does_nothing_again(tmp_path):
    """At toy size with brace.algorithm=ppo: the models are complete, the report has the
    critic's value loss and the paired gains and lands in the job dir; the same settings again
    reuse everything (reused.json); other settings are refused before any work."""
    from benchmark.brace.train import run_job

    cfg = _toy(tmp_path, "brace.algorithm=ppo")
    first = run_job(cfg, tmp_path / "job1", [], multirun=False)
    out = Path(cfg.brace.out)
    assert all(model_complete(out / "sft" / r) for r in ("belief", "policy"))
    assert model_complete(out / "rl-always")  # one record for both roles' RL models
    assert {p.name for p in (out / "rl-always").iterdir()} >= {"belief", "policy", COMPLETE}
    assert first["complete"] and first["rl"]["algorithm"] == "ppo"
    assert first["rl"]["value_loss"]["policy"] and "train_r_env" in first["gains"]
    assert json.loads((tmp_path / "job1" / "summary.json").read_text())["gains"] == first["gains"]
    assert (out / "rl-always.png").stat().st_size > 0
    again = run_job(_toy(tmp_path, "brace.algorithm=ppo"), tmp_path / "job2", [], False)
    assert again["gains"] == first["gains"] and (tmp_path / "job2" / "reused.json").exists()
    before = (out / "sft" / "belief" / COMPLETE).read_bytes()
    with pytest.raises(SystemExit, match=r"trained with other settings \(.*sft_lr"):
        run_job(_toy(tmp_path, "brace.sft_lr=1e-2"), tmp_path / "job3", [], False)
    assert (out / "sft" / "belief" / COMPLETE).read_bytes() == before


@pytest.mark.slow
def test_a_second_job_on_one_output_reuses_the_models_the_first_finished(
    tmp_path, monkeypatch, capsys
):
    """Two jobs on one brace.out (a requeued job beside the original): the second found the
    models incomplete at its start and waited on their locks while the first finished them; it
    then reuses the first's complete models (SFT and RL), never trains them again, and reports."""
    import shutil

    from benchmark.brace import pipeline, rollout
    from benchmark.brace.train import run_job

    first = run_job(_toy(tmp_path), tmp_path / "job1", [], multirun=False)
    out = Path(_toy(tmp_path).brace.out)
    aside = tmp_path / "first-job"  # what the first job publishes while the second waits
    aside.mkdir()
    for name in ("sft", "rl-always", pipeline.REPORT):
        (out / name).rename(aside / name)
    stamps = {p: p.stat().st_mtime_ns for p in aside.rglob(COMPLETE)}
    real_examples, real_made_with = rollout.teacher_examples, pipeline.made_with

    def examples_then_first_finishes_sft(*args, **kwargs):
        found = real_examples(*args, **kwargs)  # the second job's SFT data, before its lock
        (aside / "sft").rename(out / "sft")
        shutil.copy2(aside / pipeline.REPORT, out / pipeline.REPORT)
        return found

    def checked_then_first_finishes_rl(directory, digests=None):
        made = real_made_with(directory, digests)  # not complete yet: the second goes to build
        if Path(directory) == out / "rl-always" and (aside / "rl-always").exists():
            (aside / "rl-always").rename(out / "rl-always")
        return made

    monkeypatch.setattr(rollout, "teacher_examples", examples_then_first_finishes_sft)
    monkeypatch.setattr(pipeline, "made_with", checked_then_first_finishes_rl)
    second = run_job(_toy(tmp_path), tmp_path / "job2", [], multirun=False)
    assert second["complete"] and not (tmp_path / "job2" / "error.json").exists()
    assert second["sft"] == json.loads(json.dumps(first["sft"], default=str))  # the first's
    assert second["rl"]["reused"] is True
    assert "finished by another job" in capsys.readouterr().out  # RL's lock, entered too late
    # the folders in place are the first job's, untouched: nothing was trained again
    assert {p.relative_to(out): p.stat().st_mtime_ns for p in out.rglob(COMPLETE)} == {
        p.relative_to(aside): t for p, t in stamps.items()
    }


# the trainer in a subprocess whose model saves write their files, then wait to be killed
KILLABLE = """
import sys, time
from pathlib import Path
import benchmark.finetune.lm as lm
real, marker = lm.save, Path(sys.argv[1])
def save(model, tokenizer, out_dir, *args, **kwargs):
    real(model, tokenizer, out_dir, *args, **kwargs)
    marker.write_text(str(out_dir))
    time.sleep(600)
lm.save = save
from benchmark.brace.train import cli
sys.argv = [sys.argv[0], *sys.argv[2:]]
sys.exit(cli())
"""


@pytest.mark.slow
def test_kill_9_while_a_model_is_saved_then_the_rerun_recomputes_and_finishes(tmp_path):
    marker = tmp_path / "saving"
    args = [f"paths.root={tmp_path}", *TOY, "brace.algorithm=grpo"]
    env = dict(os.environ, BENCHMARK_ROOT=str(tmp_path), PYTHONUNBUFFERED="1")
    script = tmp_path / "killable_trainer.py"
    script.write_text(KILLABLE)
    proc = subprocess.Popen([sys.executable, str(script), str(marker), *args], cwd=REPO,
                            env=env, start_new_session=True)  # fmt: skip
    try:
        deadline = time.time() + 300
        while not marker.exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the trainer never saved a model"
        os.killpg(
            proc.pid, signal.SIGKILL
        )  # kill -9 inside the save (files written, not published)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    saved = Path(marker.read_text())
    assert any(saved.iterdir())  # the half-made folder the kill left
    out = tmp_path / "models/brace/empty5x5_random/agent_brace-s0"
    assert not model_complete(out / "sft" / "belief")
    assert not (out / "brace_train.json").exists()
    rerun = run_cli(tmp_path, *TOY, "brace.algorithm=grpo", module="benchmark.brace.train",
                    timeout=600)  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr
    assert model_complete(out / "sft" / "belief") and model_complete(out / "rl-always")
    report = json.loads((out / "brace_train.json").read_text())
    assert report["complete"] and report["rl"]["algorithm"] == "grpo"
    assert not saved.exists()  # the killed build's work folder was cleaned up


def test_the_plan_of_brace_tw_lists_every_row(tmp_path):
    """`python -m benchmark.plan +experiment=brace_tw`: the twelve rows (every row
    +experiment=brace_tw_train trains, the appendix ablations included) on the three TextWorld
    games, three runs each; nothing is trained or built to plan them (the trained rows' models
    and the tiny base are "not built yet"), and no row is invalid."""
    from benchmark.plan import plan_sweep
    from benchmark.plan_data import INVALID

    plan = plan_sweep([f"paths.root={tmp_path}", "+experiment=brace_tw"])
    assert plan.jobs == 3 * 12 * 3
    rows = {(o.split("=")[1]) for c in plan.cells for o in c.overrides if o.startswith("method=")}
    assert rows == {"brace_agent", "brace_frozen_belief", "brace_base", "brace_react",
                    "brace_mem1", "brace_direct_rl", "brace_react_rl",
                    "brace_summary_belief", *(f"brace_{r}" for r in ABLATION_ROWS)}  # fmt: skip
    envs = {o.split("=")[1] for c in plan.cells for o in c.overrides if o.startswith("env=")}
    assert envs == {"tw_quest", "tw_treasure", "tw_cooking"}
    assert not [c.note for c in plan.cells if c.status == INVALID]
    assert all(c.note.startswith("model not built yet") for c in plan.cells), {
        c.note for c in plan.cells
    }
    assert not (tmp_path / "models").exists() or not list((tmp_path / "models").rglob(COMPLETE))


# the TextWorld preset at toy size: a 2-game training pool, 2-step RL episodes, one test
# episode of at most 3 steps per cell, one run
TOY_TW = ["env.task.train_games=2", "brace.teacher_episodes=2", "brace.sft_examples=4",
          "brace.sft_epochs=1", "brace.held_out_episodes=1", "brace.reward_episodes=1",
          "brace.rl_max_steps=2", "brace.rl.iterations=1", "brace.rl.policy_iterations=1",
          "brace.rl.seeds_per_step=1", "brace.rl.group=2", "brace.rl.minibatch=4",
          "brace.seed=0"]  # fmt: skip


# the trained rows the end-to-end test trains (the appendix ablations train below)
EVALUATED_ROWS = ("agent_brace", "frozen_belief", "direct_rl", "react_rl", "summary_belief")
ABLATION_ROWS = ("no_state_rewards", "no_correctness_tracking", "binary_labels",
                 "no_task_supervision")  # fmt: skip
# the rows the end-to-end test evaluates: the trained rows above and the untrained ones (the
# preset also evaluates the ablations, trained by the test below)
EIGHT_ROWS = (*(f"brace_{r}" for r in ("agent", "frozen_belief", "direct_rl", "react_rl",
              "summary_belief")), "brace_base", "brace_react", "brace_mem1")  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(3400)  # 5 trainings, 24 cells, a report: 790 s on 2 busy cores
def test_the_textworld_preset_at_toy_size_trains_evaluates_and_reports(tmp_path):
    """+experiment=brace_tw_train then +experiment=brace_tw, one run, as a user runs them: the
    five trained rows brace_tw evaluates train on Quest, the eight rows are evaluated on the
    three games (the test games read the Quest models), and the report has the belief table
    with the Brier score and the runs table."""
    train = run_cli(tmp_path, "+experiment=brace_tw_train", "-m", *TOY_TW,
                    f"brace={','.join(EVALUATED_ROWS)}", module="benchmark.brace.train",
                    timeout=1400)  # fmt: skip
    assert "5 jobs: 5 completed" in train.stdout, train.stdout[-3000:]
    for row in EVALUATED_ROWS:
        assert model_complete(tmp_path / f"models/brace/tw_quest/{row}-s0/rl-always")
    frozen = json.loads((tmp_path / "models/brace/tw_quest/frozen_belief-s0/brace_train.json"
                         ).read_text())  # fmt: skip
    assert not any(frozen["rl"]["value_loss"].get("belief") or [])  # the belief never updated
    assert frozen["rl"]["value_loss"]["policy"]
    evaluate = run_cli(tmp_path, "+experiment=brace_tw", "-m", *TOY_TW, "eval.n_episodes=1",
                       "env.task.max_steps=3", f"method={','.join(EIGHT_ROWS)}",
                       timeout=1400)  # fmt: skip
    assert "24 jobs: 24 completed" in evaluate.stdout, evaluate.stdout[-3000:]
    (sweep,) = (tmp_path / "sweeps" / "brace_tw").iterdir()
    report = run_cli(tmp_path, str(sweep), module="benchmark.report", timeout=600)
    text = (sweep / "report" / "report.md").read_text()
    assert "Brier" in text and "belief_brier.png" in text, report.stdout[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("row", ABLATION_ROWS)
def test_each_appendix_ablation_row_trains_end_to_end_at_toy_size(tmp_path, row):
    """brace=<ablation> (the reward, label and task-supervision ablations of +experiment=
    brace_tw_train) trains both roles and writes its report, at toy size on a grid."""
    from benchmark.brace.train import run_job

    cfg = _toy(tmp_path, f"brace={row}")
    done = run_job(cfg, tmp_path / "job", [], multirun=False)
    out = Path(cfg.brace.out)
    assert out.name == f"{row}-s0" and done["complete"]
    assert model_complete(out / "rl-always")
    assert done["rl"]["value_loss"]["policy"]


def test_the_trainers_textworld_games_go_under_the_jobs_results_root(tmp_path):
    """The checked settings hold the env as a plain dict (no job config around it): the
    pipeline names the job's results root, so its games are made under <paths.root>/textworld,
    never under the working directory's outputs/."""
    from benchmark.brace.pipeline import task_for

    s = settings.check(compose_cfg(tmp_path, "env=tw_quest"))
    assert isinstance(s.env, dict)
    task = task_for(s.env, 5, root=tmp_path)
    assert task.results_root == tmp_path  # its games: <results_root>/textworld (games_root)
