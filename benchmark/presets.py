"""The presets (conf/experiment) as docs/presets.md lists them, read from the presets themselves.

A preset's YAML opens with a comment that says what it reproduces; its first sentence is the
preset's line in the table, and the first command of the comment that names the preset
(`#   python -m <cli> +experiment=<name> ...`) is how it runs (default: the app's sweep,
`python -m benchmark +experiment=<name> -m`). A new preset is listed by adding its file; a test
fails when docs/presets.md's table is not this module's output.

    python -m benchmark.presets     # prints the table docs/presets.md holds
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from benchmark.config import CONF, options

_SENTENCE_END = re.compile(r"(?<=[a-z0-9)\]`'\"])\.(\s|$)")


@dataclass(frozen=True)
class Preset:
    name: str
    command: str
    what: str


def header(path: Path) -> list[str]:
    """The opening comment's lines, without `#` and the `@package` directive."""
    lines = []
    for raw in path.read_text().splitlines():
        if not raw.startswith("#"):
            break
        text = raw[1:]
        if text.strip().startswith("@package"):
            continue
        lines.append(text)
    return lines


def _command(name: str, lines: list[str]) -> str:
    wanted = re.compile(rf"^python -m benchmark[a-z_.]* \+experiment={re.escape(name)}(\s|$)")
    for text in lines:
        command = text.split("  #", 1)[0].strip().rstrip("\\").strip()
        if wanted.match(command):
            return command
    return f"python -m benchmark +experiment={name} -m"


def _first_sentence(lines: list[str]) -> str:
    """The prose before the first sentence end or the first indented command line."""
    prose = []
    for text in lines:
        if text.startswith("   ") and "python -m" in text:
            break
        prose.append(text.strip())
    joined = " ".join(p for p in prose if p)
    match = _SENTENCE_END.search(joined)
    return (joined[: match.start()] if match else joined).rstrip(":; ")


def preset(name: str) -> Preset:
    lines = header(CONF / "experiment" / f"{name}.yaml")
    what = _first_sentence(lines)
    if not what:
        raise ValueError(
            f"conf/experiment/{name}.yaml has no opening comment: its first lines must say what "
            "the preset reproduces (docs/presets.md is generated from them)"
        )
    return Preset(name, _command(name, lines), what)


def table() -> str:
    """The Markdown table of every preset, in name order."""
    rows = ["| preset | command | what |", "|---|---|---|"]
    for name in options("experiment"):
        p = preset(name)
        rows.append(f"| `{p.name}` | `{p.command}` | {p.what.replace('|', '/')} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Print the table; `--help` says what it is (the module takes no other argument)."""
    import argparse

    argparse.ArgumentParser(
        prog="python -m benchmark.presets",
        description="Print the table of every preset (conf/experiment) that docs/presets.md holds.",
    ).parse_args(argv)
    print(table(), end="")


if __name__ == "__main__":
    main()
