"""The exact install the suite's numbers come from: requirements.lock at the repository root.

pyproject.toml gives ranges; a fresh install inside them drifted twice in a week (a transformers
release changed its kernel wrappers, another install moved the last bits of the MC-dropout
entropies). `make install` installs with the lock as pip constraints (`pip install -c`), which
keeps the CPU torch wheel on disk (uv would ignore it and pull a CUDA build), then runs `check`
so a drifted install fails there, not in a result. Each result's provenance names the lock's
digest and whether the running install matches it.

    python -m benchmark.lockfile write                 # make lock: freeze a fresh install
    python -m benchmark.lockfile check [--extra-ok]    # exit 1 naming every difference
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from importlib import metadata
from pathlib import Path

LOCK = Path(__file__).resolve().parent.parent / "requirements.lock"
PROJECT = "benchmark"
# installed beside the lock on purpose: the CUDA build's runtime and the [gpu] extra's kernels
# (make install-gpu), and the build tools it installs first; none changes a CPU result
UNLOCKED_PREFIXES = ("nvidia-", "cuda-")
UNLOCKED = frozenset(
    {"triton", "flash-linear-attention", "fla-core", "causal-conv1d", "ninja", "pip", "setuptools"}
    | {"wheel"}
)
_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)\s*$")


def canonical(name: str) -> str:
    """PEP 503 normalised name: `Stable_Baselines3` and `stable-baselines3` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def public_version(version: str) -> str:
    """A version without its local label: the lock says torch==2.13.0 and both the CPU wheel
    (2.13.0+cpu) and a CUDA build (2.13.0+cu128) satisfy it, as pip's `==` does."""
    return version.split("+", 1)[0]


def read(path: Path = LOCK) -> dict[str, str]:
    """The lock as {canonical name: version}; a line that is not `name==version` is an error."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _LINE.match(line)
        if match is None:
            raise ValueError(f"{path}:{number}: {raw!r} is not a `name==version` pin")
        pins[canonical(match.group(1))] = match.group(2)
    return pins


def installed() -> dict[str, str]:
    """Every distribution of the running interpreter but the project itself."""
    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and canonical(name) != PROJECT:
            found[canonical(name)] = public_version(dist.version)
    return found


def _unlocked(name: str) -> bool:
    return name in UNLOCKED or name.startswith(UNLOCKED_PREFIXES)


def differences(pins: dict[str, str], have: dict[str, str], extra_ok: bool = False) -> list[str]:
    """What separates an install from the lock, one line each; empty when they are equal.
    `extra_ok`: packages the lock does not name are allowed (the GPU install's kernels bring
    their own dependencies); every locked one must still be there at its version."""
    lines = []
    for name, version in sorted(pins.items()):
        if name not in have:
            lines.append(f"{name}=={version} is locked but not installed")
        elif public_version(have[name]) != public_version(version):
            lines.append(f"{name} is {have[name]}, the lock says {version}")
    for name in sorted(set(have) - set(pins)):
        if not _unlocked(name) and not extra_ok:
            lines.append(f"{name}=={have[name]} is installed but not locked")
    return lines


def digest(path: Path = LOCK) -> str | None:
    """SHA-256 of the lock file (None where the package runs without its repository)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def provenance() -> dict:
    """The lock a result was computed under: its digest, and whether this install matches it."""
    sha = digest()
    if sha is None:
        return {"sha256": None, "matches_install": None}
    return {"sha256": sha, "matches_install": not differences(read(), installed())}


def write(path: Path = LOCK) -> int:
    """Freeze the running install (make lock runs this in a fresh venv built from the ranges)."""
    have = {n: v for n, v in installed().items() if not _unlocked(n)}
    header = (
        "# The exact install of `make install` and CI: `make lock` rewrites it from a fresh\n"
        "# install of pyproject.toml's ranges (benchmark/lockfile.py); review the diff.\n"
        f"# python {sys.version.split()[0]}; local version labels dropped (torch==2.13.0 takes\n"
        "# the CPU wheel here and a CUDA build on a GPU machine).\n"
    )
    body = "".join(f"{name}=={version}\n" for name, version in sorted(have.items()))
    path.write_text(header + body)
    print(f"wrote {path} ({len(have)} packages)")
    return 0


def check(path: Path = LOCK, extra_ok: bool = False) -> int:
    problems = differences(read(path), installed(), extra_ok)
    if not problems:
        print(f"the install matches {path.name} ({len(read(path))} packages)")
        return 0
    print(f"the install differs from {path.name}:", *problems, sep="\n  ", file=sys.stderr)
    print(
        "rebuild it with `rm -rf .venv && make install` (or `make lock` if the lock is what is "
        "out of date)",
        file=sys.stderr,
    )
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmark.lockfile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the doc's command lines as written
    )
    parser.add_argument("action", choices=["write", "check"])
    parser.add_argument(
        "--extra-ok",
        action="store_true",
        help="check: allow packages the lock does not name (make install-gpu's kernels)",
    )
    args = parser.parse_args(argv)
    return write() if args.action == "write" else check(extra_ok=args.extra_ok)


if __name__ == "__main__":
    sys.exit(main())
