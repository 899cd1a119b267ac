"""The policy package's one error, in a module of its own so that the loaders of both checkpoint
formats (the SB3 zips of `checkpoints`, the safetensors of `portable`) raise it without importing
each other."""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A checkpoint is missing, corrupt or does not fit the task."""
