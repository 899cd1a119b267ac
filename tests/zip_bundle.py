"""A policy bundle of a format before safetensors (`ask-benchmark-policies/1` or `/2`: the SB3
zips of a checkpoint directory copied byte for byte), written as that export wrote it. Bundles
already shared in those formats must keep loading, under the zip's trust rules; the suite no
longer writes them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from benchmark.policy.bundle import FIRST_FORMAT, INDEX, MARKER
from benchmark.store import file_sha256


def zip_bundle(ckpt_dir: Path, out: Path, fmt: str = "ask-benchmark-policies/2") -> Path:
    """`out`: a bundle of `fmt` holding the complete checkpoint directory `ckpt_dir`."""
    config = json.loads((ckpt_dir / "config.json").read_text())
    recipe = ckpt_dir.name.rsplit("-", 1)[-1]
    name = f"{config['env']['name']}-s{config['policy']['seed']}-{recipe}"
    policy = out / name
    shutil.copytree(ckpt_dir, policy)
    (policy / "config.json").write_text(json.dumps({**config, "config_hash": recipe}))
    manifest = {"checkpoints": json.loads((ckpt_dir / MARKER).read_text())["checkpoints"]}
    if fmt != FIRST_FORMAT:  # format 2: the manifest covers every file
        files = [p for p in sorted(policy.iterdir()) if p.suffix != ".zip" and p.name != MARKER]
        manifest["files"] = {p.name: file_sha256(p) for p in files}
    (policy / MARKER).write_text(json.dumps(manifest))
    entry = {
        "name": name,
        "env": config["env"]["name"],
        "seed": config["policy"]["seed"],
        "config_hash": recipe,
    }
    (out / INDEX).write_text(json.dumps({"format": fmt, "title": "old", "policies": [entry]}))
    if fmt != FIRST_FORMAT:
        signed = {f: file_sha256(out / f) for f in (INDEX, f"{name}/{MARKER}")}
        (out / MARKER).write_text(json.dumps({"format": fmt, "files": signed}))
    return out
