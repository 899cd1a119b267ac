"""Reading a settings dataclass's section of slm.backend (`data`, `train`) from config: a key
the dataclass does not have is an error, so a typo never trains with a default silently."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any


def settings_mapping(cls: type, cfg: Mapping[str, Any] | None, section: str) -> dict[str, Any]:
    """`cfg` as a plain dict of `cls`'s fields; raises ValueError naming slm.backend.<section>
    and its allowed keys when `cfg` has others."""
    cfg = dict(cfg or {})
    allowed = [f.name for f in fields(cls)]
    unknown = sorted(set(cfg) - set(allowed))
    if unknown:
        raise ValueError(f"slm.backend.{section}: unknown key(s) {unknown}; allowed {allowed}")
    return cfg
