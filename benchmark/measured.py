"""Measured pages: docs/measured/<name>.md, each written by the command that measured its figures.

A figure the docs quote is trusted only when a command wrote it, with that command, the commit
and the machine beside it; a hand-typed number has none of these. The commands that measure
(`make demo`'s report, `make bench`) call `write_page`; tests/test_measured_figures.py fails on a
figure in README.md or docs/*.md that no measured page holds.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = REPO / "docs" / "measured"
# the header lines every page opens with, in this order (the test reads them back)
FIELDS = ("command", "commit", "date", "machine")
NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


def git(*args: str, repo: Path = REPO) -> str | None:
    """The stripped output of `git <args>` in `repo`; None when git fails or is missing."""
    try:
        run = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return run.stdout.strip()


def commit(repo: Path = REPO) -> str:
    """The short sha of HEAD, `+dirty` when tracked files differ from it; `unknown` outside git."""
    sha = git("rev-parse", "--short", "HEAD", repo=repo)
    dirty = git("status", "--porcelain", "--untracked-files=no", repo=repo)
    if sha is None or dirty is None:
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    """CPU model, the cores this process may use, and the first CUDA GPU if torch sees one."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpu = "none"
    try:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return f"{cpu_model()}, {cores} cores, GPU: {gpu}"


def header(command: str) -> str:
    """The provenance block a page opens with: one `- field: value` line per FIELDS entry."""
    values = {
        "command": f"`{command}`",
        "commit": commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
    }
    return "\n".join(f"- {field}: {values[field]}" for field in FIELDS)


def write_page(name: str, title: str, body: str, command: str, pages: Path = PAGES) -> Path:
    """Write `<pages>/<name>.md`: the title, the provenance header, then the body (Markdown).
    The whole page is replaced: it holds one run's figures, never a mix of runs."""
    if not NAME.fullmatch(name):
        raise ValueError(f"page name {name!r}: use lower-case letters, digits and '-'")
    path = Path(pages) / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (
        f"# {title}\n\n"
        f"Generated: do not edit; rerun the command to refresh it.\n\n"
        f"{header(command)}\n\n{body.strip()}\n"
    )
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def read_header(text: str) -> dict[str, str]:
    """The header fields of a page's text (missing ones absent)."""
    found = {}
    for line in text.splitlines():
        m = re.match(r"- (\w+): (.+)$", line)
        if m and m.group(1) in FIELDS and m.group(1) not in found:
            found[m.group(1)] = m.group(2).strip()
    return found
