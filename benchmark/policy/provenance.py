"""What trained a checkpoint: a digest of the training code (which TRAINING_VERSION answers for)
and the machine and package versions.

The digest is over the abstract syntax of policy/train.py and policy/network.py without
docstrings, so comments, docstrings and formatting do not count and every other edit does.
`TRAINING_CODE` beside this file records it with the TRAINING_VERSION it belongs to;
tests/policy/test_policy.py fails when the code changes without a new record, and the record is only
rewritten by `python -m benchmark.policy training-code --record`, so a change of the training
code is always a decision: bump TRAINING_VERSION when the change can alter the weights a config
trains to (then no cached checkpoint of the old code is reused: its directory name changes),
keep it when it cannot (logging, refactoring), and re-record in both cases."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmark.measured import cpu_model

HERE = Path(__file__).resolve().parent
SOURCES = ("train.py", "network.py")  # the training code TRAINING_VERSION answers for
RECORD = HERE / "TRAINING_CODE"
RECORD_COMMAND = "python -m benchmark.policy training-code --record"
PACKAGES = ("torch", "stable-baselines3", "gymnasium", "minigrid", "popgym", "numpy")


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _canonical(node: Any) -> Any:
    """A JSON-able form of an AST without positions; empty fields are left out, so a Python that
    adds a field (3.12's `type_params`) digests the same source to the same value."""
    if isinstance(node, ast.AST):
        fields = [(f, _canonical(getattr(node, f, None))) for f in node._fields]
        return [type(node).__name__, [[f, v] for f, v in fields if v not in (None, [])]]
    if isinstance(node, list):
        return [_canonical(n) for n in node]
    return repr(node)


def normalized_source(source: str) -> str:
    """The code of `source` as canonical JSON: no comments, docstrings, formatting or positions."""
    tree = _strip_docstrings(ast.parse(source))
    return json.dumps(_canonical(tree), separators=(",", ":"))


def training_code_digest(directory: Path = HERE) -> str:
    """SHA-256 of the normalized training sources (SOURCES, in `directory`)."""
    h = hashlib.sha256()
    for name in SOURCES:
        h.update(name.encode() + b"\0")
        h.update(normalized_source((directory / name).read_text()).encode() + b"\0")
    return h.hexdigest()


def recorded() -> dict[str, Any] | None:
    try:
        return json.loads(RECORD.read_text())
    except FileNotFoundError:
        return None


def record(training_version: int) -> dict[str, Any]:
    """Write TRAINING_CODE: the current digest for `training_version` (train.TRAINING_VERSION,
    passed in: this module reads the training code's files, it does not import it)."""
    data = {
        "training_version": training_version,
        "digest": training_code_digest(),
        "sources": [f"benchmark/policy/{s}" for s in SOURCES],
        "note": "written by `" + RECORD_COMMAND + "`; see benchmark/policy/provenance.py",
    }
    RECORD.write_text(json.dumps(data, indent=2) + "\n")
    return data


def check(training_version: int) -> str | None:
    """None when TRAINING_CODE matches the code and `training_version` (train.TRAINING_VERSION);
    else what to do."""
    rec = recorded() or {}
    digest = training_code_digest()
    files = " and ".join(f"benchmark/policy/{s}" for s in SOURCES)
    if rec.get("training_version") == training_version and rec.get("digest") == digest:
        return None
    if rec.get("digest") != digest:
        return (
            f"the training code ({files}) changed since {RECORD.name} was recorded for "
            f"TRAINING_VERSION {rec.get('training_version')} (digest {str(rec.get('digest'))[:12]}, "
            f"now {digest[:12]}). If the change can alter the weights a config trains to (the "
            "algorithm, its defaults, seeding, the network, which checkpoints are saved), bump "
            "TRAINING_VERSION in benchmark/policy/train.py, so that no checkpoint trained by the "
            "old code is reused; if it cannot (logging, comments, refactoring), keep it. Either "
            f"way, re-record: {RECORD_COMMAND}"
        )
    return (
        f"TRAINING_VERSION is {training_version} but {RECORD.name} records "
        f"{rec.get('training_version')} for the same code: re-record with {RECORD_COMMAND}"
    )


def package_versions(packages: tuple[str, ...]) -> dict[str, str | None]:
    """Installed versions (None when a package is missing)."""
    versions: dict[str, str | None] = {}
    for pkg in packages:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return versions


def system_info() -> dict[str, Any]:
    """The machine and versions a policy was trained with (no host name: it gets published)."""
    import torch

    versions = package_versions(PACKAGES)
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except Exception:  # noqa: BLE001 - older torch
        capability = None
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_cpu_capability": capability,  # the SIMD kernels torch picked (AVX512, AVX2, ...)
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "packages": versions,
        "training_code": training_code_digest(),
    }
