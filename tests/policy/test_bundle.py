"""Policy bundles: export trained policies to a self-describing directory in the Hugging Face hub's
layout (weights as safetensors, settings as policy.json), use them back with policy.path=<dir> or
policy.source=<repo id> (from a local HF cache only: no network), and get byte-identical
evaluation files."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from benchmark import results
from benchmark.build import policy_checkpoint, prepare
from benchmark.job import run_job
from benchmark.policy.bundle import ExportOnMultirunEnd, export, fetch, select_policy
from benchmark.policy.checkpoints import (
    CheckpointError,
    checkpoint_dir,
    config_hash,
    load,
    policy_digest,
)
from benchmark.results import file_sha256
from tests.conftest import SMALL_POLICY, compose_cfg, run_cli

ENV = "env=empty5x5_random"
PPO_ONLY = [ENV, "gate=never", "eval.n_episodes=20"]


def _orig_cfg(trained_root: Path, root: Path, *extra: str):
    """A PPO-only cell of the session's trained policy, its cells in `root` (the shared root
    keeps its cell list), its checkpoint from the shared cache."""
    return compose_cfg(
        root, *PPO_ONLY, *SMALL_POLICY, f"paths.checkpoints={trained_root}/checkpoints", *extra
    )


def _cell_files(summary: dict, root: Path) -> Path:
    return Path(root) / "cells" / summary["cell_hash"]


@pytest.fixture(scope="module")
def bundle(trained_root, tmp_path_factory):
    """The session's policy evaluated PPO-only (best and final) in its own root, then exported
    with those cells as its test metrics."""
    base = tmp_path_factory.mktemp("export")
    orig = base / "orig"
    summaries = {}
    for ckpt in ("best", "final"):
        cfg = _orig_cfg(trained_root, orig, f"policy.checkpoint={ckpt}")
        summaries[ckpt] = run_job(cfg, base / f"job-{ckpt}", multirun=False)
    cfg = _orig_cfg(trained_root, orig)
    source = checkpoint_dir(cfg, prepare(cfg)[1])
    out = export([source], base / "bundle", root=orig, title="test policies")
    return {"out": out, "source": source, "orig": orig, "summaries": summaries, "cfg": cfg}


def test_round_trip_gives_byte_identical_episodes(bundle, tmp_path):
    """train -> export -> policy.path=<bundle> in a fresh root: another file (safetensors, not the
    zip) of the same policy identity, so the same cell hash, byte-identical episodes.jsonl, and
    nothing trained there."""
    out, orig = bundle["out"], bundle["orig"]
    for ckpt, first in bundle["summaries"].items():
        fresh = tmp_path / f"fresh-{ckpt}"
        cfg = compose_cfg(
            fresh, *PPO_ONLY, *SMALL_POLICY, f"policy.path={out}", f"policy.checkpoint={ckpt}"
        )
        again = run_job(cfg, tmp_path / f"job-{ckpt}", multirun=False)
        assert again["checkpoint_sha256"] != first["checkpoint_sha256"]  # another file
        assert again["policy_weights"] == first["policy_weights"]  # the same policy
        assert again["cell_hash"] == first["cell_hash"]  # paths never enter the identity
        assert Path(again["checkpoint_path"]).is_relative_to(out)
        a = (_cell_files(first, orig) / "episodes.jsonl").read_bytes()
        b = (_cell_files(again, fresh) / "episodes.jsonl").read_bytes()
        assert a == b and len(a.splitlines()) == 20
        assert not (fresh / "checkpoints").exists()  # used, never trained
    # one policy directory of the bundle works as policy.path too, and tK names a threshold
    policy_dir = next(p for p in out.iterdir() if p.is_dir())
    saved = {p.stem for p in policy_dir.glob("r*.safetensors")}
    for k, threshold in enumerate([0.3, 0.5, 0.7, 0.9], start=1):
        name = f"r{int(threshold * 100):03d}"
        if name not in saved:
            continue
        cfg = compose_cfg(
            tmp_path / "one", *PPO_ONLY, f"policy.path={policy_dir}", f"policy.checkpoint=t{k}"
        )
        task, splits, _ = prepare(cfg)
        found = policy_checkpoint(cfg, task, splits, train=False)
        assert found == policy_dir / f"{name}.safetensors"


def test_bundle_layout_model_card_and_metadata(bundle):
    from huggingface_hub import ModelCard

    out, source, cfg = bundle["out"], bundle["source"], bundle["cfg"]
    index = json.loads((out / "bundle.json").read_text())
    (entry,) = index["policies"]
    name = f"empty5x5_random-s0-{config_hash(cfg)}"
    assert entry["name"] == name and source.name.endswith(entry["config_hash"])
    policy = out / name
    names = sorted(p.stem for p in source.glob("*.zip"))
    assert sorted(p.stem for p in policy.glob("*.safetensors")) == names and "best" in names
    assert not list(policy.glob("*.zip"))  # no pickle in a bundle
    manifest = json.loads((policy / "COMPLETE").read_text())
    assert manifest["weights"] == "safetensors"
    assert manifest["checkpoints"] == {n: file_sha256(policy / f"{n}.safetensors") for n in names}
    for n in names:  # each names the policy as the zip did: the cells' policy identity
        want = policy_digest(source / f"{n}.zip")
        assert entry["checkpoints"][n]["policy_weights"] == want
        assert policy_digest(policy / f"{n}.safetensors") == want
    # what rebuilds the policy: the suite's class by name, kwargs, spaces as plain fields, recipe
    settings = json.loads((policy / "policy.json").read_text())
    assert settings["policy_class"] == "benchmark.policy.network.DropoutActorCriticPolicy"
    assert settings["policy_kwargs"] == {"net_arch": [128, 128], "dropout": 0.2}
    assert settings["observation_space"] == {
        "space": "Box",
        "dtype": "float32",
        "shape": [147],
        "low": 0.0,
        "high": 1.0,
    }
    assert settings["action_space"] == {"space": "Discrete", "dtype": "int64", "n": 4, "start": 0}
    assert settings["recipe"] == {
        "name": "suite",
        "config_hash": config_hash(cfg),
        "training_version": 1,
    }
    # the resolved training config and its hash
    config = json.loads((policy / "config.json").read_text())
    assert config["config_hash"] == config_hash(cfg)
    assert config["policy"]["total_timesteps"] == 20000 and config["training_version"] == 1
    assert config["validation"] == [0, 100] and config["env"]["name"] == "empty5x5_random"
    assert (policy / "curve.csv").read_text() == (source / "curve.csv").read_text()
    # machine and versions it was trained with
    system = json.loads((policy / "system.json").read_text())
    assert system["packages"]["stable-baselines3"] and system["training_code"]
    assert "hostname" not in system
    # test metrics with CIs from the PPO-only cells, huggingface_sb3's fields for the headline
    res = json.loads((policy / "results.json").read_text())
    best = bundle["summaries"]["best"]
    assert res["env_id"] == "MiniGrid-Empty-Random-5x5-v0" and res["checkpoint"] == "best"
    assert res["mean_reward"] == best["reward_mean"] and res["n_evaluation_episodes"] == 20
    assert set(res["evaluations"]) == {"best", "final"}
    row = res["evaluations"]["best"][0]
    assert row["success_ci95_low"] == best["success_ci95_low"] and row["split"] == "test"
    # the model card: hub metadata (library, tags, model-index) and the table
    card = ModelCard.load(out / "README.md")
    assert card.data.library_name == "stable-baselines3"
    assert "MiniGrid-Empty-Random-5x5-v0" in card.data.tags
    results_ = card.data.eval_results
    assert results_ and results_[0].metric_value == round(best["reward_mean"], 3)
    assert results_[0].dataset_type == "MiniGrid-Empty-Random-5x5-v0"
    assert f"`{name}` (best)" in card.text and "policy.path=" in card.text


def test_export_extends_a_bundle_and_refuses_an_incomplete_dir(bundle, tmp_path):
    out = tmp_path / "b"
    shutil.copytree(bundle["out"], out)
    broken = tmp_path / "checkpoints" / "empty5x5_random-0123456789"
    broken.mkdir(parents=True)
    (broken / "final.zip").write_bytes(b"half")
    with pytest.raises(CheckpointError, match="not a complete checkpoint directory"):
        export([broken], out)
    again = export([bundle["source"]], out)  # re-exporting replaces the entry, keeps one
    assert len(json.loads((again / "bundle.json").read_text())["policies"]) == 1


def test_a_bundle_policy_exports_again_as_it_is(bundle, tmp_path):
    """A sweep that used a bundle names the bundle's policy directory (`--sweep`, the policies
    preset's callback): exporting it copies its weights and settings, same identity."""
    out = bundle["out"]
    (policy,) = [p for p in out.iterdir() if p.is_dir()]
    again = export([policy], tmp_path / "again")
    (entry,) = json.loads((again / "bundle.json").read_text())["policies"]
    (first,) = json.loads((out / "bundle.json").read_text())["policies"]
    assert entry["name"] == policy.name and entry["checkpoints"] == first["checkpoints"]
    for f in ("best.safetensors", "policy.json", "config.json"):
        assert (again / policy.name / f).read_bytes() == (policy / f).read_bytes(), f


def test_bundle_selection_and_clear_errors(bundle, tmp_path, caplog):
    out = bundle["out"]
    (name,) = [p.name for p in out.iterdir() if p.is_dir()]
    # the exact recipe, or else env + seed (with a warning)
    cfg = compose_cfg(tmp_path, *PPO_ONLY, *SMALL_POLICY, f"policy.path={out}")
    assert select_policy(out, cfg) == out / name
    plain = compose_cfg(tmp_path, *PPO_ONLY, f"policy.path={out}")
    with caplog.at_level(logging.WARNING, logger="benchmark.policy.bundle"):
        assert select_policy(out, plain) == out / name
    assert "no policy with this config's recipe" in caplog.text
    with pytest.raises(CheckpointError, match=rf"no policies for env=doorkey8.*available {name}"):
        select_policy(out, compose_cfg(tmp_path, "env=doorkey8", f"policy.path={out}"))
    with pytest.raises(CheckpointError, match="available"):
        select_policy(out, compose_cfg(tmp_path, ENV, "policy.seed=3", f"policy.path={out}"))
    cfg = compose_cfg(tmp_path, *PPO_ONLY, f"policy.path={out}", "policy.checkpoint=r099")
    task, splits, _ = prepare(cfg)
    with pytest.raises(CheckpointError, match="policy.checkpoint=r099 does not exist.*available"):
        policy_checkpoint(cfg, task, splits)
    (tmp_path / "empty").mkdir()
    cfg = compose_cfg(tmp_path, *PPO_ONLY, f"policy.path={tmp_path / 'empty'}")
    with pytest.raises(CheckpointError, match="neither an exported policy"):
        policy_checkpoint(cfg, task, splits)


def _load_best(out: Path, tmp_path: Path) -> Path:
    cfg = compose_cfg(tmp_path, *PPO_ONLY, *SMALL_POLICY, f"policy.path={out}")
    task, splits, _ = prepare(cfg)
    return policy_checkpoint(cfg, task, splits, train=False)


def test_manifests_cover_every_file_of_a_bundle(bundle, tmp_path):
    """Each policy's COMPLETE lists every file of its directory, and the bundle's
    COMPLETE lists bundle.json, the model card and each policy's COMPLETE; an edited file of
    either fails the load, naming it (before, an edited results.json passed)."""
    out = tmp_path / "b"
    shutil.copytree(bundle["out"], out)
    (policy,) = [p for p in out.iterdir() if p.is_dir()]
    listed = json.loads((policy / "COMPLETE").read_text())
    files = {
        p.name for p in policy.iterdir() if p.suffix != ".safetensors" and p.name != "COMPLETE"
    }
    assert {"results.json", "config.json", "system.json", "curve.csv", "policy.json"} <= files
    assert set(listed["files"]) == files
    top = json.loads((out / "COMPLETE").read_text())
    assert set(top["files"]) == {"bundle.json", "README.md", f"{policy.name}/COMPLETE"}
    assert _load_best(out, tmp_path) == policy / "best.safetensors"
    for edited in (
        policy / "results.json",
        policy / "policy.json",
        out / "bundle.json",
        out / "README.md",
    ):
        copy = tmp_path / f"edit-{edited.name}"
        shutil.copytree(out, copy)
        target = copy / edited.relative_to(out)
        target.write_text(target.read_text().replace("0", "1", 1))
        with pytest.raises(CheckpointError, match="does not match the SHA-256") as err:
            _load_best(copy, tmp_path)
        assert str(target) in str(err.value)


@pytest.mark.parametrize("name", ["bundle.json", "COMPLETE", "policy/COMPLETE"])
def test_a_corrupt_manifest_or_index_says_corrupt(bundle, tmp_path, name):
    """Before, a corrupt bundle.json was reported as missing ("neither ... nor a bundle")."""
    out = tmp_path / "b"
    shutil.copytree(bundle["out"], out)
    (policy,) = [p for p in out.iterdir() if p.is_dir()]
    target = out / name.replace("policy", policy.name)
    target.write_text(target.read_text()[:30])  # truncated
    with pytest.raises(CheckpointError, match="is corrupt") as err:
        _load_best(out, tmp_path)
    assert str(target) in str(err.value)
    if name == "bundle.json":  # extending such a bundle would drop its other policies
        with pytest.raises(CheckpointError, match="is corrupt"):
            export([bundle["source"]], out)


@pytest.mark.parametrize("damage", ["one byte", "truncated"])
def test_tampered_weights_in_a_bundle_say_to_export_or_download_it_again(
    bundle, tmp_path, monkeypatch, damage
):
    """A .safetensors changed after export (one tensor byte flipped: still a valid file that
    would load; or truncated) is caught by the policy's COMPLETE digest. A bundle is exported or
    downloaded, never trained here: "delete ... to retrain" would be wrong."""
    from huggingface_hub import constants

    out = tmp_path / "b"
    shutil.copytree(bundle["out"], out)
    (policy,) = [p for p in out.iterdir() if p.is_dir()]
    weights = policy / "best.safetensors"
    blob = bytearray(weights.read_bytes())
    if damage == "one byte":
        blob[-1] ^= 0x01  # the last byte of the last tensor
    else:
        del blob[100:]
    weights.write_bytes(bytes(blob))
    if damage == "one byte":
        load(weights)  # the file alone still loads: only the digest tells
    with pytest.raises(CheckpointError, match="does not match the sha256") as err:
        _load_best(out, tmp_path)
    assert str(weights) in str(err.value)
    assert f"the bundle {out} is damaged: export it again" in str(err.value)
    assert "retrain" not in str(err.value)
    cache, commit, repo = tmp_path / "hf", "a" * 40, "someone/ask-policies"
    _hf_cache(out, cache, repo, commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    cfg = compose_cfg(
        tmp_path, *PPO_ONLY, *SMALL_POLICY, f"policy.source={repo}", f"policy.revision={commit}"
    )
    with pytest.raises(CheckpointError, match="download it again") as err:
        policy_checkpoint(cfg, *prepare(cfg)[:2], train=False)
    assert f"hf download {repo} --revision {commit} --force-download" in str(err.value)
    assert "retrain" not in str(err.value)


def test_a_bundle_whose_settings_name_another_class_is_refused_naming_it(bundle, tmp_path):
    """policy.json edited to name a class outside the suite's, and every manifest re-signed (as
    whoever hands a bundle over could): refused when its weights are checked against the
    policy it declares (benchmark.weights), before loading, and when the file is loaded."""
    from benchmark.policy.bundle import INDEX, MARKER

    out = tmp_path / "b"
    shutil.copytree(bundle["out"], out)
    (policy,) = [p for p in out.iterdir() if p.is_dir()]
    settings = json.loads((policy / "policy.json").read_text())
    settings["policy_class"] = "os.system"
    (policy / "policy.json").write_text(json.dumps(settings))
    for manifest, signed in ((policy / MARKER, ["policy.json"]), (out / MARKER, [INDEX])):
        data = json.loads(manifest.read_text())
        data["files"].update({f: file_sha256(manifest.parent / f) for f in signed})
        if manifest.parent == out:
            data["files"][f"{policy.name}/{MARKER}"] = file_sha256(policy / MARKER)
        manifest.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="names the policy class 'os.system'"):
        _load_best(out, tmp_path)
    with pytest.raises(CheckpointError, match="names the policy class 'os.system'"):
        load(policy / "best.safetensors")


@pytest.mark.parametrize("fmt", ["ask-benchmark-policies/1", "ask-benchmark-policies/2"])
def test_a_zip_bundle_of_an_earlier_format_still_loads_under_the_zip_rules(tmp_path, fmt):
    """Bundles exported before safetensors carry SB3 zips: they still load, their zips verified
    against the manifest; one whose zips hold a pickle payload is refused with a message, and
    loads only with policy.trust_pickle=true."""
    from tests.malicious_zip import poison_dir
    from tests.small_policy import committed
    from tests.zip_bundle import zip_bundle

    out = zip_bundle(committed(), tmp_path / "old", fmt)
    (policy,) = [p for p in out.iterdir() if p.is_dir()]
    path = _load_best(out, tmp_path)
    assert path == policy / "best.zip"
    assert policy_digest(path) == policy_digest(committed() / "best.zip")
    load(path)
    marker = tmp_path / "pwned"
    bad_dir = poison_dir(committed(), tmp_path / "ckpt" / committed().name, marker)
    bad = zip_bundle(bad_dir, tmp_path / "bad", fmt)
    path = _load_best(bad, tmp_path)  # found and verified: the manifests were re-signed
    with pytest.raises(CheckpointError, match="refused to load.*policy.trust_pickle=true"):
        load(path)
    assert not marker.exists()
    with pytest.raises(CheckpointError, match="cannot load"):  # its policy_class is gone
        load(path, trust_pickle=True)  # the user's explicit choice: SB3 unpickles, it runs
    assert marker.exists()
    (policy / "best.zip").write_bytes(b"edited")
    with pytest.raises(CheckpointError, match="sha256"):
        _load_best(out, tmp_path)


def _hf_cache(bundle_dir: Path, cache: Path, repo: str, commit: str) -> None:
    """What `hf download <repo>` leaves in the HF cache (files instead of blob symlinks)."""
    storage = cache / f"models--{repo.replace('/', '--')}"
    shutil.copytree(bundle_dir, storage / "snapshots" / commit)
    (storage / "refs").mkdir(parents=True)
    (storage / "refs" / "main").write_text(commit)


def test_policy_source_reads_the_hf_cache_offline(bundle, tmp_path, monkeypatch):
    from huggingface_hub import constants

    cache, commit, repo = tmp_path / "hf", "a" * 40, "someone/ask-policies"
    _hf_cache(bundle["out"], cache, repo, commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    best = bundle["summaries"]["best"]["policy_weights"]
    for revision in (commit, None):  # pinned by commit; or the cache's refs/main
        rev = [f"policy.revision={revision}"] if revision else []
        cfg = compose_cfg(tmp_path, *PPO_ONLY, *SMALL_POLICY, f"policy.source={repo}", *rev)
        task, splits, _ = prepare(cfg)
        path = policy_checkpoint(cfg, task, splits, train=False)
        assert path.is_relative_to(cache / f"models--someone--ask-policies/snapshots/{commit}")
        assert policy_digest(path) == best
    assert fetch(repo, commit) == cache / "models--someone--ask-policies" / "snapshots" / commit
    with pytest.raises(CheckpointError, match="not in the Hugging Face cache.*hf download other/x"):
        fetch("other/x", "b" * 40)
    # an SLM-only cell of a sweep that names a bundle never opens it
    cfg = compose_cfg(tmp_path, ENV, "gate=always", "prompt=basic", "policy.source=nobody/none")
    task, splits, _ = prepare(cfg)
    assert policy_checkpoint(cfg, task, splits, train=False) is None
    # a job from the hub repo: the same cell as the original checkpoint's
    cfg = compose_cfg(
        tmp_path / "fresh",
        *PPO_ONLY,
        *SMALL_POLICY,
        f"policy.source={repo}",
        f"policy.revision={commit}",
    )
    summary = run_job(cfg, tmp_path / "job", multirun=False)
    assert summary["cell_hash"] == bundle["summaries"]["best"]["cell_hash"]


def test_source_revision_and_path_never_enter_the_checkpoint_hash(tmp_path):
    """The conf keys added for bundles leave every cached checkpoint where it is (pinned hashes
    of the default recipes, computed before policy.source and policy.revision existed)."""
    pinned = {
        ("env=doorkey8",): "c9c342e6a4",
        ("env=empty5x5_random", "policy=ppo_cnn"): "6e41b62738",
        ("env=higherlower", "policy.seed=2"): "5ad67480e0",
    }
    for overrides, want in pinned.items():
        overrides = ("protocol=suite", *overrides)  # the recipes of those hashes: the suite's
        assert config_hash(compose_cfg(tmp_path, *overrides)) == want
        moved = [*overrides, "policy.source=a/b", "policy.revision=main", "policy.path=/x"]
        assert config_hash(compose_cfg(tmp_path, *moved)) == want


def test_cli_export_by_overrides_and_presets(bundle, trained_root, tmp_path, capsys):
    from benchmark.policy.__main__ import combinations, main

    root = f"paths.root={trained_root}"
    out = tmp_path / "cli"
    rc = main(["export", root, ENV, *SMALL_POLICY, "policy.seed=0,1", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1  # seed 1 is not trained: said, and the rest exported
    assert "policy.seed=1: not trained" in err and "python -m benchmark train_only=true" in err
    index = json.loads((out / "bundle.json").read_text())
    assert [p["seed"] for p in index["policies"]] == [0]
    assert (out / index["policies"][0]["name"] / "best.safetensors").is_file()
    # a preset's sweep is expanded (benchmark.config.sweep_jobs, Hydra's job order):
    # +experiment=policies is its 3 envs x 3 seeds; the command line wins over the preset's sweep
    combos = combinations(["+experiment=policies", f"paths.root={tmp_path}"])
    assert len(combos) == 9 and {
        "+experiment=policies",
        f"paths.root={tmp_path}",
        "env=doorkey8",
        "policy.seed=1",
    } in [set(c) for c in combos]
    pinned = combinations(["+experiment=policies", "env=doorkey8"])
    assert len(pinned) == 3 and all("env=doorkey8" in c for c in pinned)


def test_multirun_end_bundles_the_sweeps_policies(bundle, tmp_path, caplog):
    """The policies preset's Hydra callback, on a sweep whose job 0 evaluated the policy and job 1
    failed: the bundle has job 0's policy, with that job's checkpoint as headline."""
    sweep = tmp_path / "sweeps" / "policies" / "t"
    (sweep / "0").mkdir(parents=True)
    (sweep / "1").mkdir()
    summary = dict(bundle["summaries"]["final"])
    results.write_json(sweep / "0" / "summary.json", summary)
    results.write_json(sweep / "1" / "error.json", {"message": "boom"})
    config = OmegaConf.create(
        {
            "hydra": {"sweep": {"dir": str(sweep)}},
            "paths": {"root": str(bundle["orig"])},
            "experiment_name": "policies",
        }
    )
    with caplog.at_level(logging.INFO, logger="benchmark.policy.bundle"):
        ExportOnMultirunEnd().on_multirun_end(config)
    index = json.loads((sweep / "bundle" / "bundle.json").read_text())
    (entry,) = index["policies"]
    assert entry["headline"] == "final" and "final" in entry["test"]
    assert "job 1: no policy (boom)" in caplog.text
    # a failure is logged, never raised: the sweep's results stand
    config.hydra.sweep.dir = str(tmp_path / "missing")
    ExportOnMultirunEnd().on_multirun_end(config)
    assert "policy bundle not written" in caplog.text


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_policies_preset_ends_with_a_bundle(trained_root, tmp_path):
    """The real preset as a (one-job) multirun: the sweep dir gets its bundle."""
    proc = run_cli(
        tmp_path,
        "+experiment=policies",
        ENV,
        "policy.seed=0",
        *SMALL_POLICY,
        "eval.n_episodes=5",
        f"paths.checkpoints={trained_root}/checkpoints",
        "tracking=none",
        "-m",
    )
    (bundle_json,) = list((tmp_path / "sweeps" / "policies").glob("*/bundle/bundle.json"))
    index = json.loads(bundle_json.read_text())
    assert [p["env"] for p in index["policies"]] == ["empty5x5_random"], proc.stderr[-2000:]
    assert index["policies"][0]["test"]["best"]["n_episodes"] == 5


@pytest.mark.parametrize("name", ["../other", "a/b", "..", "/abs", ""])
def test_a_policy_name_that_is_not_one_folder_name_is_refused(tmp_path, name):
    """A bundle index (re-signed, as whoever hands it over could) naming `../other` would point
    outside the bundle, and a later export would sign what is there."""
    from benchmark.policy.bundle import INDEX, MARKER
    from tests.small_policy import committed

    out = export([committed()], tmp_path / "bundle", title="t")
    index = json.loads((out / INDEX).read_text())
    index["policies"][0]["name"] = name
    (out / INDEX).write_text(json.dumps(index))
    signed = json.loads((out / MARKER).read_text())
    signed["files"][INDEX] = file_sha256(out / INDEX)
    (out / MARKER).write_text(json.dumps(signed))
    cfg = compose_cfg(tmp_path, *PPO_ONLY, *SMALL_POLICY, f"policy.path={out}")
    with pytest.raises(CheckpointError, match="must be one folder name inside the bundle"):
        select_policy(out, cfg)
    with pytest.raises(CheckpointError, match="must be one folder name inside the bundle"):
        export([committed()], out)  # extending it re-signs nothing outside
