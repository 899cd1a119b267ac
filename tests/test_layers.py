"""Modules use each other through public names only: an underscore name is its module's own, so
importing one from another module (`from benchmark.x import _y`) ties the importer to a detail
its owner may change. The layer order itself is import-linter's (`make lint`)."""

from __future__ import annotations

import ast
import re
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
    import tomllib

    from tests.conftest import REPO

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["type"] == "layers")["layers"]
    listed = set(re.findall(r"benchmark\.(\w+)", " ".join(layers)))
    package = REPO / "benchmark"
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    modules |= {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    assert modules - listed == set(), "add these to a layer in pyproject.toml"


# ----------------------------------------------------------------------------- the wings' API
API_WINGS = ("finetune", "brace", "bench")  # the wings held to the documented core API
API_HEADING = "## The core's public API for finetune, brace and bench"
API_ROW = re.compile(r"^\|\s*`(benchmark(?:\.\w+)*)`\s*\|\s*`(\w+)`\s*\|")


def wing_modules() -> set[str]:
    """The top-level modules of the wings' layer (the first of pyproject's layers contract):
    what a wing imports from another wing is not the core's API."""
    import tomllib

    from tests.conftest import REPO

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["type"] == "layers")["layers"]
    return set(re.findall(r"benchmark\.(\w+)", layers[0]))


def documented_api() -> set[tuple[str, str]]:
    """(module, name) of each row of the docs' table of the core's public API."""
    from tests.conftest import REPO

    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split(API_HEADING, 1)[1].split("\n## ", 1)[0]
    return {(m[1], m[2]) for line in section.splitlines() if (m := API_ROW.match(line))}


def is_module(name: str) -> bool:
    """Whether `benchmark.x.y` names a module or package (else a name inside one)."""
    path = PACKAGE.parent / name.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def core_names(source: str, where: str, package: str, wings: set[str]) -> list[tuple]:
    """((module, name), 'where:line') for each core name `source` uses: `from benchmark.x import
    y`, and `x.y` after `from benchmark import x` (a module); `package` resolves relative
    imports; imports of a wing are left out. `import benchmark.x` is reported as name '*'."""

    def in_wing(module: str) -> bool:
        return module.split(".")[1:2] != [] and module.split(".")[1] in wings

    tree = ast.parse(source, where)
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                ((a.name, "*"), f"{where}:{node.lineno}")
                for a in node.names
                if a.name.split(".")[0] == "benchmark" and not in_wing(a.name)
            ]
        if not isinstance(node, ast.ImportFrom):
            continue
        parts = package.split(".")
        base = parts[: len(parts) - node.level + 1] if node.level else []
        module = ".".join([*base, *([node.module] if node.module else [])])
        if module.split(".")[0] != "benchmark":
            continue
        for alias in node.names:
            full = f"{module}.{alias.name}"
            if in_wing(full if is_module(full) else module):
                continue
            if is_module(full):
                aliases[alias.asname or alias.name] = full
            else:
                found.append(((module, alias.name), f"{where}:{node.lineno}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in aliases:
                found.append(((aliases[node.value.id], node.attr), f"{where}:{node.lineno}"))
    return found


def wing_usage() -> dict[tuple[str, str], list[str]]:
    wings = wing_modules()
    used: dict[tuple[str, str], list[str]] = {}
    for wing in API_WINGS:
        for path in sorted((PACKAGE / wing).rglob("*.py")):
            rel = path.relative_to(PACKAGE.parent)
            package = ".".join(rel.with_suffix("").parts[:-1])
            for key, where in core_names(
                path.read_text(encoding="utf-8"), str(rel), package, wings
            ):
                used.setdefault(key, []).append(where)
    return used


def test_wings_use_only_the_documented_core_api():
    """finetune/, brace/ and bench/ import from the core only the names docs/architecture.md
    lists; a new one is added there (one line: what for) or the wing keeps to the listed ones."""
    used, listed = wing_usage(), documented_api()
    assert wing_modules() >= set(API_WINGS)
    missing = [
        f"{w}: {m}.{n}" for (m, n), ws in sorted(used.items()) if (m, n) not in listed for w in ws
    ]
    assert not missing, (
        f"core names the wings use that docs/architecture.md ({API_HEADING[3:]}) does not "
        "list:\n" + "\n".join(missing)
    )


def test_every_documented_core_name_is_used_by_a_wing():
    """The table lists what the wings use, no more: a row nothing uses any more is removed."""
    stale = sorted(documented_api() - set(wing_usage()))
    assert not stale, f"rows of docs/architecture.md no wing uses: {stale}"


def test_the_api_check_reads_from_imports_module_attributes_and_relative_imports():
    source = (
        "from benchmark.store import Store, build_once\n"
        "from benchmark import config\n"
        "from benchmark.finetune import lm\n"
        "from .. import seeds\n"
        "from . import other\n"
        "config.compose([])\nseeds.TRAIN_SEED_MIN\nlm.load(1)\n"
        "import benchmark.store\n"
        "import benchmark.finetune.lm\n"
    )
    got = core_names(source, "benchmark/bench/x.py", "benchmark.bench", {"finetune", "bench"})
    assert sorted(got) == [
        (("benchmark.config", "compose"), "benchmark/bench/x.py:6"),
        (("benchmark.seeds", "TRAIN_SEED_MIN"), "benchmark/bench/x.py:7"),
        (("benchmark.store", "*"), "benchmark/bench/x.py:9"),
        (("benchmark.store", "Store"), "benchmark/bench/x.py:1"),
        (("benchmark.store", "build_once"), "benchmark/bench/x.py:1"),
    ]
