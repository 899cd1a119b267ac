"""docs/cli.md, generated: every command-line tool of the package (a module or package that runs
as `python -m ...`), what it does, and its `--help` as its own parser prints it.

A tool's line (its synopsis, what it does, the guide that explains it) is in TOOLS; its help comes
from calling the tool's `main(["--help"])` (a Hydra app, which has no argparse parser, shows its
synopsis and the flags Hydra adds). The help is formatted at a fixed width (COLUMNS=100), so the
page does not depend on the terminal it is made in. A test fails when docs/cli.md is not this
module's output, or when a module that runs as `python -m ...` is not in TOOLS.

    python -m benchmark.cli_page > docs/cli.md     # writes the page
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import os
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
WIDTH = 100  # the COLUMNS argparse formats the help at: 98 characters a line
MAIN_BLOCK = re.compile(r"""^if __name__ == ["']__main__["']\s*:""", re.M)
HYDRA_APP = re.compile(r"^@hydra\.main\(", re.M)


@dataclass(frozen=True)
class Tool:
    synopsis: str  # the command's arguments, as the table shows them (a reminder, not the usage)
    what: str  # what it does, one line (Markdown)
    guide: str  # the docs/ page that explains it


# in the order the page lists them: the app, then what a user runs around a sweep, then the rest
TOOLS: dict[str, Tool] = {
    "benchmark": Tool(
        "[overrides] [-m]",
        "runs one cell, or a sweep with `-m` (ends with its tally of how the cells went)",
        "reliability.md",
    ),
    "benchmark.plan": Tool(
        "+experiment=<preset> [overrides] [--json]",
        "a sweep's cells, their status in the results root, the work and time left",
        "plan.md",
    ),
    "benchmark.migrate": Tool(
        "ROOT [paths.<key>=...] [--dry-run]",
        "brings a results root of an older layout up to date once (moves and renames, never "
        "deletes; a sweep runs it at its start when needed)",
        "reliability.md",
    ),
    "benchmark.report": Tool(
        "<sweep dir> [--out DIR] [--brief]",
        "the Markdown report, tables and figures of a sweep",
        "report.md",
    ),
    "benchmark.dashboard": Tool(
        "+experiment=<preset> [--publish]",
        "W&B workspace views and reports of a preset, as code",
        "dashboards.md",
    ),
    "benchmark.prompts": Tool(
        "show [env=... prompt=... step=K] [overrides]",
        "the exact prompt a consultant gets; `stats`, `golden`",
        "consultants.md",
    ),
    "benchmark.policy": Tool(
        "export [overrides] [--out DIR]",
        "exports trained policies as a bundle; `training-code` checks the training-code record",
        "policies.md",
    ),
    "benchmark.serve": Tool(
        "--model <dir, hub id or conf/slm option> [--url-file F]",
        "one OpenAI-compatible server for a whole sweep",
        "cluster.md",
    ),
    "benchmark.consultants.cache": Tool(
        "<dir> [--max-entries N]",
        "shows or sets the shared response cache's cap",
        "cluster.md",
    ),
    "benchmark.bench": Tool(
        "[cpu, gpu or gpu-smoke] [options]",
        "speed and memory ratios, `make bench` / `make bench-gpu`; the first GPU run's checks, "
        "`make gpu-smoke`",
        "performance.md",
    ),
    "benchmark.bench.batching": Tool(
        "[--repeats N]",
        "padded against per-length batching of one batch of mixed-length prompts: seconds, "
        "forward calls, same answers",
        "performance.md",
    ),
    "benchmark.lockfile": Tool(
        "check [--extra-ok]",
        "whether this install is exactly requirements.lock (`make install` runs it); `write` "
        "freezes a fresh install (`make lock`)",
        "development.md",
    ),
    "benchmark.presets": Tool(
        "",
        "prints the table of every preset (conf/experiment) that docs/presets.md holds",
        "presets.md",
    ),
    "benchmark.cli_page": Tool(
        "",
        "prints this page, from each tool's own parser (`> docs/cli.md` writes it)",
        "development.md",
    ),
    "benchmark.envs.textworld.make": Tool(
        "[overrides] [-m] [--workers N] [--splits ...] [--shard I/N] [--report FILE]",
        "makes a job's (or a sweep's) TextWorld games ahead of time, on every core or as a "
        "SLURM array, resumable",
        "families.md",
    ),
    "benchmark.protocol": Tool(
        "[values \\| departures]",
        "prints the values of the three protocols (paper, official, suite), or every place "
        "where `paper` differs from the released code, as docs/protocol.md shows them",
        "protocol.md",
    ),
    "benchmark.brace.train": Tool(
        "[overrides] [-m]",
        "Agent-BRACE's trainer, a Hydra job like the app (sweeps with `-m`, SLURM with "
        "`hydra/launcher=slurm`): teacher, SFT, RL (`brace.algorithm=ppo` or `grpo`), into "
        "`brace.out`",
        "brace.md",
    ),
    "benchmark.brace.table": Tool(
        "<sweep dir> [--check]",
        "what a trainer sweep learned (+experiment=brace_demo prints it at its end): belief "
        "format and correctness, R_env base / SFT / SFT+PPO / frozen belief with paired CIs; "
        "`--check` exits 1 when nothing was learned",
        "brace.md",
    ),
    "benchmark.brace.base": Tool(
        "[--layers N --width N ... --steps N] [--out DIR] [--probe N] \\| probe <dir>",
        "pretrains the base that reads its prompt (a tiny Qwen3 on generated TextWorld "
        "transcripts; kill-safe, a rerun resumes) into `outputs/models/base/base-<hash>`; "
        "`probe`: its copy accuracy on held-out transcripts",
        "brace.md",
    ),
    "benchmark.brace.shipped": Tool(
        "ship <pretraining dir> [--n N] \\| check",
        "probes a finished base and, at the goal, ships it into the package with its pinned "
        "digest and its card (docs/measured/base-model.md); `check`: the shipped weights "
        "against the pin",
        "brace.md",
    ),
    "benchmark.brace.context": Tool(
        "--env <env> --belief <dir> --policy <dir> [--steps N] [--seeds S ...]",
        "context length per step, raw history against the belief pipeline, same models and seeds",
        "brace.md",
    ),
}

INTRO = """\
# Command-line tools

Every command-line tool of the suite: the table says what each one does, the sections below
give each one's `--help` as it prints it (the app's and the trainer's: Hydra's usage). The CLIs
that take overrides compose them as the app does (`benchmark.config`), so `protocol=...`,
`paths.root=...` and `BENCHMARK_ROOT` mean the same everywhere.

This page is generated from the tools' own parsers (`python -m benchmark.cli_page > docs/cli.md`;
the table's lines are in benchmark/cli_page.py): a test fails when it differs, or when a module
that runs as `python -m ...` is not on it.
"""

HYDRA_NOTE = (
    "A Hydra app: the arguments are config overrides (`key=value`, `+experiment=<preset>`), `-m` "
    "sweeps their comma lists. Hydra's own flags: `--help` prints the config groups and the "
    "composed config, `--cfg job` the config a job runs with, `--info` where it was composed "
    "from."
)


def package_clis(package: Path = PACKAGE) -> set[str]:
    """The dotted names `python -m` runs: packages with a __main__.py, modules with a main block."""
    found = set()
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if path.name == "__main__.py":
            found.add(".".join(parts[:-1]))
        elif path.name != "__init__.py" and MAIN_BLOCK.search(path.read_text()):
            found.add(".".join(parts))
    return found


def entry_module(cli: str) -> str:
    """The module whose code runs for `python -m <cli>`: a package's __main__, else the module."""
    folder = PACKAGE.parent.joinpath(*cli.split("."))
    return f"{cli}.__main__" if (folder / "__main__.py").is_file() else cli


def is_hydra_app(cli: str) -> bool:
    """The entry point is a `@hydra.main` function: Hydra parses its command line."""
    module = importlib.util.find_spec(entry_module(cli))
    if module is None or module.origin is None:
        raise ValueError(f"python -m {cli}: no such module")
    return bool(HYDRA_APP.search(Path(module.origin).read_text()))


@contextlib.contextmanager
def _fixed_width() -> Iterator[None]:
    """COLUMNS=WIDTH and no colour while a parser formats its help (argparse reads both)."""
    saved = {k: os.environ.get(k) for k in ("COLUMNS", "NO_COLOR")}
    os.environ.update(COLUMNS=str(WIDTH), NO_COLOR="1")
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def help_text(cli: str) -> str:
    """What `python -m <cli> --help` prints, from the tool's own `main(argv)` called in this
    process with ["--help"] (its parser prints and exits; nothing runs)."""
    module = importlib.import_module(entry_module(cli))
    main = getattr(module, "main", None)
    if main is None:
        raise ValueError(
            f"python -m {cli} has no main(argv): a tool's parser must be reachable as "
            f"{entry_module(cli)}.main(argv) for docs/cli.md to show its --help"
        )
    out = io.StringIO()
    with _fixed_width(), contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(["--help"])
    text = out.getvalue().rstrip()
    if not text:
        raise ValueError(f"python -m {cli} --help printed nothing")
    return "\n".join(line.rstrip() for line in text.splitlines())


def command(cli: str) -> str:
    synopsis = TOOLS[cli].synopsis
    return f"python -m {cli}" + (f" {synopsis}" if synopsis else "")


def table() -> str:
    """The Markdown table of every tool, one line each."""
    rows = ["| command | what it does |", "|---|---|"]
    for cli, tool in TOOLS.items():
        rows.append(f"| `{command(cli)}` | {tool.what} ([{tool.guide}]({tool.guide})) |")
    return "\n".join(rows) + "\n"


def section(cli: str) -> str:
    """A tool's heading and its help (a Hydra app: its synopsis and Hydra's flags)."""
    tool = TOOLS[cli]
    what = f"{tool.what[0].upper()}{tool.what[1:]} ([{tool.guide}]({tool.guide}))."
    head = f"## python -m {cli}\n\n{_wrap(what)}\n\n"
    if is_hydra_app(cli):
        usage = command(cli).replace("\\|", "|")
        return f"{head}```text\n{usage}\n```\n\n{_wrap(HYDRA_NOTE)}\n"
    return f"{head}```text\n{help_text(cli)}\n```\n"


def _wrap(text: str) -> str:
    """Prose at the page's width, never breaking a word or a link."""
    return textwrap.fill(text, WIDTH, break_long_words=False, break_on_hyphens=False)


def page() -> str:
    """docs/cli.md: the introduction, the table, then every tool's section."""
    missing = sorted(package_clis() - set(TOOLS))
    if missing:
        raise ValueError(
            f"{missing} run as `python -m ...` but are not in benchmark/cli_page.py TOOLS: "
            "add each one's synopsis, what it does and its guide"
        )
    parts = [INTRO, table(), *(section(cli) for cli in TOOLS)]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    """Print the page."""
    import argparse

    argparse.ArgumentParser(
        prog="python -m benchmark.cli_page",
        description="Print docs/cli.md: every command-line tool of the package with its --help.",
    ).parse_args(argv)
    print(page(), end="")


if __name__ == "__main__":
    main()
