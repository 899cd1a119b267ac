"""A killed PPO training continues where it stopped (benchmark.policy.resume): the state file
round-trips, a training stopped by a real SIGTERM at a fixed step and resumed ends with the
uninterrupted training's weights bit for bit, and the checkpoint cache resumes and cleans up.
Real SB3 PPO on MiniGrid."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmark.envs import make_task
from benchmark.policy import resume
from benchmark.policy.checkpoints import checkpoint_dir, config_hash, ensure_dir
from benchmark.policy.train import ALGORITHMS, ThresholdCheckpoints, train, training_envs
from tests.malicious_zip import Payload
from tests.policy.test_policy import _weights, job_cfg

ROOT = Path(__file__).resolve().parents[2]
# 2 envs x 128 steps: a rollout boundary every 256 steps; the SIGTERM comes at the 512-step
# evaluation, the state is saved at the next boundary, which is the same step
SMALL = {"total_timesteps": 1024, "eval_freq": 256, "resume_every_steps": 0}


@pytest.fixture(scope="module")
def task():
    return make_task("empty5x5_random")


class Stop(Exception):
    """What submitit's preemption handler does after requeueing: leave the training."""


def _sigterm_at(steps: int):
    def log_fn(row: dict) -> None:
        if row["timesteps"] == steps:
            os.kill(os.getpid(), signal.SIGTERM)

    return log_fn


def _curve(d: Path) -> list[list[str]]:
    return [line.split(",")[:3] for line in (d / "curve.csv").read_text().splitlines()]


def _same_checkpoints(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.glob("*.zip"))
    assert names == sorted(p.name for p in b.glob("*.zip")) and "final.zip" in names
    for name in names:
        wa, wb = _weights(a / name), _weights(b / name)
        assert all(torch.equal(wa[k], wb[k]) for k in wa), name
    assert _curve(a) == _curve(b)


@pytest.mark.parametrize(
    "policy_file",
    [
        "ppo_dropout",
        pytest.param("ppo_lstm", marks=pytest.mark.slow),
        pytest.param("ppo_cnn", marks=pytest.mark.slow),
    ],
)
def test_sigterm_then_resume_gives_the_uninterrupted_weights(task, tmp_path, policy_file):
    """A SIGTERM whose previous handler is Python code (submitit's: requeue, then exit) saves
    the state at the next rollout boundary and hands the signal on; a second train() with the
    same state file continues at that step and ends bit-identical to a training never stopped.
    The LSTM policy checks the recurrent states that model.save leaves out, the CNN the feedback
    paper's recipe (image observations, MiniGrid CNN extractor)."""
    cfg = job_cfg(tmp_path, policy_file, **SMALL).policy
    train(task, cfg, tmp_path / "a")
    state = tmp_path / "state"

    def submitit_like(signum, frame):
        raise Stop

    previous = signal.signal(signal.SIGTERM, submitit_like)
    try:
        with pytest.raises(Stop):
            train(task, cfg, tmp_path / "b", log_fn=_sigterm_at(512), resume_path=state)
        assert signal.getsignal(signal.SIGTERM) is submitit_like  # ours is gone
    finally:
        signal.signal(signal.SIGTERM, previous)
    saved = resume.read(state)
    assert saved["timesteps"] == 512
    assert sorted(saved["files"]) == ["best.json", "best.zip", "curve.csv", "r000.json", "r000.zip"]
    # the resumed run starts in a new directory (the cache trains in a per-process one)
    rows: list[dict] = []
    train(task, cfg, tmp_path / "c", log_fn=rows.append, resume_path=state)
    assert [r["timesteps"] for r in rows] == [768, 1024]  # nothing before 512 redone
    _same_checkpoints(tmp_path / "a", tmp_path / "c")


def test_state_file_round_trip(task, tmp_path):
    """Everything capture() takes comes back: weights, optimizer, counters, last observations,
    the envs mid-episode, the RNGs, the bookkeeping and the files."""
    cfg = job_cfg(tmp_path, **SMALL).policy
    out = tmp_path / "out"
    state = tmp_path / "state"
    cfg.total_timesteps = 512
    cfg.resume_every_steps = 256
    train(task, cfg, out, resume_path=state)
    saved = resume.read(state)
    assert saved["timesteps"] == 256  # the boundary after the first rollout
    # a model and bookkeeping as of that save, restored in a fresh directory
    algo = ALGORITHMS["ppo"][0]
    restored = tmp_path / "restored"
    restored.mkdir()
    assert state.read_bytes()[:1] != b"\x80"  # safetensors, no pickle anywhere
    model = resume.restore_model(saved, algo, "cpu", restored, training_envs(task, cfg))
    assert sorted(p.name for p in restored.iterdir()) == sorted(saved["files"])
    assert model.num_timesteps == 256 and model._n_updates == 2
    assert np.array_equal(model._last_obs, saved["attrs"]["_last_obs"])
    # the envs are replayed to the saved mid-episode state (checked against the last
    # observations) and go on alike from it in every restore
    assert any(s["actions"] is not None for s in saved["envs"])  # an episode in progress
    again = resume.restore_model(saved, algo, "cpu", tmp_path, training_envs(task, cfg))
    actions = np.array([2, 2])
    assert np.array_equal(model.get_env().step(actions)[0], again.get_env().step(actions)[0])
    opt = model.policy.optimizer.state_dict()["state"]
    assert opt and all(int(s["step"]) == 2 * 4 for s in opt.values())  # 2 epochs x 4 batches
    checkpoints = ThresholdCheckpoints(task, restored, [0.0], 512, lambda k: [0], None)
    resume.restore_bookkeeping(saved, checkpoints)
    assert checkpoints.next_eval == 512 and checkpoints.pending == [0.99]  # r000 at 256
    assert checkpoints.evaluations == 1  # the next validation plays policy.eval_seeds' second
    torch.manual_seed(123)
    np.random.seed(123)
    resume.restore_rng(saved)
    assert torch.equal(torch.get_rng_state(), saved["rng"]["torch"])
    assert np.random.get_state()[1].tolist() == saved["rng"]["numpy"][1].tolist()


def test_a_pickled_state_in_the_results_root_is_refused_never_loaded(task, tmp_path):
    """A state file that is a pickle (an earlier release's, or planted): resuming the training
    refuses it in one line naming the file and what to do, and never unpickles it."""
    cfg = job_cfg(tmp_path, **SMALL).policy
    state, marker = tmp_path / ".ckpt.resume", tmp_path / "payload-ran"
    state.write_bytes(pickle.dumps({"format": 1, "env": Payload(marker)}))
    with pytest.raises(ValueError, match="refused to read") as refused:
        train(task, cfg, tmp_path / "out", resume_path=state)
    assert not marker.exists() and state.exists()  # never loaded, never moved
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"refused to read {state}: ")
    assert "delete it and rerun to train from the start" in message


def test_a_state_whose_sb3_zip_runs_code_is_refused_never_loaded(task, tmp_path):
    """The SB3 zip inside a state file is loaded (SB3 unpickles its data) only after the
    pickle check: a `__reduce__` payload in its data is refused and never runs."""
    import base64
    import io
    import zipfile

    cfg = job_cfg(tmp_path, **{**SMALL, "total_timesteps": 512, "resume_every_steps": 256}).policy
    state, marker = tmp_path / ".ckpt.resume", tmp_path / "payload-ran"
    train(task, cfg, tmp_path / "a", resume_path=state)
    saved = resume.read(state)
    planted = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(saved["model"])) as zin, zipfile.ZipFile(planted, "w") as zout:
        for name in zin.namelist():
            data = zin.read(name)
            if name == "data":
                entries = json.loads(data)
                blob = base64.b64encode(pickle.dumps(Payload(marker))).decode()
                entries["policy_class"][":serialized:"] = blob
                data = json.dumps(entries).encode()
            zout.writestr(name, data)
    resume.write({**saved, "model": planted.getvalue()}, state)
    with pytest.raises(ValueError, match=r"refused to load the saved SB3 zip: .*policy_class"):
        train(task, cfg, tmp_path / "b", resume_path=state)
    assert not marker.exists()


def test_a_state_that_cannot_be_saved_costs_only_resumability(task, tmp_path, caplog):
    import logging

    cfg = job_cfg(tmp_path, **{**SMALL, "total_timesteps": 512, "resume_every_steps": 256}).policy
    with caplog.at_level(logging.WARNING, logger="benchmark.policy.resume"):
        # a directory that cannot be made (not even by root): no state is ever saved there
        unwritable = Path("/proc/self/no-such-dir/state")
        final = train(task, cfg, tmp_path / "out", resume_path=unwritable)
    assert final.is_file()
    assert "could not save the training state at 256 steps" in caplog.text


def test_unreadable_state_is_set_aside_and_bad_settings_refused(tmp_path):
    state = tmp_path / ".x.resume"
    assert resume.read(state) is None
    state.write_bytes(b"half a pickle")
    assert resume.read(state) is None
    assert not state.exists() and len(list(tmp_path.glob(".x.resume.corrupt-*"))) == 1
    for bad in (-1, 1.5, True, "100"):
        with pytest.raises(ValueError, match=r"policy.resume_every_steps=.* allowed an integer"):
            resume.every_steps({"resume_every_steps": bad})
    assert resume.every_steps({}) == resume.DEFAULT_EVERY_STEPS


def test_resume_interval_is_no_part_of_any_identity(tmp_path):
    from benchmark.cell import CellSpec
    from tests.conftest import compose_cfg

    assert config_hash(job_cfg(tmp_path, resume_every_steps=7)) == config_hash(job_cfg(tmp_path))
    specs = [
        CellSpec.from_config(compose_cfg(tmp_path, "gate=never", *extra)).with_inputs(
            policy_weights="0" * 64
        )
        for extra in ([], ["policy.resume_every_steps=7"])
    ]
    assert specs[0].hash == specs[1].hash


@pytest.mark.slow
def test_killed_process_resumes_through_the_cache(tmp_path):
    """The job as a user runs it: a process training through the checkpoint cache gets a real
    SIGTERM (default action) at 1024 of 4096 steps and dies of it, leaving the state file and
    no temporary directory; the next job resumes, publishes the directory with the weights of
    an uninterrupted training, and deletes the state."""
    policy = {**SMALL, "total_timesteps": 4096, "eval_freq": 512, "resume_every_steps": 512}
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        from pathlib import Path
        from tests.policy.test_policy import job_cfg
        from benchmark.policy.checkpoints import ensure_dir
        def kill(row):
            if row["timesteps"] == 1024:
                os.kill(os.getpid(), signal.SIGTERM)
        d, trained = ensure_dir(job_cfg(Path(sys.argv[1]), **{policy!r}), log_fn=kill)
        print("FINISHED", d)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "b")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert run.returncode == -signal.SIGTERM, run.stderr[-3000:]
    assert "FINISHED" not in run.stdout
    cfg = job_cfg(tmp_path / "b", **policy)
    d = checkpoint_dir(cfg)
    state = resume.state_path(d)
    assert resume.read(state)["timesteps"] == 1024
    assert sorted(p.name for p in d.parent.iterdir()) == sorted([state.name, d.name + ".lock"])
    rows: list[dict] = []
    d2, trained = ensure_dir(cfg, log_fn=rows.append)
    assert trained and d2 == d and not state.exists()
    assert rows[0]["timesteps"] == 1536
    a, _ = ensure_dir(job_cfg(tmp_path / "a", **policy))
    _same_checkpoints(a, d)
    assert json.loads((d / "final.json").read_text())["timesteps"] == 4096


class PreemptedTraining:
    """A submitit job that trains through the checkpoint cache and, on its first run only, is
    preempted (USR2, submitit's signal) at 1024 steps; `checkpoint` resubmits it unchanged, as
    Hydra's submitit launcher does."""

    def __init__(self, root: str, policy: dict):
        self.root, self.policy = root, policy

    def __call__(self) -> tuple[str, bool]:
        import logging

        logging.basicConfig(level=logging.INFO)
        root = Path(self.root)
        first = not (root / "preempted").exists()

        def preempt(row: dict) -> None:
            if first and row["timesteps"] == 1024:
                (root / "preempted").touch()
                os.kill(os.getpid(), signal.SIGUSR2)

        d, trained = ensure_dir(job_cfg(root, **self.policy), log_fn=preempt)
        return str(d), trained

    def checkpoint(self):
        import submitit

        return submitit.helpers.DelayedSubmission(self)


@pytest.mark.slow
def test_preempted_submitit_job_requeues_and_resumes(tmp_path, monkeypatch):
    """submitit's own preemption handling (local executor: the SLURM job environment's signal
    handler, requeue by restarting the job): the state is saved before submitit requeues and
    exits, the requeued job resumes from it and ends with the uninterrupted weights."""
    import submitit

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    policy = {**SMALL, "total_timesteps": 2048, "eval_freq": 512}
    executor = submitit.LocalExecutor(tmp_path / "submitit")
    executor.update_parameters(timeout_min=60)
    job = executor.submit(PreemptedTraining(str(tmp_path / "b"), policy))
    d, trained = job.result()
    log = Path(job.paths.stderr).read_text() + Path(job.paths.stdout).read_text()
    assert (tmp_path / "b" / "preempted").exists() and trained
    assert "this job is preempted" in log and "Requeued job" in log, log[-3000:]
    assert "resuming PPO training at 1024 steps" in log, log[-3000:]
    assert not resume.state_path(Path(d)).exists()
    assert not list(Path(d).parent.glob(".*.work-*"))  # the stopped run's directory is gone
    a, _ = ensure_dir(job_cfg(tmp_path / "a", **policy))
    _same_checkpoints(a, Path(d))
