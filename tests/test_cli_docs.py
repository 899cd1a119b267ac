"""docs/cli.md is generated (`python -m benchmark.cli_page > docs/cli.md`): it is the module's
output, it lists every command-line tool of the package (a module or package that runs as
`python -m ...`: a `__main__.py`, or an `if __name__ == "__main__":` block), and the --help it
shows is what the tool prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark import cli_page
from benchmark.cli_page import TOOLS, package_clis, page
from tests.doc_commands import CLIS

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "cli.md"
REGENERATE = "re-run: python -m benchmark.cli_page > docs/cli.md"


def lock_python() -> tuple[int, int]:
    """The Python of requirements.lock (`# python 3.11.7`): argparse formats help the same way
    within one minor version, not across them."""
    found = re.search(r"^# python (\d+)\.(\d+)", (REPO / "requirements.lock").read_text(), re.M)
    assert found, "requirements.lock names no python version"
    return int(found[1]), int(found[2])


def without_help(text: str) -> str:
    """The page with the lines of its ```text blocks (the tools' help) left out."""
    return re.sub(r"```text\n.*?```", "```text\n```", text, flags=re.S)


def listed(doc: Path = DOC) -> set[str]:
    """The CLIs of the table's rows (`| \`python -m <module> ...\` | what |`)."""
    return set(re.findall(r"^\| `python -m (benchmark(?:\.[a-z_]+)*)[ `]", doc.read_text(), re.M))


@pytest.fixture(scope="module")
def generated() -> str:
    return page()


def test_docs_cli_is_the_generated_page(generated):
    shown = DOC.read_text()
    assert without_help(shown) == without_help(generated), REGENERATE
    if sys.version_info[:2] != lock_python():
        pytest.skip(
            f"the tools' --help is compared on the lock's Python {lock_python()} (argparse "
            f"formats differently on {sys.version_info[:2]}); the rest of the page matched"
        )
    assert shown == generated, REGENERATE


def test_docs_cli_lists_every_cli_of_the_package(generated):
    clis = package_clis()
    assert {"benchmark", "benchmark.report", "benchmark.plan", "benchmark.serve"} <= clis
    assert sorted(clis - set(TOOLS)) == [], "CLIs missing from benchmark/cli_page.py TOOLS"
    assert sorted(set(TOOLS) - clis) == [], "TOOLS lists modules that are not CLIs"
    assert listed() == clis
    for cli in clis:  # a section each, with its help (a Hydra app: its synopsis)
        start = generated.index(f"\n## python -m {cli}\n")
        block = generated[start:].split("```text\n", 1)[1].split("```", 1)[0]
        assert f"python -m {cli}" in block, (cli, block)
    # the documentation's command checker (tests/doc_commands.py) knows each of them
    assert set(CLIS) == clis


def test_the_help_shown_is_what_the_tool_prints(monkeypatch):
    """In-process help (the page's) equals a real `python -m ... --help` at the page's width,
    and a terminal's width does not change the page."""
    env = dict(os.environ, COLUMNS=str(cli_page.WIDTH))
    real = subprocess.run(
        [sys.executable, "-m", "benchmark.lockfile", "--help"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert cli_page.help_text("benchmark.lockfile") == real.rstrip()
    wide = cli_page.help_text("benchmark.serve")
    monkeypatch.setenv("COLUMNS", "40")
    assert cli_page.help_text("benchmark.serve") == wide
    assert os.environ["COLUMNS"] == "40"  # put back as it was
    assert max(len(line) for line in wide.splitlines()) > 40


def test_the_discovery_sees_a_new_cli(tmp_path):
    """A new `python -m` module is found, so a CLI added later without docs fails the test."""
    pkg = tmp_path / "benchmark"
    (pkg / "tool").mkdir(parents=True)
    (pkg / "tool" / "__main__.py").write_text("print('hi')\n")
    (pkg / "other.py").write_text(
        'def main():\n    pass\n\n\nif __name__ == "__main__":\n    main()\n'
    )
    (pkg / "quiet.py").write_text("x = '__main__'\n")
    assert package_clis(pkg) == {"benchmark.tool", "benchmark.other"}


def test_a_cli_missing_from_tools_is_named(monkeypatch):
    monkeypatch.setattr(cli_page, "package_clis", lambda: {*TOOLS, "benchmark.newtool"})
    with pytest.raises(ValueError, match=r"\['benchmark.newtool'\] run as .* not in .*TOOLS"):
        page()
