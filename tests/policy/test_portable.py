"""benchmark.policy.portable: a policy as safetensors + policy.json, rebuilt from the suite's own
classes. The rebuilt policy must act as the SB3 zip it came from (the same action probabilities,
the same MC-dropout samples) and carry the zip's policy identity; a policy.json naming anything
outside the allow-lists is refused, naming it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from sb3_contrib import RecurrentPPO
from stable_baselines3 import PPO

from benchmark.policy import network, portable, sb3zip
from benchmark.policy.checkpoints import CheckpointError, load, policy_digest
from tests.policy.test_sb3zip import BOX, KINDS, Spaces
from tests.small_policy import committed

ATOL = 1e-6  # the same tensors through the same layers: equal up to kernel choice


def convert(zip_path: Path, out: Path) -> Path:
    """`out/<name>.safetensors` and `out/policy.json` for an SB3 zip (what export writes)."""
    out.mkdir(parents=True, exist_ok=True)
    weights = out / f"{zip_path.stem}{portable.SUFFIX}"
    settings = portable.write(zip_path, weights)
    (out / portable.SETTINGS).write_text(json.dumps(settings))
    return weights


def action_logits(policy, obs: np.ndarray, mc_seed: int | None = None) -> torch.Tensor:
    """The actor's logits for a batch, through the suite's own path (network.actor_input, the
    MLP head): dropout off, or on with torch seeded (`mc_seed`: one MC-dropout sample)."""
    policy.set_training_mode(mc_seed is not None)
    if mc_seed is not None:
        torch.manual_seed(mc_seed)
    with torch.no_grad():
        features, _ = network.actor_input(policy, obs)
        head = network.logits_head(policy, obs)
        return head(policy.mlp_extractor.forward_actor(features))


def assert_same_policy(a, b, obs: np.ndarray) -> None:
    for seed in (None, 0, 1):
        la, lb = action_logits(a, obs, seed), action_logits(b, obs, seed)
        assert torch.allclose(la, lb, atol=ATOL), (seed, (la - lb).abs().max())
        pa, pb = torch.softmax(la, -1), torch.softmax(lb, -1)
        assert torch.allclose(pa, pb, atol=ATOL)
    assert not torch.allclose(action_logits(a, obs, 0), action_logits(a, obs, None))  # MC on


def observations(n: int = 16) -> np.ndarray:
    return np.random.default_rng(0).random((n, 147)).astype(np.float32)


@pytest.mark.parametrize("ckpt", ["best", "final"])
def test_the_committed_policy_round_trips(ckpt, tmp_path):
    """zip -> safetensors + policy.json -> load: identical probabilities and MC-dropout samples,
    and the zip's policy identity (the one the suite's golden cells name this policy by)."""
    zip_path = committed() / f"{ckpt}.zip"
    weights = convert(zip_path, tmp_path)
    original, rebuilt = load(zip_path), load(weights)
    assert type(rebuilt) is PPO
    assert type(rebuilt.policy) is network.DropoutActorCriticPolicy
    assert rebuilt.observation_space == original.observation_space
    assert rebuilt.action_space == original.action_space
    assert_same_policy(original.policy, rebuilt.policy, observations())
    assert policy_digest(weights) == policy_digest(zip_path)
    if ckpt == "best":
        assert policy_digest(weights) == (
            "2da75f4257ab18d1c34a6e2705b47d6f908763cf0030d682818401100f728681"
        )


SUITE_KINDS = {  # the suite's other policy classes and class-valued kwargs
    "minigrid_cnn": (PPO, network.DropoutActorCriticPolicy, {"extractor": "minigrid_cnn"}),
    "image_scale": (PPO, network.DropoutActorCriticPolicy, {"image_scale": 10.0}),
    "masked": (PPO, network.MaskedDropoutPolicy, {}),
    "commands": (PPO, network.CommandScoringPolicy, {}),
    "recurrent": (
        RecurrentPPO,
        network.RecurrentDropoutPolicy,
        {"algorithm": "recurrent_ppo", "lstm_hidden_size": 8},
    ),
}
# what build_model adds from the task (the command-scoring head: its commands' features)
TASK_KWARGS = {"commands": {"command_dim": 8, "embed_dim": 16}}


@pytest.mark.parametrize("kind", SUITE_KINDS)
def test_every_suite_policy_kind_round_trips(kind, tmp_path):
    import gymnasium as gym

    algo, policy_class, extra = SUITE_KINDS[kind]
    kwargs = network.policy_kwargs({"net_arch": [16, 16], "dropout": 0.2, **extra})
    kwargs.update(TASK_KWARGS.get(kind, {}))
    torch.manual_seed(0)
    made = algo(policy_class, Spaces(BOX, gym.spaces.Discrete(4)), policy_kwargs=kwargs)
    made.save(tmp_path / "final.zip")
    weights = convert(tmp_path / "final.zip", tmp_path / "bundle")
    settings = json.loads((tmp_path / "bundle" / portable.SETTINGS).read_text())
    if "features_extractor_class" in kwargs:  # a class travels by name, from the allow-list
        name = settings["policy_kwargs"]["features_extractor_class"]
        assert name in portable.CLASS_KWARGS["features_extractor_class"]
    rebuilt = load(weights)
    assert type(rebuilt) is algo and type(rebuilt.policy) is policy_class
    assert_same_policy(load(tmp_path / "final.zip").policy, rebuilt.policy, observations())
    assert policy_digest(weights) == policy_digest(tmp_path / "final.zip")


def test_spaces_as_plain_fields_rebuild_the_same_spaces(tmp_path):
    """Every space kind SB3 and the suite write (infinite and per-element bounds, a start, a
    Dict of an image and a vector, MultiBinary): its JSON is strict JSON, and the space built
    from it is named as the zip's read space is (so the identity does not move)."""
    for name, make in KINDS.items():
        torch.manual_seed(0)
        make().save(tmp_path / f"{name}.zip")
        data = sb3zip.read_data(tmp_path / f"{name}.zip")
        for key in portable.SPACE_KEYS:
            read = sb3zip.decoded(data[key])
            fields = json.loads(json.dumps(portable.space_json(read, key), allow_nan=False))
            rebuilt = portable.space_of(fields, key)
            assert portable.canonical_space(rebuilt) == sb3zip.Canon()(read), (name, key)


def test_export_refuses_a_zip_that_is_not_the_suites(tmp_path):
    """SB3's own MlpPolicy (not the suite's class) cannot travel as a name the loader knows."""
    torch.manual_seed(0)
    KINDS["sb3_mlp_tanh_multidiscrete"]().save(tmp_path / "sb3.zip")
    with pytest.raises(CheckpointError, match="not one of the suite's policy classes"):
        portable.write(tmp_path / "sb3.zip", tmp_path / "sb3.safetensors")


def _edited(tmp_path: Path, edit) -> Path:
    weights = convert(committed() / "best.zip", tmp_path / "p")
    path = tmp_path / "p" / portable.SETTINGS
    settings = json.loads(path.read_text())
    edit(settings)
    path.write_text(json.dumps(settings))
    return weights


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("policy_class", "stable_baselines3.common.policies.ActorCriticPolicy"),
        ("policy_class", "os.system"),
        ("features_extractor_class", "builtins.eval"),
    ],
)
def test_a_class_outside_the_allow_list_is_refused_naming_it(tmp_path, field, value):
    def edit(settings):
        if field == "policy_class":
            settings["policy_class"] = value
        else:
            settings["policy_kwargs"][field] = value

    weights = _edited(tmp_path, edit)
    with pytest.raises(CheckpointError, match="refused to load") as err:
        load(weights)
    assert repr(value) in str(err.value) and "policy.json" in str(err.value)
    assert "benchmark.policy.network." in str(err.value)  # what is allowed


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ({"space": "Graph"}, "observation_space is 'Graph': allowed spaces Box, Discrete"),
        ({"space": "Box", "dtype": "object", "shape": [2], "low": 0, "high": 1}, "numeric"),
        ({"space": "Box", "dtype": "float32", "shape": [10**9], "low": 0, "high": 1}, "more than"),
        ({"space": "Box", "dtype": "float32", "shape": [3], "low": [0, 1], "high": 1}, "has 2"),
        ({"space": "Box", "dtype": "float32", "shape": [2], "low": "x", "high": 1}, "holds 'x'"),
    ],
)
def test_a_space_the_format_does_not_carry_is_refused_naming_it(tmp_path, space, message):
    weights = _edited(tmp_path, lambda s: s.update(observation_space=space))
    for read in (load, policy_digest):  # used, or only identified (the plan)
        with pytest.raises(CheckpointError, match=message):
            read(weights)


def test_missing_or_corrupt_settings_and_weights_say_which_file(tmp_path):
    weights = convert(committed() / "best.zip", tmp_path / "p")
    settings = tmp_path / "p" / portable.SETTINGS
    shutil.copyfile(settings, tmp_path / "kept.json")
    settings.write_text("{not json")
    with pytest.raises(CheckpointError, match=f"{settings} is corrupt"):
        load(weights)
    settings.unlink()
    with pytest.raises(CheckpointError, match=f"{settings} is missing"):
        policy_digest(weights)
    shutil.copyfile(tmp_path / "kept.json", settings)
    weights.write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match=f"cannot read the weights in {weights}"):
        load(weights)
