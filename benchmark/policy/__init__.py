"""Dropout actor-critic PPO: network, training with reward-threshold checkpoints, loading."""

from benchmark.policy.checkpoints import CheckpointError, ensure, load
from benchmark.policy.network import DropoutActorCriticPolicy
from benchmark.policy.train import train

__all__ = ["CheckpointError", "DropoutActorCriticPolicy", "ensure", "load", "train"]
