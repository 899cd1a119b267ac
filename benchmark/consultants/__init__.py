"""Consultant backends (conf/slm/<name>.yaml) and the factory that builds one, cache included.

Backends: hf (transformers), tiny (a locally built tiny Qwen3 on the hf path), openai (any
OpenAI-compatible server), dice (random valid action), oracle (expert action)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

from benchmark.consultants.base import Answer, Consultant, Decoding, Query, sampling_fields
from benchmark.consultants.errors import ConsultantError, ModelNotBuilt
from benchmark.plugins import entry_point_classes, package_classes

log = logging.getLogger(__name__)
ENTRY_POINT_GROUP = "benchmark.backends"  # how a backend in another installed package is named
__all__ = [
    "Answer",
    "Consultant",
    "ConsultantError",
    "Decoding",
    "ModelNotBuilt",
    "Query",
    "available_backends",
    "backend",
    "backend_class",
    "check_slm",
    "make_consultant",
    "slm_keys",
]
# the slm keys of every backend; belief_name and policy_name label the two models of Agent-BRACE's
# methods (conf/method/brace_*.yaml), which set them whatever the backend (a preset's rows with
# slm=tiny keep them); a backend adds its own (Consultant.slm_keys)
SLM_KEYS = frozenset(
    {"name", "cache", "cache_max_entries", "decoding", "backend", "belief_name", "policy_name"}
)


def make_consultant(slm_cfg: Any, paths_cfg: Any) -> Consultant:
    """Instantiate `slm.backend` and, when `slm.cache` is true, wrap it in the response cache in
    `<paths.cache>/responses/` (capped by the cache's own setting, its settings.json, so that
    no job evicts another's entries: `slm.cache_max_entries` only warns when it differs).
    Backends that declare `cacheable = False` (dice, oracle: cheaper than a lookup) are never
    wrapped."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from benchmark.consultants.cache import CachedConsultant
    from benchmark.consultants.cache_store import SETTINGS
    from benchmark.store import Store

    if isinstance(slm_cfg, Mapping) and not OmegaConf.is_config(slm_cfg):
        slm_cfg = OmegaConf.create(dict(slm_cfg))
    if "backend" not in slm_cfg:
        raise ConsultantError(f"slm config {slm_cfg.get('name', '?')!r} has no `backend` entry")
    extra = {}
    digests = Store.of(paths_cfg).digests_dir() if paths_cfg is not None else None
    if digests and getattr(_target_class(slm_cfg.backend), "uses_digests", False):
        extra["digests"] = str(digests)  # a local model is hashed once, not on every job
    backend = instantiate(slm_cfg.backend, _convert_="all", **extra)
    if not isinstance(backend, Consultant):
        raise ConsultantError(
            f"slm.backend._target_={slm_cfg.backend.get('_target_')!r} built a "
            f"{type(backend).__name__}, not a benchmark.consultants.base.Consultant"
        )
    if type(backend).check_decoding is not Consultant.check_decoding:  # a server: asked once
        try:  # a field it refuses fails the cell here, before any work
            backend.check_decoding(Decoding(**sampling_fields(slm_cfg.get("decoding"))))
        except BaseException:
            backend.close()
            raise
    if slm_cfg.get("cache", False) and getattr(backend, "cacheable", True):
        store = Store.of(paths_cfg)
        cached = CachedConsultant(backend, store.responses_dir())
        asked = slm_cfg.get("cache_max_entries")
        if asked is not None and asked != cached.store.max_entries:
            log.warning(
                "slm.cache_max_entries=%s is not applied: the response cache %s is shared by "
                "every job of the results root, so its cap is its own setting (%d entries, from "
                "its %s), never one job's, which would evict the others' entries; set it with "
                "`python -m benchmark.consultants.cache %s --max-entries N`",
                asked,
                cached.store.directory,
                cached.store.max_entries,
                SETTINGS,
                cached.store.directory,
            )
        return cached
    return backend


@functools.cache
def available_backends() -> dict[str, type[Consultant]]:
    """Every backend class by its `label`: the classes of this package's modules that declare
    one (a folder scan), then those other installed packages register under the entry-point
    group `benchmark.backends` (`package.module:Class`). The wings (bench, finetune, serve)
    name a backend through `backend(label)`, never by its class; a job names one by
    `slm.backend._target_`, which may be any importable Consultant (docs/consultants.md)."""
    found: dict[str, type[Consultant]] = package_classes(__name__, Consultant, "label")
    plugins = entry_point_classes(ENTRY_POINT_GROUP, Consultant, lambda ep, _: ep.name)
    for name, cls in plugins.items():  # this package's own win over a plugin's name
        found.setdefault(name, cls)
    return found


def backend(label: str) -> type[Consultant]:
    """The backend class registered as `label` (hf, tiny, openai, dice, oracle, or another
    package's)."""
    found = available_backends()
    if label not in found:
        raise ConsultantError(f"unknown backend {label!r}: available {sorted(found)}")
    return found[label]


def backend_class(backend_cfg: Any) -> type[Consultant]:
    """The backend class `slm.backend._target_` names: what cell.py, validate.py and the plan
    ask about a backend (its declared keys and capabilities, `Consultant`). Any importable class
    may be one, in this package or another installed one (docs/consultants.md)."""
    from hydra.utils import get_class

    target = backend_cfg.get("_target_") if isinstance(backend_cfg, Mapping) else None
    try:
        cls = get_class(str(target))
    except Exception as exc:  # noqa: BLE001 - an import error names the missing module
        raise ConsultantError(
            f"slm.backend._target_={target!r} is not an importable class: {exc}"
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, Consultant)):
        raise ConsultantError(
            f"slm.backend._target_={target!r} is not a benchmark.consultants.base.Consultant"
        )
    return cls


def slm_keys(slm: Any) -> frozenset[str]:
    """The keys the `slm` node may hold: every backend's, and those its backend adds."""
    return SLM_KEYS | frozenset(backend_class(slm.get("backend")).slm_keys)


def check_slm(slm: Any) -> None:
    """The `slm` config's values, before any work: its decoding against the backend
    (`Decoding.check_config`), then the backend's own checks (`Consultant.check_config`: the
    openai backend's server settings)."""
    slm = slm if isinstance(slm, Mapping) else {}
    node = slm.get("backend")
    backend = backend_class(node) if isinstance(node, Mapping) else None
    Decoding.check_config(slm.get("decoding") or {}, backend)
    if backend is not None:
        backend.check_config(slm)


def _target_class(backend_cfg: Any) -> type | None:
    """The backend's class, None when `_target_` names none (instantiate then says why)."""
    from hydra.utils import get_class

    try:
        return get_class(str(backend_cfg.get("_target_")))
    except Exception:  # noqa: BLE001 - reported by instantiate with its own message
        return None
