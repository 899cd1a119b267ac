"""Classes other installed packages register under an entry-point group (the consultant
backends' `benchmark.backends`, the gates' `benchmark.gates`): loaded, and refused with a
message naming the entry point when one is not the base class it must extend."""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata


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
