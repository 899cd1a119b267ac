"""Dropout PPO policy: network layout, save/load, training with reward-threshold checkpoints,
the checkpoint cache (train once, also across processes), clear errors. Real MiniGrid + SB3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from stable_baselines3 import PPO
from torch import nn

from benchmark.envs import load_env_cfg, make_task
from benchmark.policy import CheckpointError, DropoutActorCriticPolicy, ensure, load, train
from benchmark.policy.checkpoints import (
    checkpoint_dir,
    config_hash,
    ensure_dir,
    resolve,
)
from benchmark.policy.network import MinigridFeaturesExtractor, policy_kwargs
from benchmark.policy.train import TRAINING_VERSION, evaluate
from benchmark.seeds import DEFAULT_SPLITS, TRAIN_SEED_MIN

ROOT = Path(__file__).resolve().parents[2]
# PPO settings that learn Empty-Random-5x5 in a few thousand steps (SB3 defaults need ~1e5)
FAST_PPO = {"n_steps": 128, "batch_size": 64, "n_epochs": 10}


def job_cfg(tmp: Path, policy_file: str = "ppo_dropout", **policy) -> OmegaConf:
    """The env x policy x paths part of the job config, from the real YAML files."""
    cfg = OmegaConf.create(
        {
            "env": load_env_cfg("empty5x5_random"),
            "policy": OmegaConf.load(ROOT / f"conf/policy/{policy_file}.yaml"),
            "paths": {"checkpoints": str(tmp / "checkpoints")},
        }
    )
    small = {
        "net_arch": [32, 32],
        "thresholds": [0.0, 0.99],  # 0.0 is crossed at the first evaluation, 0.99 never
        "total_timesteps": 1024,
        "n_envs": 2,
        "learning_rate": 1e-3,
        "ppo": {"n_steps": 128, "batch_size": 64, "n_epochs": 2},
        "eval_freq": 512,
        "eval_episodes": 3,
        "progress_bar": False,
    }
    cfg.policy = OmegaConf.merge(cfg.policy, small, policy)
    return cfg


@pytest.fixture(scope="module")
def task():
    return make_task("empty5x5_random")


def _obs(task, n: int = 50) -> np.ndarray:
    rng = np.random.default_rng(1)
    out, seed = [], 0
    while len(out) < n:
        ep = task.episode(seed)
        seed += 1
        while not ep.done and len(out) < n:
            out.append(ep.obs)
            ep.step(int(rng.integers(len(task.action_names))))
    return np.stack(out)


def _random_policy(task, seeds: list[int]) -> dict[str, float]:
    rng = np.random.default_rng(0)
    rewards, successes = [], []
    for s in seeds:
        ep = task.episode(s)
        while not ep.done:
            ep.step(int(rng.integers(len(task.action_names))))
        rewards.append(ep.total_reward)
        successes.append(ep.outcome()["success"])
    return {"reward": float(np.mean(rewards)), "success": float(np.mean(successes))}


# -- network -----------------------------------------------------------------------------------


def test_dropout_only_in_mlp_extractor_after_each_activation(task):
    model = PPO(
        DropoutActorCriticPolicy,
        task.validation_env(),
        policy_kwargs={"net_arch": [64, 32], "dropout": 0.3},
        device="cpu",
    )
    pol = model.policy
    for net in (pol.mlp_extractor.policy_net, pol.mlp_extractor.value_net):
        kinds = [type(m) for m in net]
        assert kinds == [nn.Linear, nn.Tanh, nn.Dropout, nn.Linear, nn.Tanh, nn.Dropout]
        assert all(m.p == 0.3 for m in net if isinstance(m, nn.Dropout))
    all_dropout = [n for n, m in pol.named_modules() if isinstance(m, nn.Dropout)]
    assert len(all_dropout) == 4 and all(n.startswith("mlp_extractor.") for n in all_dropout)
    # eval (what predict uses) is deterministic; train mode is stochastic
    obs = torch.as_tensor(_obs(task, 20))
    pol.set_training_mode(False)
    with torch.no_grad():
        a, b = (
            pol.get_distribution(obs).distribution.logits,
            pol.get_distribution(obs).distribution.logits,
        )
        assert torch.equal(a, b)
        pol.set_training_mode(True)
        c = pol.get_distribution(obs).distribution.logits
    pol.set_training_mode(False)
    assert not torch.allclose(a, c)
    with pytest.raises(ValueError, match="dropout"):
        PPO(DropoutActorCriticPolicy, task.validation_env(), policy_kwargs={"dropout": 1.0})


def test_save_load_round_trip_gives_identical_actions(task, tmp_path):
    model = PPO(
        DropoutActorCriticPolicy,
        task.validation_env(),
        policy_kwargs={"net_arch": [32, 32], "dropout": 0.25},
        n_steps=64,
        batch_size=64,
        device="cpu",
        seed=3,
    )
    model.learn(128)
    model.save(tmp_path / "m.zip")
    loaded = load(tmp_path / "m.zip", task=task)
    assert isinstance(loaded.policy, DropoutActorCriticPolicy)
    assert loaded.policy.dropout == 0.25
    obs = _obs(task, 200)
    np.testing.assert_array_equal(
        model.predict(obs, deterministic=True)[0], loaded.predict(obs, deterministic=True)[0]
    )
    for k, v in model.policy.state_dict().items():
        assert torch.equal(v, loaded.policy.state_dict()[k]), k


def test_load_refuses_corrupt_and_mismatched_checkpoints(task, tmp_path):
    model = PPO(DropoutActorCriticPolicy, task.validation_env(), n_steps=64, device="cpu")
    model.save(tmp_path / "ok.zip")
    data = (tmp_path / "ok.zip").read_bytes()
    (tmp_path / "cut.zip").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="cut.zip"):
        load(tmp_path / "cut.zip")
    with pytest.raises(CheckpointError, match="no checkpoint file"):
        load(tmp_path / "missing.zip")
    doorkey = make_task("doorkey8")  # 7 actions, the checkpoint has 4
    with pytest.raises(CheckpointError, match=r"Discrete\(4\).*Discrete\(7\)"):
        load(tmp_path / "ok.zip", task=doorkey)


# -- training ----------------------------------------------------------------------------------


class RecordingTask:
    """Delegates to a real Task and records what SB3 passes to reset, which seeds were used,
    and the seeds of the episodes validation played (`evaluated`)."""

    def __init__(self, task):
        self.task = task
        self.reset_kwargs: list[int | None] = []
        self.used: list[int] = []
        self.evaluated: list[int] = []

    def __getattr__(self, name):
        return getattr(self.task, name)

    def episode(self, seed: int):
        self.evaluated.append(seed)
        return self.task.episode(seed)

    def training_env(self, seed: int, index: int = 0, pool=None) -> gym.Env:
        outer = self

        class Record(gym.Wrapper):
            def reset(self, *, seed=None, options=None):
                outer.reset_kwargs.append(seed)
                obs, info = self.env.reset(seed=seed, options=options)
                outer.used.append(info["reset_seed"])
                return obs, info

        return Record(self.task.training_env(seed, index, pool))


def test_train_writes_threshold_checkpoints_and_curve(task, tmp_path):
    cfg = job_cfg(tmp_path).policy
    cfg.env_workers = 1  # the recording wrapper counts resets in this process
    rec = RecordingTask(task)
    rows: list[dict] = []
    final = train(rec, cfg, tmp_path / "run", log_fn=rows.append)
    out = tmp_path / "run"
    assert final == out / "final.zip"
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        ["best.json", "best.zip", "curve.csv", "final.json", "final.zip", "r000.json", "r000.zip"]
    )
    meta = json.loads((out / "r000.json").read_text())
    assert meta["threshold"] == 0.0 and meta["timesteps"] == 512
    assert set(meta) >= {"threshold", "eval_reward", "timesteps", "wall_seconds"}
    curve = (out / "curve.csv").read_text().splitlines()
    assert curve[0] == "timesteps,eval_reward,eval_success,wall_seconds"
    assert [r["timesteps"] for r in rows] == [512, 1024]
    assert len(curve) == 1 + len(rows)
    # the saved best model is the model that was evaluated: re-evaluating reproduces its reward
    best_meta = json.loads((out / "best.json").read_text())
    again = evaluate(load(out / "best.zip", task=task), task, DEFAULT_SPLITS.seeds("validation", 3))
    assert again["reward"] == pytest.approx(best_meta["eval_reward"])
    # training never handed an evaluation seed to an env
    assert set(rec.reset_kwargs) == {None}
    assert min(rec.used) >= TRAIN_SEED_MIN and len(rec.used) >= 2


@pytest.mark.parametrize("schedule", ["fixed", "cycle", "fresh"])
def test_each_validation_plays_the_seeds_of_its_schedule(task, tmp_path, schedule):
    """A real training validates 4 times (every 256 of 1024 steps) on 3 episodes each, on the
    seeds policy.eval_seeds gives that evaluation: fixed 0-2 every time (the default); cycle
    the validation split in turn (0-2, 4-6, 8-10, 12-14: one seed skipped after each, as the
    released DoorKey eval env); fresh new training seeds every time. `best` is judged on the
    same evaluation: its reward is its own evaluation's, re-played on that evaluation's seeds."""
    from benchmark.seeds import validation_schedule

    cfg = job_cfg(tmp_path, eval_freq=256, eval_seeds=schedule).policy
    if schedule == "fixed":
        del cfg["eval_seeds"]  # a policy config without the key (ppo_cnn, ppo_lstm) too
    rec = RecordingTask(task)
    rows: list[dict] = []
    train(rec, cfg, tmp_path / "run", log_fn=rows.append)
    assert [r["timesteps"] for r in rows] == [256, 512, 768, 1024]
    played = [rec.evaluated[i : i + 3] for i in range(0, len(rec.evaluated), 3)]
    expected = {
        "fixed": [[0, 1, 2]] * 4,
        "cycle": [[0, 1, 2], [4, 5, 6], [8, 9, 10], [12, 13, 14]],
    }
    if schedule == "fresh":
        assert all(min(seeds) >= TRAIN_SEED_MIN and len(set(seeds)) == 3 for seeds in played)
        assert all(a != b for a, b in zip(played, played[1:], strict=False))
        assert played == [validation_schedule("fresh", k, 3, 0, DEFAULT_SPLITS) for k in range(4)]
    else:
        assert played == expected[schedule]
    best = json.loads((tmp_path / "run" / "best.json").read_text())
    k = best["timesteps"] // 256 - 1
    again = evaluate(load(tmp_path / "run" / "best.zip", task=task), task, played[k])
    assert again["reward"] == pytest.approx(best["eval_reward"])


def test_validation_cadence_never_changes_the_weights(task, tmp_path):
    """Validation plays its own envs, greedy with dropout off: the `final` weights are the same
    whether it runs every 128 steps or once at the end (so a long training may validate rarely)."""
    weights = []
    for eval_freq in (128, 10**6):
        final = train(
            task, job_cfg(tmp_path, eval_freq=eval_freq).policy, tmp_path / f"e{eval_freq}"
        )
        weights.append(load(final, task=task).policy.state_dict())
    assert len((tmp_path / "e128" / "curve.csv").read_text().splitlines()) == 1 + 8
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_training_leaves_nothing_in_the_temp_dir(task, tmp_path, monkeypatch):
    """SB3's default logger makes an empty SB3-<time> folder in the temp dir per `learn`; the
    training sets its own (policy.train.silent_logger)."""
    import tempfile

    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    train(task, job_cfg(tmp_path, eval_freq=10**6).policy, tmp_path / "run")
    assert (tmp_path / "run" / "final.zip").is_file()
    assert [p.name for p in temp.iterdir() if p.name.startswith("SB3-")] == []


@pytest.mark.slow
def test_ppo_learns_better_than_random(task, tmp_path):
    cfg = job_cfg(
        tmp_path,
        net_arch=[64, 64],
        total_timesteps=20_000,
        n_envs=4,
        ppo=FAST_PPO,
        eval_freq=10_000,
        eval_episodes=20,
        thresholds=[0.5, 0.9],
    )
    rows: list[dict] = []
    train(task, cfg.policy, tmp_path / "run", log_fn=rows.append)
    seeds = DEFAULT_SPLITS.seeds("test", 100)
    ppo = evaluate(load(tmp_path / "run/final.zip", task=task), task, seeds)
    rnd = _random_policy(task, seeds)
    steps_per_s = rows[-1]["timesteps"] / rows[-1]["wall_seconds"]
    print(f"\nPPO 20k steps ({steps_per_s:.0f} steps/s): {ppo}; random: {rnd}")
    assert ppo["success"] >= 0.95
    assert ppo["success"] - rnd["success"] >= 0.15
    assert ppo["reward"] - rnd["reward"] >= 0.3
    assert (tmp_path / "run/r090.zip").exists()


# -- checkpoint cache --------------------------------------------------------------------------


def test_ensure_trains_once_then_hits_cache(task, tmp_path):
    cfg = job_cfg(tmp_path)
    d1, trained1 = ensure_dir(cfg)  # task built from cfg.env via make_task
    d2, trained2 = ensure_dir(cfg, task)
    assert (trained1, trained2) == (True, False) and d1 == d2
    assert d1.name.startswith("empty5x5_random-")
    mtime = (d1 / "final.zip").stat().st_mtime_ns
    assert ensure(cfg) == d1 / "best.zip"  # the default checkpoint
    cfg.policy.checkpoint = "final"
    assert ensure(cfg) == d1 / "final.zip"
    assert (d1 / "final.zip").stat().st_mtime_ns == mtime
    cfg.policy.checkpoint = "r000"
    assert ensure(cfg) == d1 / "r000.zip"
    cfg.policy.checkpoint = "r099"
    with pytest.raises(CheckpointError) as err:
        ensure(cfg)
    msg = str(err.value)
    assert "policy.checkpoint=r099 does not exist for empty5x5_random-" in msg
    assert "available r000, best, final" in msg
    # a truncated checkpoint inside a complete dir is never used: resolve refuses it, and
    # ensure recomputes the directory
    cfg.policy.checkpoint = "best"
    best = d1 / "best.zip"
    best.write_bytes(best.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="sha256"):
        resolve(d1, "best")
    assert ensure(cfg) == best and load(best, task=task) is not None


def test_interrupted_dir_is_retrained(task, tmp_path):
    cfg = job_cfg(tmp_path)
    d = checkpoint_dir(cfg)
    d.mkdir(parents=True)
    (d / "final.zip").write_bytes(b"half a zip")  # no COMPLETE marker
    d2, trained = ensure_dir(cfg, task)
    assert trained and d2 == d
    assert load(ensure(cfg), task=task) is not None


@pytest.mark.parametrize("bad", ["latest", "r30", "r0300", "R030", "final.zip", "", "t2"])
def test_checkpoint_name_format(bad):
    """Only final, best and rNNN name files (tK is resolved by the job first)."""
    with pytest.raises(ValueError, match="allowed final, best, tK|resolve it to its rNNN"):
        resolve(Path("/nonexistent"), bad)


def test_hash_ignores_runtime_keys_only(tmp_path):
    base = config_hash(job_cfg(tmp_path))
    assert config_hash(job_cfg(tmp_path, checkpoint="r030", device="cuda")) == base
    assert config_hash(job_cfg(tmp_path, dropout=0.1)) != base
    assert config_hash(job_cfg(tmp_path, seed=1)) != base
    other = job_cfg(tmp_path)
    other.env.task.max_steps = 50
    assert config_hash(other) != base
    other = job_cfg(tmp_path)
    other.env.task.step_limit = 50
    assert config_hash(other) != base
    assert config_hash(job_cfg(tmp_path, "ppo_cnn")) != base
    # keys added later: out of the hash at the value every earlier checkpoint was trained with
    assert config_hash(job_cfg(tmp_path, head="slots")) == base
    assert config_hash(job_cfg(tmp_path, head="commands")) != base
    other = job_cfg(tmp_path)
    other.env.task.ppo_input = "answer"
    assert config_hash(other) == base
    other.env.task.ppo_input = "player"
    assert config_hash(other) != base


@pytest.mark.slow
def test_two_processes_train_once(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_policy import job_cfg
        from benchmark.policy.checkpoints import ensure_dir
        from pathlib import Path
        d, trained = ensure_dir(job_cfg(Path({str(tmp_path)!r})))
        print("TRAINED" if trained else "CACHED", d)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    lines = sorted(o[0].strip().splitlines()[-1] for o in outs)
    assert lines[0].startswith("CACHED") and lines[1].startswith("TRAINED"), lines
    assert lines[0].split()[1] == lines[1].split()[1]


def test_train_refuses_managed_ppo_kwargs(task, tmp_path):
    cfg = job_cfg(tmp_path, ppo={"seed": 0})
    with pytest.raises(ValueError, match=r"policy.ppo sets \['seed'\]"):
        train(task, cfg.policy, tmp_path / "run")
    cfg = job_cfg(tmp_path, lr_schedule="cosine")
    with pytest.raises(ValueError, match="lr_schedule='cosine'"):
        train(task, cfg.policy, tmp_path / "run")


# -- the feedback paper's CNN PPO (policy=ppo_cnn) ---------------------------------------------


def test_ppo_cnn_config_is_the_papers_recipe():
    """Appendix B: CnnPolicy + MiniGrid extractor, 128 features, LR 2.5e-4 (constant, SB3's
    float LR), one env, SB3 defaults, 30k / 300k / 3M steps on the three configurations."""
    from conftest import compose_cfg

    steps = {"empty5x5_random": 30_000, "empty16x16": 300_000, "simplecrossing9": 3_000_000}
    for env, n in steps.items():
        cfg = compose_cfg(ROOT / "outputs", "policy=ppo_cnn", f"env={env}").policy
        assert cfg.total_timesteps == n and cfg.learning_rate == 2.5e-4
        assert (cfg.n_envs, cfg.lr_schedule, dict(cfg.ppo), cfg.dropout) == (1, "constant", {}, 0)
        assert (cfg.extractor, cfg.features_dim, cfg.image_normalization) == (
            "minigrid_cnn",
            128,
            "sb3",
        )
        assert cfg.checkpoint == "final"
    # other envs fall back to their own step budget
    assert compose_cfg(ROOT / "outputs", "policy=ppo_cnn").policy.total_timesteps == 3_000_000


def test_minigrid_cnn_is_the_docs_extractor_on_sb3s_image_input(task):
    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "conf/policy/ppo_cnn.yaml"))
    cfg["net_arch"] = [64, 64]
    model = PPO(DropoutActorCriticPolicy, task.validation_env(), policy_kwargs=policy_kwargs(cfg))
    ext = model.policy.features_extractor
    assert isinstance(ext, MinigridFeaturesExtractor) and ext.features_dim == 128
    convs = [m for m in ext.cnn if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size) for c in convs] == [
        (3, 16, (2, 2)),
        (16, 32, (2, 2)),
        (32, 64, (2, 2)),
    ]
    assert [type(m) for m in ext.cnn] == [nn.Conv2d, nn.ReLU] * 3 + [nn.Flatten]
    assert [type(m) for m in ext.linear] == [nn.Linear, nn.ReLU]
    assert ext.linear[0].in_features == 64 * 4 * 4
    # the input is what CnnPolicy gets from MiniGrid's uint8 image: channels first, / 255
    ep = task.episode(100)
    ep.step(2)
    raw = ep.sim.gen_obs()["image"]  # (x, y, channel)
    want = torch.as_tensor(raw.transpose(2, 0, 1)[None] / 255.0, dtype=torch.float32)
    got = ext.image(torch.as_tensor(ep.obs[None]))
    torch.testing.assert_close(got, want)
    per_channel = MinigridFeaturesExtractor(ext._observation_space, normalization="per_channel")
    scaled = raw.transpose(2, 0, 1)[None] / np.array([10.0, 5.0, 2.0]).reshape(1, 3, 1, 1)
    got = per_channel.image(torch.as_tensor(ep.obs[None]))
    torch.testing.assert_close(got, torch.as_tensor(scaled, dtype=torch.float32))
    with pytest.raises(ValueError, match="extractor='resnet'"):
        policy_kwargs({**cfg, "extractor": "resnet"})
    with pytest.raises(ValueError, match="normalization='max'"):
        MinigridFeaturesExtractor(ext._observation_space, normalization="max")
    with pytest.raises(ValueError, match="7x7x3"):
        MinigridFeaturesExtractor(gym.spaces.Box(0, 1, (10,)))


def test_ppo_cnn_trains_through_the_cache_and_serves_the_evaluation_path(task, tmp_path):
    """Checkpoints, thresholds, best/final as with ppo_dropout; load() rebuilds the CNN; the
    evaluator's calls (obs_to_tensor/_predict, and MC dropout for entropy gates) work on it."""
    from benchmark.evaluate import deterministic_actions
    from benchmark.uncertainty import mc_dropout

    cfg = job_cfg(tmp_path, "ppo_cnn", ppo={"n_steps": 128, "batch_size": 64, "n_epochs": 2})
    cfg.policy.net_arch = [16, 16]
    d, trained = ensure_dir(cfg, task)
    assert trained and d.name.startswith("empty5x5_random-")
    assert ensure(cfg) == d / "final.zip"  # ppo_cnn's default checkpoint
    assert {p.stem for p in d.glob("*.zip")} == {"best", "final", "r000"}
    model = load(ensure(cfg), task=task)
    assert isinstance(model.policy.features_extractor, MinigridFeaturesExtractor)
    obs = _obs(task, 30)
    actions = deterministic_actions(model.policy, obs)
    np.testing.assert_array_equal(actions, model.predict(obs, deterministic=True)[0])
    unc = mc_dropout(model.policy, obs, 4)  # dropout 0: every MC pass agrees
    np.testing.assert_array_equal(unc.action, actions)
    np.testing.assert_allclose(unc.epistemic, 0.0, atol=1e-6)


@pytest.mark.slow
def test_ppo_cnn_reaches_the_papers_rl_row_on_empty_5x5(tmp_path):
    """The paper's 30k-step recipe on Empty-Random-5x5 with MiniGrid's 7 actions (test seeds):
    100% success and reward above 0.9, as Table II's RL baseline (0.950 / 100%). ~3 min."""
    cfg = OmegaConf.create(
        {
            "env": load_env_cfg("empty5x5_random"),
            "policy": OmegaConf.load(ROOT / "conf/policy/ppo_cnn.yaml"),
            "paths": {"checkpoints": str(tmp_path / "checkpoints")},
        }
    )
    cfg.policy.progress_bar = False
    cfg.env.task.actions = "all"
    task = make_task(cfg.env)
    d, _ = ensure_dir(cfg, task)
    assert (
        json.loads((d / "final.json").read_text())["timesteps"] == 30_720
    )  # whole rollouts of 2048
    result = evaluate(load(d / "final.zip", task=task), task, DEFAULT_SPLITS.seeds("test", 100))
    print(f"\nPPO-CNN 30k on Empty-Random-5x5: {result}")
    assert result["success"] == 1.0 and result["reward"] > 0.9


# -- what reproduces and training logs at a sane rate -------------------------------------------


def test_training_code_matches_its_recorded_version():
    """TRAINING_VERSION is part of every checkpoint's hash; benchmark/policy/TRAINING_CODE records
    the training code it stands for. A change of policy/train.py or policy/network.py (other than
    comments, docstrings, formatting) fails here until it is re-recorded, after bumping
    TRAINING_VERSION when the change can alter the weights (the message says how)."""
    from benchmark.policy import provenance

    problem = provenance.check(TRAINING_VERSION)
    assert problem is None, problem


def test_training_code_digest_sees_code_not_comments(tmp_path, monkeypatch):
    from benchmark.policy import provenance

    for name in provenance.SOURCES:
        (tmp_path / name).write_text((provenance.HERE / name).read_text())
    base = provenance.training_code_digest(tmp_path)
    assert base == provenance.training_code_digest()
    train_py = tmp_path / "train.py"
    source = train_py.read_text()
    commented = source.replace(
        '"""PPO training of the dropout policy', '"""A reworded docstring; PPO training', 1
    ).replace("\nLR_SCHEDULES =", "\n# a new comment\n\n\nLR_SCHEDULES =", 1)
    assert commented != source
    train_py.write_text(commented)
    assert provenance.training_code_digest(tmp_path) == base
    train_py.write_text(source.replace("self.best = -np.inf", "self.best = 0.0", 1))
    assert provenance.training_code_digest(tmp_path) != base
    # what the test above says when the code changed without a new record
    record = tmp_path / "TRAINING_CODE"
    record.write_text(json.dumps({"training_version": 1, "digest": "0" * 64}))
    monkeypatch.setattr(provenance, "RECORD", record)
    message = provenance.check(TRAINING_VERSION)
    assert "bump TRAINING_VERSION in benchmark/policy/train.py" in message
    assert "python -m benchmark.policy training-code --record" in message


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load(path).policy.state_dict()


@pytest.mark.slow  # two trainings (~4 s)
def test_same_machine_training_is_deterministic(task, tmp_path):
    """Two trainings of one config on one machine: bit-identical weights of every checkpoint, the
    same curve and checkpoints, and byte-identical evaluation files. (The zips themselves differ:
    SB3 stores the save time in them, so each training is its own checkpoint SHA-256.)"""
    from benchmark.job import run_job
    from tests.conftest import compose_cfg

    dirs = [ensure_dir(job_cfg(tmp_path / run), task)[0] for run in ("a", "b")]
    a, b = dirs
    names = sorted(p.name for p in a.glob("*.zip"))
    assert names == sorted(p.name for p in b.glob("*.zip")) and "best.zip" in names
    for name in names:
        wa, wb = _weights(a / name), _weights(b / name)
        assert wa.keys() == wb.keys()
        assert all(torch.equal(wa[k], wb[k]) for k in wa), name

    def curve(d: Path) -> list[list[str]]:
        return [line.split(",")[:3] for line in (d / "curve.csv").read_text().splitlines()]

    assert curve(a) == curve(b) and len(curve(a)) >= 3
    episodes = []
    for run, d in zip("ab", dirs, strict=True):
        over = ["env=empty5x5_random", "gate=never", "eval.n_episodes=20"]
        cfg = compose_cfg(tmp_path / f"eval-{run}", *over, f"policy.path={d / 'final.zip'}")
        summary = run_job(cfg, tmp_path / f"job-{run}", multirun=False)
        cell = tmp_path / f"eval-{run}" / "cells" / summary["cell_hash"]
        episodes.append((cell / "episodes.jsonl").read_bytes())
    assert episodes[0] == episodes[1] and len(episodes[0].splitlines()) == 20


@pytest.mark.slow  # a timed training (~11 s)
def test_training_logs_at_a_bounded_rate(task, tmp_path, caplog):
    """eval_freq 64 over 4096 steps is 64 validations: every one is a curve row and a log_fn
    (W&B) row, but a log line comes at most every 5% of training, for each threshold checkpoint
    and for the last evaluation."""
    import logging

    from benchmark.policy.train import LOG_EVERY

    cfg = job_cfg(tmp_path, total_timesteps=4096, eval_freq=64, thresholds=[0.0, 0.99]).policy
    rows: list[dict] = []
    with caplog.at_level(logging.INFO, logger="benchmark.policy.train"):
        train(task, cfg, tmp_path / "run", log_fn=rows.append)
    lines = [r.getMessage() for r in caplog.records if "PPO eval at" in r.getMessage()]
    curve = (tmp_path / "run" / "curve.csv").read_text().splitlines()[1:]
    assert len(rows) == len(curve) >= 64
    bound = int(1 / LOG_EVERY) + 1 + len(cfg.thresholds) + 1
    assert 2 <= len(lines) <= bound, lines
    assert lines[0].startswith(f"PPO eval at {rows[0]['timesteps']} steps")
    assert lines[-1].startswith(f"PPO eval at {rows[-1]['timesteps']} steps (100%)")
    assert any("saved r000" in line for line in lines)  # a threshold checkpoint is always said
    assert all("best" in line for line in lines)


def test_match_picks_the_saved_checkpoint_nearest_the_target_success(tmp_path):
    """policy.checkpoint=match: among the checkpoints a training saved (each with its validation
    record, <name>.json), the one whose validation success is nearest policy.match_success; a
    tie goes to the earlier one; without any validation record, a clear error."""
    import shutil

    from benchmark.policy.checkpoints import CheckpointError, matched, resolve

    source = next((Path(__file__).parents[1] / "data" / "small-policy").iterdir())
    ckpt = tmp_path / source.name
    shutil.copytree(source, ckpt)
    # the records (not part of the manifest) rewritten to distinct validation successes
    for name, success, steps in (
        ("r030", 0.25, 1000), ("r050", 0.5, 2000), ("r070", 0.75, 3000), ("r090", 0.875, 4000),
        ("best", 1.0, 5000), ("final", 0.8125, 6000),
    ):  # fmt: skip
        meta = json.loads((ckpt / f"{name}.json").read_text())
        meta.update(eval_success=success, timesteps=steps)
        (ckpt / f"{name}.json").write_text(json.dumps(meta))
    assert matched(ckpt, 0.53) == "r050"
    assert matched(ckpt, 0.625) == "r050"  # a tie (0.125 each way): the earlier checkpoint
    assert matched(ckpt, 0.0) == "r030" and matched(ckpt, 1.0) == "best"
    assert matched(ckpt, 0.82) == "final"
    assert resolve(ckpt, "match", match_success=0.88) == ckpt / "r090.zip"
    with pytest.raises(ValueError, match="needs policy.match_success"):
        resolve(ckpt, "match")
    for meta in ckpt.glob("*.json"):
        if meta.name not in ("config.json", "system.json"):
            meta.unlink()
    with pytest.raises(CheckpointError, match="match: no checkpoint in .* has a validation record"):
        resolve(ckpt, "match", match_success=0.5)


def test_match_refuses_a_pick_further_than_the_tolerance(tmp_path):
    """policy.match_tolerance: a nearest checkpoint further than it from the target is refused,
    in one line naming the env, the target, the pick and its success, the tolerance and what to
    do (a weaker one: train longer; a stronger one: save earlier checkpoints); within, picked."""
    import shutil

    from benchmark.policy.checkpoints import matched, resolve

    source = next((Path(__file__).parents[1] / "data" / "small-policy").iterdir())
    ckpt = tmp_path / source.name
    shutil.copytree(source, ckpt)
    for name, success in (
        ("r030", 0.45), ("r050", 0.6), ("r070", 0.7), ("r090", 0.8), ("best", 0.8), ("final", 0.75),
    ):  # fmt: skip
        meta = json.loads((ckpt / f"{name}.json").read_text())
        meta.update(eval_success=success)
        (ckpt / f"{name}.json").write_text(json.dumps(meta))
    # 0.45 - 0.35 is 0.1 up to rounding: within
    assert resolve(ckpt, "match", match_success=0.35, match_tolerance=0.1) == ckpt / "r030.zip"
    with pytest.raises(CheckpointError) as refused:
        resolve(ckpt, "match", match_success=0.2, match_tolerance=0.1, env="FourRooms")
    message = str(refused.value)
    assert "\n" not in message
    for part in (
        "policy.checkpoint=match refused for FourRooms",
        "within policy.match_tolerance=0.1 of policy.match_success=0.2",
        "the nearest is r030 at 0.450",
        "save earlier checkpoints (lower policy.thresholds), or raise policy.match_tolerance",
    ):
        assert part in message, message
    with pytest.raises(CheckpointError, match=r"train longer \(policy.total_timesteps\)"):
        matched(ckpt, 1.0, 0.1)  # every one weaker than the target
    assert matched(ckpt, 1.0, 0.2) == "r090"  # within a tolerance raised
    with pytest.raises(ValueError, match=r"policy.match_tolerance=-0.1 is invalid"):
        resolve(ckpt, "match", match_success=0.5, match_tolerance=-0.1)


@pytest.mark.slow
def test_a_job_refuses_a_far_match_before_tuning_and_goes_on_within_tolerance(
    trained_root, tmp_path, caplog
):
    """A job with policy.checkpoint=match whose saved checkpoints are all far from
    policy.match_success fails once they are known, before the Optuna study and the test
    episodes (nothing tuned, no cell, no episode written); a target within the tolerance runs,
    and the job logs the pick's validation success beside the target."""
    import logging

    from benchmark.job import run_job
    from tests.conftest import SMALL_POLICY, compose_cfg

    # the small policy's saved checkpoints all have validation success 1.0
    base = ["env=empty5x5_random", *SMALL_POLICY, "policy.checkpoint=match", "eval.n_episodes=4"]
    tuned = ["gate=entropy", "gate.tau=auto", "slm=oracle", "prompt=basic", "tuning.n_trials=2"]
    made = {d: set((trained_root / d).glob("*")) for d in ("tuning", "cells")}
    far = compose_cfg(trained_root, *base, *tuned, "policy.match_success=0.5")
    with pytest.raises(CheckpointError, match="match refused for empty5x5_random") as refused:
        run_job(far, tmp_path / "far", multirun=False)
    assert "within policy.match_tolerance=0.1 of policy.match_success=0.5" in str(refused.value)
    assert "the nearest is" in str(refused.value) and "at 1.000" in str(refused.value)
    assert {d: set((trained_root / d).glob("*")) for d in made} == made
    assert not (tmp_path / "far" / "episodes.jsonl").exists()
    assert "match refused" in json.loads((tmp_path / "far" / "error.json").read_text())["message"]

    near = compose_cfg(trained_root, *base, "gate=never", "policy.match_success=0.95")
    with caplog.at_level(logging.INFO, logger="benchmark.job"):
        summary = run_job(near, tmp_path / "near", multirun=False)
    assert summary["n_episodes"] == 4
    said = [r.getMessage() for r in caplog.records if "policy.checkpoint=match:" in r.getMessage()]
    assert len(said) == 1 and "validation success 1.000 beside the target" in said[0], said
    assert "policy.match_success=0.95, tolerance 0.1" in said[0]
