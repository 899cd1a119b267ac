"""The actor-critic network with MC dropout (ASK / ASK+): dropout after every hidden activation of
the policy and value MLPs, and nowhere else, so that keeping it on at inference gives the
stochastic forward passes that `benchmark.uncertainty` turns into entropies."""

from __future__ import annotations

from typing import Any

import torch
from stable_baselines3.common.policies import ActorCriticPolicy
from torch import nn


class DropoutMlpExtractor(nn.Module):
    """SB3's MlpExtractor with `nn.Dropout(p)` after each hidden activation.

    Same attribute names (`policy_net`, `value_net`, `latent_dim_pi`, `latent_dim_vf`) so every
    SB3 code path that touches the extractor keeps working."""

    def __init__(
        self,
        feature_dim: int,
        net_arch: list[int] | dict[str, list[int]],
        activation_fn: type[nn.Module],
        dropout: float,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__()
        if isinstance(net_arch, dict):
            pi_dims, vf_dims = list(net_arch.get("pi", [])), list(net_arch.get("vf", []))
        else:
            pi_dims = vf_dims = list(net_arch)
        self.policy_net = _mlp(feature_dim, pi_dims, activation_fn, dropout).to(device)
        self.value_net = _mlp(feature_dim, vf_dims, activation_fn, dropout).to(device)
        self.latent_dim_pi = pi_dims[-1] if pi_dims else feature_dim
        self.latent_dim_vf = vf_dims[-1] if vf_dims else feature_dim

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy_net(features), self.value_net(features)

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        return self.policy_net(features)

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        return self.value_net(features)


def _mlp(in_dim: int, dims: list[int], activation_fn: type[nn.Module], p: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for dim in dims:
        layers += [nn.Linear(in_dim, dim), activation_fn(), nn.Dropout(p)]
        in_dim = dim
    return nn.Sequential(*layers)


class DropoutActorCriticPolicy(ActorCriticPolicy):
    """SB3 ActorCriticPolicy whose MLP extractor carries MC dropout with probability `dropout`.

    `dropout` is part of the constructor parameters, so PPO.save / PPO.load rebuild the same
    network. SB3 switches dropout on for gradient updates and off for rollouts and `predict`."""

    def __init__(self, *args: Any, dropout: float = 0.2, **kwargs: Any) -> None:
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"dropout={dropout!r} must be in [0, 1)")
        self.dropout = float(dropout)
        super().__init__(*args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = DropoutMlpExtractor(
            self.features_dim,
            net_arch=self.net_arch,
            activation_fn=self.activation_fn,
            dropout=self.dropout,
            device=self.device,
        )

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data["dropout"] = self.dropout
        return data


def dropout_layers(policy: ActorCriticPolicy) -> list[nn.Dropout]:
    """The dropout layers of the actor MLP, in forward order (those MC dropout samples)."""
    return [m for m in policy.mlp_extractor.policy_net if isinstance(m, nn.Dropout)]
