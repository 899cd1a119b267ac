"""Modules use each other through public names only: an underscore name is its module's own, so
importing one from another module (`from benchmark.x import _y`) ties the importer to a detail
its owner may change. The layer order itself is import-linter's (`make lint`)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "benchmark"


def private_imports(source: str, where: str) -> list[str]:
    """`where:line: from module import _name` for each underscore name `source` imports from
    another module (dunder names such as `__version__` are public)."""
    return [
        f"{where}:{node.lineno}: from {'.' * node.level}{node.module or ''} import {alias.name}"
        for node in ast.walk(ast.parse(source, where))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]


def test_no_module_imports_another_modules_underscore_name():
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        for hit in private_imports(
            path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent))
        )
    ]
    assert not found, "underscore names imported across modules (make them public):\n" + "\n".join(
        found
    )


def test_the_check_names_file_and_line_and_passes_public_and_dunder_names():
    source = "from a.b import c\nfrom __future__ import annotations\nfrom a.b import c, _d\n"
    assert private_imports(source, "benchmark/x.py") == ["benchmark/x.py:3: from a.b import _d"]


def test_every_top_level_module_is_in_a_layer():
    """A module the layer contract does not name is not held by it: every module and package
    of benchmark/ appears in [tool.importlinter]'s layers."""
    import re
    import tomllib

    from tests.conftest import REPO

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["type"] == "layers")["layers"]
    listed = set(re.findall(r"benchmark\.(\w+)", " ".join(layers)))
    package = REPO / "benchmark"
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    modules |= {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    assert modules - listed == set(), "add these to a layer in pyproject.toml"
