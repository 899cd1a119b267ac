"""benchmark.policy.sb3zip reads an SB3 zip's pickled settings without running them. The policy
identity it gives must be the one the suite computed when it unpickled them (SB3's
`json_to_data`), or every cell would change hash: `reference_settings` is that old code, run
here beside the new one on real zips of every kind the suite and SB3 write (trusted: made here)."""

from __future__ import annotations

import hashlib
import json
import zipfile

import gymnasium as gym
import numpy as np
import pytest
import torch
from sb3_contrib import RecurrentPPO
from stable_baselines3 import PPO

from benchmark.policy import sb3zip
from benchmark.policy.checkpoints import (
    SETTINGS_KEYS,
    CheckpointError,
    check_pickles,
    load,
    policy_digest,
)
from benchmark.policy.network import DropoutActorCriticPolicy
from tests.malicious_zip import poison
from tests.small_policy import committed


def reference_canonical(value):
    """The identity's canonical JSON of an unpickled setting, as the suite computed it before."""
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    if isinstance(value, dict):
        return {str(k): reference_canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [reference_canonical(v) for v in value]
    if isinstance(value, gym.spaces.Space):
        out = {"space": reference_canonical(type(value)), "dtype": str(value.dtype)}
        out["shape"] = list(value.shape) if value.shape is not None else None
        for attr in ("n", "start", "low", "high", "nvec"):
            if hasattr(value, attr):
                array = np.asarray(getattr(value, attr))
                out[attr] = hashlib.sha256(array.tobytes()).hexdigest()[:16]
        if hasattr(value, "spaces"):
            spaces = value.spaces
            out["spaces"] = reference_canonical(
                dict(spaces) if isinstance(spaces, dict) else list(spaces)
            )
        return out
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if callable(value):
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', repr(value))}"
    return repr(value)


def reference_settings(path):
    from stable_baselines3.common.save_util import json_to_data

    with zipfile.ZipFile(path) as zf:
        data = json_to_data(zf.read("data").decode())
    return {k: reference_canonical(data.get(k)) for k in SETTINGS_KEYS}


class Spaces(gym.Env):
    """An env that only has spaces (the zips are made, never trained)."""

    def __init__(self, obs, act):
        self.observation_space, self.action_space = obs, act

    def reset(self, *, seed=None, options=None):
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, True, False, {}


BOX = gym.spaces.Box(0.0, 1.0, (147,), np.float32)
KINDS = {
    "suite_dropout_mlp": lambda: PPO(
        DropoutActorCriticPolicy,
        Spaces(BOX, gym.spaces.Discrete(4)),
        policy_kwargs={"net_arch": [16, 16], "dropout": 0.2},
    ),
    "sb3_mlp_tanh_multidiscrete": lambda: PPO(
        "MlpPolicy",
        Spaces(gym.spaces.Box(-np.inf, np.inf, (5,), np.float64), gym.spaces.MultiDiscrete([3, 2])),
        policy_kwargs={"activation_fn": torch.nn.Tanh, "net_arch": {"pi": [8], "vf": [8]}},
    ),
    "sb3_dict_image_multibinary": lambda: PPO(  # an image of 3,888 values: numpy's str elides it
        "MultiInputPolicy",
        Spaces(
            gym.spaces.Dict(
                {
                    "image": gym.spaces.Box(0, 255, (36, 36, 3), np.uint8),
                    "vec": gym.spaces.Box(-1.0, np.arange(4, dtype=np.float32) + 1, (4,)),
                }
            ),
            gym.spaces.MultiBinary(3),
        ),
    ),
    "recurrent_lstm": lambda: RecurrentPPO(
        "MlpLstmPolicy",
        Spaces(BOX, gym.spaces.Discrete(7, start=1)),
        policy_kwargs={"lstm_hidden_size": 8, "net_arch": [8]},
    ),
}


@pytest.fixture(scope="module")
def zips(tmp_path_factory):
    out = tmp_path_factory.mktemp("zips")
    made = {}
    for name, make in KINDS.items():
        torch.manual_seed(0)
        make().save(out / f"{name}.zip")
        made[name] = out / f"{name}.zip"
    for p in sorted(committed().glob("*.zip")):  # the suite's committed checkpoints, as trained
        made[f"committed_{p.stem}"] = p
    return made


def test_settings_read_without_unpickling_equal_the_unpickled_ones(zips):
    for name, path in zips.items():
        data = sb3zip.read_data(path)
        assert sb3zip.settings(data, SETTINGS_KEYS) == reference_settings(path), name


def test_the_policy_digest_of_the_committed_checkpoint_is_unchanged():
    """The digest the suite's cells name this policy by (its golden cells' policy_weights)."""
    assert policy_digest(committed() / "best.zip") == (
        "2da75f4257ab18d1c34a6e2705b47d6f908763cf0030d682818401100f728681"
    )


def test_zips_of_the_suite_sb3_and_sb3_contrib_load(zips):
    for name, path in zips.items():
        assert sb3zip.unsafe_entries(sb3zip.read_data(path), skip=("lr_schedule",)) == {}, name
    assert load(zips["suite_dropout_mlp"]).policy is not None


def test_a_payload_is_identified_refused_and_never_run(zips, tmp_path):
    marker = tmp_path / "marker"
    bad = poison(zips["suite_dropout_mlp"], tmp_path / "bad.zip", marker)
    digest = policy_digest(bad)  # identified: the payload enters as its pickle's SHA-256
    assert digest != policy_digest(zips["suite_dropout_mlp"])
    settings = sb3zip.settings(sb3zip.read_data(bad), SETTINGS_KEYS)
    assert settings["policy_class"].startswith("opaque:pickle-sha256:")
    with pytest.raises(
        CheckpointError, match=r"\(policy_class: calls io.open\);.*trust_pickle=true"
    ):
        load(bad)
    assert not marker.exists()
    check_pickles(bad, trust_pickle=True)  # trusted: allowed through (with a warning)
    reference_settings(bad)  # the old reader runs it: the payload is live
    assert marker.exists()


def test_a_space_whose_state_sets_a_method_to_a_function_is_unsafe():
    """A gymnasium space is a constructor plus a state; a state that sets `contains` to a global
    function would have the suite call that function with an observation."""
    space = sb3zip.Call(sb3zip.Ref("gymnasium.spaces.discrete", "Discrete"), ("__new__",))
    space.state = {"n": 4, "contains": sb3zip.Ref("benchmark.store", "replace_dir")}
    assert sb3zip.problems(space) == ["sets contains to benchmark.store.replace_dir"]
    space.state = {"n": 4}
    assert sb3zip.problems(space) == []


@pytest.mark.parametrize(
    "blob",
    [b"", b"\x80\x05K", b"\x80\x05\x93.", b"\x80\x05K\x01K\x02.", b"garbage"],
)
def test_malformed_pickles_are_unreadable_not_errors(blob):
    with pytest.raises(sb3zip.Unreadable):
        sb3zip.read_pickle(blob)


# ----------------------------------------------------------------------------- end to end
CELL = [
    "env=empty5x5_random",
    "method=ask",
    "slm=oracle",
    "gate.tau=0.3",
    "gate.mc_samples=4",
    "eval.n_episodes=2",
    "eval.step_records=true",
    "quiet=true",
]


@pytest.mark.slow
def test_a_payload_in_a_bundle_or_a_cell_never_runs(tmp_path):
    """A checkpoint directory whose zips carry a `__reduce__` payload is refused by export, with a
    message; a bundle of the zip format holding them (re-signed, as whoever hands it over could)
    is planned and identified (python -m benchmark.plan), and refused when used (python -m
    benchmark); a sweep whose cell.json names a callable as env.task._target_ is reported
    (python -m benchmark.report) with the env from conf/env. No payload runs."""
    from benchmark.job import run_job
    from benchmark.policy.bundle import export
    from tests.conftest import SMALL_POLICY, compose_cfg, run_cli
    from tests.malicious_zip import poison_dir
    from tests.zip_bundle import zip_bundle

    marker, marker2 = tmp_path / "pwned-zip", tmp_path / "pwned-target"
    bad_dir = poison_dir(committed(), tmp_path / "ckpt" / committed().name, marker)
    with pytest.raises(CheckpointError, match="policy_class is call of io.open, not one of"):
        export([bad_dir], tmp_path / "refused", title="bad")
    bad = zip_bundle(bad_dir, tmp_path / "bad-bundle")
    good = export([committed()], tmp_path / "good-bundle", title="good")
    over = [*CELL, *SMALL_POLICY]

    plan = run_cli(
        tmp_path / "root", *over, f"policy.path={bad}", "--json", module="benchmark.plan"
    )
    cells = json.loads(plan.stdout)["cells"]
    assert len(cells) == 1 and cells[0]["hash"], plan.stdout[-2000:]  # identified, not run
    assert not marker.exists()

    used = run_cli(tmp_path / "root", *over, f"policy.path={bad}", check=False)
    out = used.stdout + used.stderr
    assert "refused to load" in out and "policy.trust_pickle=true" in out, out[-3000:]
    assert not marker.exists()

    sweep = tmp_path / "sweep"
    run_job(compose_cfg(tmp_path / "root", *over, f"policy.path={good}"), sweep / "0", False)
    record = json.loads((sweep / "0" / "cell.json").read_text())
    record["config"]["env"]["task"] = {
        "_target_": "builtins.open",
        "file": str(marker2),
        "mode": "w",
    }
    (sweep / "0" / "cell.json").write_text(json.dumps(record))
    report = run_cli(tmp_path / "root", str(sweep), module="benchmark.report")
    assert "not a Task class of conf/env" in report.stdout + report.stderr
    assert (sweep / "report" / "where_empty5x5_random.png").is_file()  # walls from conf/env
    assert not marker.exists() and not marker2.exists()
