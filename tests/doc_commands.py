"""The command lines the documentation gives (README.md, docs/*.md, the comment headers of
conf/experiment/*.yaml and launchers/), found and checked as a user would type them: every
`python -m benchmark...`, `.venv/bin/python -m benchmark...` and `make <target>`.

A command is checked without running it: the app's overrides compose (every job of a sweep,
through benchmark.config, Hydra's own parser and compose API) and validate; a sub-CLI's arguments
parse with its own argparse parser (and its overrides compose); a make target exists and
`make -n` accepts it. Placeholders such as `<sweep dir>` are filled from PLACEHOLDERS. A command
that is only an illustration ends in `# illustrative` (or a Markdown code block follows a line
`<!-- illustrative -->`): it is counted, not checked. A ```text block is a program's output (the
--help of docs/cli.md), not commands: it is not read."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from benchmark.cli_page import TOOLS

REPO = Path(__file__).resolve().parent.parent
ILLUSTRATIVE = "# illustrative"
BLOCK_MARK = "<!-- illustrative -->"
START = re.compile(
    r"(?:\.venv/bin/)?python -m benchmark(?:\.[a-z_.]+)?(?=\s|$)|\bmake [a-z][a-z-]*"
)
# what a placeholder stands for when a command is checked
PLACEHOLDERS = {
    "<sweep dir>": "outputs/sweeps/demo/2026-01-01_00-00-00_abcdef",
    "<dir>": "outputs/sweeps/demo/2026-01-01_00-00-00_abcdef",
    "<time>": "2026-01-01_00-00-00_abcdef",
    "<you>": "me",
    "<user>": "me",
    "<repo>": "ask-policies",
    "<preset>": "table1",
    "<env>": "fourrooms",
    "<seed>": "0",
    "<s>": "300",
    "<dir, hub id or conf/slm option>": "tiny",
    "<empty5x5 final.zip>": "/tmp/final.zip",
    "<overrides>": "",
    "<hash>": "0123456789",
    "<folder>": "outputs/models/base/base-0123456789",
    "<Qwen3-4B folder>": "tests/data",  # any folder: composing checks only that it is one
    "<commit>": "main",
    "<id>": "123",
    "$URL": "/tmp/qwen2b.url",
    "$JOB": "123",
    "<paths.cache>": "outputs/cache",
    "<root>": "outputs",
}
# the CLIs (benchmark.cli_page.TOOLS); how each one's arguments are checked: `check`
CLIS = tuple(TOOLS)


@dataclass
class Command:
    text: str  # as written, continuation lines joined
    source: str  # file:line
    illustrative: bool
    inline: bool = False  # in a `code span` of prose, not a code block

    @property
    def usage(self) -> bool:
        """A synopsis (`[--out DIR]`, `[overrides]`, `...`): read as illustrative."""
        return any(w.startswith("[") or w == "..." for w in self.text.split())

    @property
    def mention(self) -> bool:
        """A sub-CLI named without arguments (`python -m benchmark.serve` in prose): only its
        existence is checked."""
        words = self.text.split()
        return self.kind == "python" and len(words) == 3 and words[2] != "benchmark"

    @property
    def kind(self) -> str:
        return "make" if self.text.startswith("make ") else "python"


# ------------------------------------------------------------------------------- collection
def doc_files() -> list[Path]:
    """Every file whose commands are tests: found anew each run, so new docs are checked too."""
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    files += sorted((REPO / "conf" / "experiment").glob("*.yaml"))
    files += sorted(p for p in (REPO / "launchers").rglob("*") if p.is_file() and _is_text(p))
    return files


def _is_text(path: Path) -> bool:
    try:
        path.read_text()
    except UnicodeDecodeError:
        return False
    return True


def _strip_comment(text: str) -> tuple[str, bool]:
    """(the command without its trailing `# ...` comment, whether that comment marks it
    illustrative). A `#` inside quotes is kept."""
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip(), text[i:].startswith(ILLUSTRATIVE)
    return text.rstrip(), False


def _commands_in_line(line: str) -> list[tuple[str, bool]]:
    """The commands one (joined) line holds, from each start to the line's end or its comment."""
    out = []
    for m in START.finditer(line):
        if m.start() > 0 and not (line[m.start() - 1].isspace() or line[m.start() - 1] in "$(`;"):
            continue
        rest = line[m.start() :]
        if m.start() > 0 and line[m.start() - 1] == "`":  # a code span inside a code block
            rest = rest.split("`", 1)[0]
        text, marked = _strip_comment(rest)
        if text.startswith("make "):  # the target and its VAR=value arguments, not the prose after
            words = text.split()
            text = " ".join(
                [*words[:2], *(w for w in words[2:] if re.fullmatch(r"[A-Z_]+=\S*", w))]
            ).rstrip(",.;:)")
        out.append((text, marked))
        break  # a second start on the same line is part of this command's text (rare)
    return out


class LineJoiner:
    """Shell line continuation: lines ending in `\\` are joined with the next (one space)."""

    def __init__(self) -> None:
        self.pending, self.start = "", 0

    def add(self, number: int, body: str) -> tuple[int, str] | None:
        """(number of its first line, the joined line) once `body` ends a command; None while
        it continues on the next line."""
        if self.pending:
            body = self.pending + " " + body
        else:
            self.start = number
        if body.endswith("\\"):
            self.pending = body[:-1].rstrip()
            return None
        self.pending = ""
        return self.start, body

    def reset(self) -> None:
        self.pending = ""


def _markdown(path: Path, root: Path = REPO) -> list[Command]:
    rel = path.relative_to(root)
    lines = path.read_text().splitlines()
    out: list[Command] = []
    fence, block_marked, output, joiner = False, False, False, LineJoiner()
    prose: list[tuple[int, str]] = []  # (line number, text) of the prose between fences

    def flush_prose() -> None:
        text = "\n".join(t for _, t in prose)
        for m in re.finditer(r"`([^`]+)`", text):
            number = prose[0][0] + text[: m.start()].count("\n")
            for command, marked in _commands_in_line(" ".join(m.group(1).split())):
                out.append(Command(command, f"{rel}:{number}", marked, inline=True))
        prose.clear()

    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            if not fence:
                flush_prose()
                previous = next((x.strip() for x in reversed(lines[: number - 1]) if x.strip()), "")
                block_marked = previous == BLOCK_MARK
                output = stripped[3:].strip() == "text"
            fence = not fence
            continue
        if not fence:
            prose.append((number, line))
            continue
        if output:
            continue
        joined = joiner.add(number, stripped.removeprefix("$ "))
        if joined is None:
            continue
        start_line, body = joined
        for text, marked in _commands_in_line(body):
            out.append(Command(text, f"{rel}:{start_line}", marked or block_marked))
    flush_prose()
    return out


def _comments(path: Path) -> list[Command]:
    """Commands in `#` comment lines (a YAML or shell header); `\\` continues a line."""
    rel = path.relative_to(REPO)
    out, joiner = [], LineJoiner()
    for number, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if not stripped.startswith("#"):
            joiner.reset()  # a continuation ends with the comment block
            continue
        joined = joiner.add(number, stripped.lstrip("#").strip())
        if joined is None:
            continue
        start_line, body = joined
        spans = re.findall(r"`([^`]+)`", body) or [body]
        for span in spans:
            for text, marked in _commands_in_line(span):
                out.append(Command(text, f"{rel}:{start_line}", marked))
    return out


def collect() -> list[Command]:
    out = []
    for path in doc_files():
        out += _markdown(path) if path.suffix == ".md" else _comments(path)
    return out


# ------------------------------------------------------------------------------- checking
def fill(text: str) -> str:
    """The command with its placeholders filled; an unknown `<...>` fails."""
    for key, value in PLACEHOLDERS.items():
        text = text.replace(key, value)
    left = re.findall(r"<[^<>=]+>", text)
    if left:
        raise ValueError(
            f"unknown placeholder(s) {left}: add them to tests/doc_commands.py PLACEHOLDERS, "
            f"or end the command with '{ILLUSTRATIVE}'"
        )
    return text


def argv_of(text: str) -> tuple[str, list[str]]:
    """(module, arguments) of a `python -m benchmark...` command; leading VAR=value settings and
    shell continuations are dropped."""
    words = shlex.split(fill(text))
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        words.pop(0)
    if len(words) < 3 or words[1] != "-m":
        raise ValueError(f"not a python -m command: {text!r}")
    for stop in ("|", "&&", ";", ">", "2>&1"):
        if stop in words:
            words = words[: words.index(stop)]
    return words[2], words[3:]


class Parsed(Exception):
    """Raised by the patched parser once a CLI's arguments parsed: nothing runs."""

    def __init__(self, namespace: argparse.Namespace, extra: list[str]) -> None:
        super().__init__("parsed")
        self.namespace, self.extra = namespace, extra


@contextlib.contextmanager
def _stop_after_parse(known: bool):
    """ArgumentParser.parse_args (or parse_known_args) raises Parsed instead of returning."""
    name = "parse_known_args" if known else "parse_args"
    original = getattr(argparse.ArgumentParser, name)

    def patched(self, args=None, namespace=None):
        result = original(self, args, namespace)
        if known:
            raise Parsed(*result)
        raise Parsed(result, [])

    setattr(argparse.ArgumentParser, name, patched)
    try:
        yield
    finally:
        setattr(argparse.ArgumentParser, name, original)


def parse_cli(module: str, args: list[str], known: bool = False) -> Parsed:
    """The CLI's own parser applied to `args`; SystemExit (argparse's error) propagates."""
    main = importlib.import_module(module if module.endswith("__main__") else module).main
    with _stop_after_parse(known):
        try:
            main(args)
        except Parsed as parsed:
            return parsed
    raise AssertionError(f"{module} ran without parsing its arguments")


def compose_jobs(overrides: list[str], every_job: bool, validate=None) -> int:
    """Compose (and validate) the jobs of `python -m benchmark <overrides> -m`: every job, or the
    base and the last job (the fast suite). Returns the number of jobs the sweep has.
    `validate`: the check of each job's config (default: the app's, benchmark.validate)."""
    from benchmark.config import session, sweep_jobs

    if validate is None:
        from benchmark.validate import validate

    _, jobs = sweep_jobs(overrides)  # composes the sweep's base config
    chosen = jobs if every_job else jobs[-1:]
    with session() as compose:
        for job in chosen:
            if (tuple(job), validate) in _PASSED:
                continue  # the same job of another documented sweep: the same config, checked
            cfg = compose(job)
            try:
                validate(cfg)
            except Exception as exc:
                raise ValueError(f"job {' '.join(job)}: {exc}") from exc
            _PASSED.add((tuple(job), validate))
    return len(jobs)


# (job overrides, check) pairs that composed and passed in this process: documented sweeps
# share many jobs (a preset and the same preset with one axis pinned), each checked once
_PASSED: set[tuple[tuple[str, ...], object]] = set()


def check(command: Command, every_job: bool = False) -> str:
    """Check one command (see the module doc); returns what was checked. Raises on a failure."""
    if command.kind == "make":
        return check_make(command.text)
    module, args = argv_of(command.text)
    if module not in CLIS:
        raise ValueError(f"no such command: python -m {module} (the CLIs: {', '.join(CLIS)})")
    if module == "benchmark":
        flags = [a for a in args if a.startswith("-") and a not in ("-m", "--multirun")]
        if flags:
            raise ValueError(f"python -m benchmark takes overrides and -m only, got {flags}")
        return f"{compose_jobs(args, every_job)} jobs compose"
    if module == "benchmark.brace.train":  # a Hydra app: its settings checked as a job does
        from benchmark.brace.checks import check as check_settings

        flags = [a for a in args if a.startswith("-") and a not in ("-m", "--multirun")]
        if flags:
            raise ValueError(f"python -m benchmark.brace.train takes overrides and -m, got {flags}")
        return f"{compose_jobs(args, every_job, check_settings)} trainer jobs compose and check"
    if module == "benchmark.prompts":
        return _check_prompts(args)
    if module == "benchmark.envs.textworld.make":  # its options, then the overrides compose
        parsed = parse_cli(module, args, known=True)
        overrides = [o for o in parsed.extra if o not in ("-m", "--multirun")]
        flags = [o for o in overrides if o.startswith("-")]
        if flags:
            raise ValueError(f"unknown option(s) {flags}")
        return f"parses; {compose_jobs(overrides, every_job)} jobs compose"
    if module == "benchmark.dashboard":
        parsed = parse_cli(module, args, known=True)
        flags = [o for o in parsed.extra if o.startswith("-")]
        if flags:
            raise ValueError(f"unknown option(s) {flags}")
        return f"{compose_jobs(parsed.extra, every_job)} jobs compose"
    target = "benchmark.policy.__main__" if module == "benchmark.policy" else module
    target = "benchmark.report.__main__" if module == "benchmark.report" else target
    target = "benchmark.bench.__main__" if module == "benchmark.bench" else target
    parsed = parse_cli(target, args)
    overrides = getattr(parsed.namespace, "overrides", None)
    if overrides:
        return f"parses; {compose_jobs(overrides, every_job)} jobs compose"
    return "parses"


def _check_prompts(args: list[str]) -> str:
    from benchmark.prompts import showcase
    from benchmark.prompts.__main__ import parse

    cmd, kw, overrides = parse(args)
    if cmd == "show":
        showcase.compose(kw.get("env", "fourrooms"), kw.get("prompt", "stateful"), overrides)
    return "parses" + (", composes" if cmd == "show" else "")


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z-]*):", text, flags=re.M))


def check_make(text: str) -> str:
    words = shlex.split(fill(text))
    target = words[1]
    if target not in make_targets():
        raise ValueError(f"make {target}: no such target (Makefile has {sorted(make_targets())})")
    proc = subprocess.run(
        ["make", "-n", *words[1:]], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    if proc.returncode != 0:
        raise ValueError(f"make -n {' '.join(words[1:])}: {proc.stderr.strip()[-500:]}")
    return "make -n"
