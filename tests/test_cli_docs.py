"""docs/cli.md lists every command-line tool of the package: a module or package that runs as
`python -m ...` (a `__main__.py`, or an `if __name__ == "__main__":` block) and is not listed
there fails here."""

from __future__ import annotations

import re
from pathlib import Path

from tests.doc_commands import CLIS

REPO = Path(__file__).resolve().parent.parent
MAIN_BLOCK = re.compile(r"""^if __name__ == ["']__main__["']\s*:""", re.M)


def package_clis(package: Path = REPO / "benchmark") -> set[str]:
    """The dotted names `python -m` runs: packages with a __main__.py, modules with a main block."""
    found = set()
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if path.name == "__main__.py":
            found.add(".".join(parts[:-1]))
        elif path.name != "__init__.py" and MAIN_BLOCK.search(path.read_text()):
            found.add(".".join(parts))
    return found


def listed(doc: Path = REPO / "docs" / "cli.md") -> set[str]:
    """The CLIs of the table's rows (`| \`python -m <module> ...\` | what |`)."""
    return set(re.findall(r"^\| `python -m (benchmark(?:\.[a-z_]+)*)[ `]", doc.read_text(), re.M))


def test_docs_cli_lists_every_cli_of_the_package():
    clis = package_clis()
    assert {"benchmark", "benchmark.report", "benchmark.plan", "benchmark.serve"} <= clis
    assert sorted(clis - listed()) == [], "CLIs missing from docs/cli.md"
    assert sorted(listed() - clis) == [], "docs/cli.md lists modules that are not CLIs"
    # the documentation's command checker (tests/doc_commands.py) knows each of them too
    assert sorted(clis ^ set(CLIS)) == []


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
