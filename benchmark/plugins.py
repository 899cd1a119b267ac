"""How an extension point finds its classes: a folder scan of its own package, then those other
installed packages register under an entry-point group (the consultant backends'
`benchmark.backends`, the gates' `benchmark.gates`): loaded, and refused with a message naming
the entry point when one is not the base class it must extend."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from importlib import metadata


def package_classes(package: str, base: type, attribute: str) -> dict[str, type]:
    """{its `attribute`: class} of every class the modules of `package` define that extends
    `base` and declares a non-empty `attribute` itself (an abstract or intermediate class,
    which inherits it, is not one)."""
    found: dict[str, type] = {}
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        module = importlib.import_module(f"{package}.{info.name}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, base)
                and value is not base
                and value.__module__ == module.__name__
                and value.__dict__.get(attribute)
            ):
                found[value.__dict__[attribute]] = value
    return found


def entry_point_classes(
    group: str, base: type, key: Callable[[metadata.EntryPoint, type], str]
) -> dict[str, type]:
    """{key(entry point, class): class} of every entry point of `group` (the first of two with
    one key); TypeError naming the entry point whose value is not a subclass of `base`."""
    found: dict[str, type] = {}
    for ep in metadata.entry_points(group=group):
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise TypeError(
                f"entry point {ep.name} = {ep.value} (group {group}) is not a "
                f"{base.__module__}.{base.__qualname__} subclass"
            )
        found.setdefault(key(ep, cls), cls)
    return found
