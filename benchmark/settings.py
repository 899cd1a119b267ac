"""Declared roles: what a setting means lives beside it, on the frozen dataclass of its owner.

A field says whether it shapes results (`identity`) or only how they are computed (`execution`:
threads, device, paths, progress), and a field added after results existed says the value those
results had (`added(..., old=...)`): at that value it stays out, so they keep their identity. A
field may also sit outside one identity scheme (the tuning study does not see how many trials
run). `identity_of` computes every identity (cells, PPO checkpoints, studies, trained models)
from these declarations, so no list of keys is kept anywhere else."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

# the identity schemes: a cell's hash, its tuning study's key, a PPO checkpoint's directory
CELL, STUDY, CHECKPOINT = "cell", "study", "checkpoint"
# the env of a cell that runs no PPO (what only PPO reads is no part of it)
WITHOUT_PPO = "without-ppo"
# a fine-tuned consultant's copy of the prompt in its cell's identity (its cells came after some
# decoding keys did: they always held those, at every value)
FINETUNED_PROMPT = "finetuned-prompt"
# the prompt of a cell whose env family's texts do not read a key at its level (Family.prompt_keys)
UNREAD = "unread"
# Agent-BRACE's trained models (benchmark.brace.checks.BraceKeys): the SFT models and the RL models
BRACE_SFT, BRACE_RL = "brace-sft", "brace-rl"
# a fine-tuned model's key (benchmark.finetune.store): how its prompt asks it is no part of it
FINETUNED = "finetuned"


def identity(default: Any = dataclasses.MISSING, *, outside: tuple[str, ...] = ()) -> Any:
    """A setting that shapes the results: in every identity but the schemes named in `outside`."""
    return _field(default, {"identity": True, "outside": tuple(outside)})


def execution(default: Any = dataclasses.MISSING) -> Any:
    """A setting of how the work is done, never of what it gives: in no identity."""
    return _field(default, {"identity": False})


def added(
    default: Any, *, old: Any, outside: tuple[str, ...] = (), kept_in: tuple[str, ...] = ()
) -> Any:
    """An identity setting added after results existed: at `old`, what those results computed,
    it stays out of the identity, so they keep theirs (any other value is other results). In the
    schemes of `kept_in`, whose results all came after it and held it, it stays in at `old` too."""
    meta = {"identity": True, "old": old, "outside": tuple(outside), "kept_in": tuple(kept_in)}
    return _field(default, meta)


def _field(default: Any, metadata: dict[str, Any]) -> Any:
    if isinstance(default, (dict, list, set)):  # a dataclass refuses a shared mutable default
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def declared(owner: Any) -> dict[str, Mapping[str, Any]]:
    """The fields of `owner` (a settings class or object) that declare a role, by name."""
    return {f.name: f.metadata for f in dataclasses.fields(owner) if "identity" in f.metadata}


def execution_keys(owner: Any) -> tuple[str, ...]:
    return tuple(k for k, meta in declared(owner).items() if not meta["identity"])


def old_values(owner: Any) -> dict[str, Any]:
    """The added fields at the value results had before them."""
    return {k: meta["old"] for k, meta in declared(owner).items() if "old" in meta}


def outside_keys(owner: Any, scheme: str) -> tuple[str, ...]:
    return tuple(k for k, meta in declared(owner).items() if scheme in meta.get("outside", ()))


def identity_of(owner: Any, values: Any = None, scheme: str = CELL) -> Any:
    """The identity of a settings object, or of the config section `values` that the settings
    class `owner` declares, in `scheme`: execution fields, fields outside the scheme and added
    fields at their old value are left out; the rest is kept, keys the owner does not declare
    included (what it does not know it cannot vouch for). Anything not a mapping as it is."""
    if values is None:
        values = {f.name: getattr(owner, f.name) for f in dataclasses.fields(owner)}
    if not isinstance(values, Mapping):
        return values
    roles = declared(owner)

    def kept(key: str, value: Any) -> bool:
        meta = roles.get(key)
        if meta is None:
            return True
        if not meta["identity"] or scheme in meta.get("outside", ()):
            return False
        if scheme in meta.get("kept_in", ()):
            return True
        return not ("old" in meta and value == meta["old"])

    return {k: v for k, v in values.items() if kept(k, v)}
