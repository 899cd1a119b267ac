"""The actor-critic network with MC dropout (ASK / ASK+): dropout after every hidden activation of
the policy and value MLPs, and nowhere else, so that keeping it on at inference gives the
stochastic forward passes that `benchmark.uncertainty` turns into entropies.

`policy=ppo_cnn` (the feedback paper's RL baseline) puts `MinigridFeaturesExtractor` in front of
the same MLPs: a CNN over the 7x7x3 egocentric image instead of SB3's flatten.

`policy=ppo_lstm` (ASK+'s open question for HigherLower) is sb3-contrib's RecurrentPPO: an LSTM
in front of the same dropout MLPs, so dropout acts in the head only and the N MC samples of a
step share that step's recurrent state."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from benchmark.envs.minigrid_nav import IMAGE_SCALE, VIEW

EXTRACTORS = ("flat", "minigrid_cnn")
ALGORITHMS = ("ppo", "recurrent_ppo")
IMAGE_NORMALIZATIONS = ("sb3", "per_channel")
# where the dropout of each hidden layer sits: after its activation (the suite's and the paper
# protocol's) or between the Linear and its activation (the released code's DropoutMlpExtractor)
DROPOUT_PLACEMENTS = ("after_activation", "before_activation")


class RawImageScale(BaseFeaturesExtractor):
    """SB3's flatten for the flat MiniGrid image, fed to the MLP as the raw MiniGrid indices
    divided by `divisor` in every channel: the released code's observation (its FourRooms and
    DoorKey wrappers divide the uint8 image by 10), rebuilt exactly from the suite's per-channel
    scaled observation, so one task serves both. In the network, not the env: a checkpoint
    carries its own input scaling (policy_kwargs), and the policy digest names it."""

    def __init__(self, observation_space: gym.spaces.Box, divisor: float = 10.0) -> None:
        n = int(np.prod(observation_space.shape))
        if n != VIEW * VIEW * len(IMAGE_SCALE):
            raise ValueError(
                f"policy.image_scale needs the flat {VIEW}x{VIEW}x{len(IMAGE_SCALE)} MiniGrid "
                f"image, got observation shape {observation_space.shape}: set it to null"
            )
        super().__init__(observation_space, n)
        self.divisor = float(divisor)
        scale = torch.as_tensor(IMAGE_SCALE, dtype=torch.float32)
        self.register_buffer("scale", scale, persistent=False)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        x = observations.reshape(observations.shape[0], -1, len(IMAGE_SCALE))
        raw = torch.round(x * self.scale)  # the MiniGrid indices, exactly
        return (raw / self.divisor).reshape(observations.shape[0], -1)


class MinigridFeaturesExtractor(BaseFeaturesExtractor):
    """The MiniGrid docs' CNN that the feedback paper used (Appendix B): Conv2d 16 -> 32 -> 64
    with 2x2 kernels and ReLU, flattened, then Linear -> `features_dim` and ReLU.

    It reads the suite's flat observation (the 7x7x3 image in (view x, view y, channel) order,
    each channel divided by its largest index) and rebuilds the channels-first image SB3's
    VecTransposeImage would give, (3, x, y). `normalization`: 'sb3' feeds the raw MiniGrid
    indices divided by 255, what CnnPolicy's normalize_images does to MiniGrid's uint8 image (the
    paper's input); 'per_channel' keeps the suite's [0, 1] per-channel scaling."""

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        features_dim: int = 128,
        normalization: str = "sb3",
    ) -> None:
        n = int(np.prod(observation_space.shape))
        if n != VIEW * VIEW * len(IMAGE_SCALE):
            raise ValueError(
                f"minigrid_cnn needs the flat {VIEW}x{VIEW}x{len(IMAGE_SCALE)} MiniGrid image, "
                f"got observation shape {observation_space.shape}"
            )
        if normalization not in IMAGE_NORMALIZATIONS:
            raise ValueError(f"normalization={normalization!r}: allowed {IMAGE_NORMALIZATIONS}")
        super().__init__(observation_space, features_dim)
        self.normalization = normalization
        scale = IMAGE_SCALE / 255.0 if normalization == "sb3" else np.ones_like(IMAGE_SCALE)
        self.register_buffer("scale", torch.as_tensor(scale, dtype=torch.float32).view(1, 3, 1, 1))
        self.cnn = nn.Sequential(
            nn.Conv2d(len(IMAGE_SCALE), 16, (2, 2)),
            nn.ReLU(),
            nn.Conv2d(16, 32, (2, 2)),
            nn.ReLU(),
            nn.Conv2d(32, 64, (2, 2)),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n_flatten = self.cnn(torch.zeros(1, len(IMAGE_SCALE), VIEW, VIEW)).shape[1]
        self.linear = nn.Sequential(nn.Linear(n_flatten, features_dim), nn.ReLU())

    def image(self, observations: torch.Tensor) -> torch.Tensor:
        """(B, 147) flat observations -> (B, 3, 7, 7) channels-first, normalized."""
        x = observations.reshape(-1, VIEW, VIEW, len(IMAGE_SCALE)).permute(0, 3, 1, 2)
        return x * self.scale

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.linear(self.cnn(self.image(observations)))


def policy_kwargs(cfg: dict[str, Any]) -> dict[str, Any]:
    """SB3 `policy_kwargs` for DropoutActorCriticPolicy from a policy config: `net_arch`,
    `dropout` and, with `extractor: minigrid_cnn`, the CNN features extractor (`features_dim`,
    `image_normalization`). Configs without `extractor` (ppo_dropout) get SB3's flatten."""
    kwargs: dict[str, Any] = {"net_arch": cfg["net_arch"], "dropout": float(cfg["dropout"])}
    placement = cfg.get("dropout_placement", DROPOUT_PLACEMENTS[0])
    if placement not in DROPOUT_PLACEMENTS:
        raise ValueError(f"policy.dropout_placement={placement!r}: allowed {DROPOUT_PLACEMENTS}")
    if placement != DROPOUT_PLACEMENTS[0]:  # the default stays out: checkpoints keep their digest
        kwargs["dropout_placement"] = placement
    extractor = cfg.get("extractor", "flat")
    image_scale = cfg.get("image_scale")
    if image_scale is not None:
        if extractor != "flat" or isinstance(image_scale, bool) or not image_scale > 0:
            raise ValueError(
                f"policy.image_scale={image_scale!r}: a number > 0 with the flat extractor, or null"
            )
        kwargs["features_extractor_class"] = RawImageScale
        kwargs["features_extractor_kwargs"] = {"divisor": float(image_scale)}
    if extractor not in EXTRACTORS:
        raise ValueError(f"policy.extractor={extractor!r}: allowed {EXTRACTORS}")
    if extractor == "minigrid_cnn":
        kwargs["features_extractor_class"] = MinigridFeaturesExtractor
        kwargs["features_extractor_kwargs"] = {
            "features_dim": int(cfg.get("features_dim", 128)),
            "normalization": str(cfg.get("image_normalization", "sb3")),
        }
    if algorithm(cfg) == "recurrent_ppo":
        kwargs["lstm_hidden_size"] = int(cfg["lstm_hidden_size"])
        kwargs["n_lstm_layers"] = int(cfg.get("n_lstm_layers", 1))
    return kwargs


def algorithm(cfg: dict[str, Any]) -> str:
    """`ppo` (SB3 PPO, the MLP policies) or `recurrent_ppo` (sb3-contrib's RecurrentPPO); configs
    without the key are PPO, so their checkpoint hashes do not change."""
    name = cfg.get("algorithm", "ppo")
    if name not in ALGORITHMS:
        raise ValueError(f"policy.algorithm={name!r}: allowed {ALGORITHMS}")
    return name


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
        placement: str = "after_activation",
    ) -> None:
        super().__init__()
        if isinstance(net_arch, dict):
            pi_dims, vf_dims = list(net_arch.get("pi", [])), list(net_arch.get("vf", []))
        else:
            pi_dims = vf_dims = list(net_arch)
        mlp = (feature_dim, activation_fn, dropout, placement)
        self.policy_net = _mlp(pi_dims, *mlp).to(device)
        self.value_net = _mlp(vf_dims, *mlp).to(device)
        self.latent_dim_pi = pi_dims[-1] if pi_dims else feature_dim
        self.latent_dim_vf = vf_dims[-1] if vf_dims else feature_dim

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy_net(features), self.value_net(features)

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        return self.policy_net(features)

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        return self.value_net(features)


def _mlp(
    dims: list[int], in_dim: int, activation_fn: type[nn.Module], p: float, placement: str
) -> nn.Sequential:
    """Linear, activation, dropout per hidden layer; `before_activation`: Linear, dropout,
    activation. The Linears keep their indices (0, 3, ...) either way, so weights load across."""
    layers: list[nn.Module] = []
    for dim in dims:
        pair = [activation_fn(), nn.Dropout(p)]
        layers += [
            nn.Linear(in_dim, dim),
            *(pair if placement == "after_activation" else pair[::-1]),
        ]
        in_dim = dim
    return nn.Sequential(*layers)


class MCDropoutHead:
    """Mixin for an SB3 actor-critic policy: its MLP extractor (the heads after the features, or
    after the LSTMs) carries MC dropout with probability `dropout`.

    `dropout` is part of the constructor parameters, so save / load rebuild the same network.
    SB3 switches dropout on for gradient updates and off for rollouts and `predict`."""

    def __init__(
        self,
        *args: Any,
        dropout: float = 0.2,
        dropout_placement: str = DROPOUT_PLACEMENTS[0],
        **kwargs: Any,
    ) -> None:
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"dropout={dropout!r} must be in [0, 1)")
        if dropout_placement not in DROPOUT_PLACEMENTS:
            raise ValueError(
                f"dropout_placement={dropout_placement!r}: allowed {DROPOUT_PLACEMENTS}"
            )
        self.dropout = float(dropout)
        self.dropout_placement = dropout_placement
        super().__init__(*args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = DropoutMlpExtractor(
            getattr(self, "lstm_output_dim", self.features_dim),
            net_arch=self.net_arch,
            activation_fn=self.activation_fn,
            dropout=self.dropout,
            device=self.device,
            placement=self.dropout_placement,
        )

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data["dropout"] = self.dropout
        if self.dropout_placement != DROPOUT_PLACEMENTS[0]:
            data["dropout_placement"] = self.dropout_placement
        return data


class DropoutActorCriticPolicy(MCDropoutHead, ActorCriticPolicy):
    """SB3 ActorCriticPolicy with MC dropout in its actor and critic MLPs (ASK / ASK+)."""


# The logit of a masked action: finite, so log-softmax and the entropies stay free of inf * 0.
MASKED_LOGIT = -1e9


class MaskedDropoutPolicy(DropoutActorCriticPolicy):
    """The dropout actor-critic for a task whose valid actions change from step to step (a text
    game's commands, `Task.masks_actions`): the last `action_space.n` entries of every
    observation are the action mask (1: allowed), and a masked action's logit is MASKED_LOGIT,
    so PPO never samples one, in training or evaluation. The MC-dropout entropies mask the same
    way (`action_mask`), so the gate counts only the allowed actions."""

    # SB3 builds the action distribution from the latent alone: each entry point that builds
    # one (rollouts, training's log-probs, predict) keeps its batch's mask for it first
    def forward(self, obs, deterministic: bool = False):
        self._mask = self._obs_mask(obs)
        return super().forward(obs, deterministic)

    def evaluate_actions(self, obs, actions):
        self._mask = self._obs_mask(obs)
        return super().evaluate_actions(obs, actions)

    def get_distribution(self, obs):
        self._mask = self._obs_mask(obs)
        return super().get_distribution(obs)

    def _obs_mask(self, obs: torch.Tensor) -> torch.Tensor:
        return obs[..., -int(self.action_space.n) :] > 0.5

    def _get_action_dist_from_latent(self, latent_pi: torch.Tensor):
        logits = mask_logits(self.action_net(latent_pi), self._mask)
        return self.action_dist.proba_distribution(action_logits=logits)


def action_mask(policy: ActorCriticPolicy, obs: np.ndarray) -> torch.Tensor | None:
    """The (B, A) boolean mask of allowed actions of a MaskedDropoutPolicy's observations;
    None for any other policy (every action allowed)."""
    if not isinstance(policy, MaskedDropoutPolicy):
        return None
    obs_t, _ = policy.obs_to_tensor(obs)
    return policy._obs_mask(obs_t)


def mask_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """`logits` with the masked actions' set to MASKED_LOGIT (unchanged when `mask` is None)."""
    return logits if mask is None else logits.masked_fill(~mask, MASKED_LOGIT)


class RecurrentDropoutPolicy(MCDropoutHead, RecurrentActorCriticPolicy):
    """sb3-contrib's recurrent actor-critic with the MC-dropout MLP heads after its LSTMs.

    Dropout sits in the heads only: the LSTM's state is a deterministic function of the episode's
    observations, and the N dropout samples of a step all read the same state."""


def is_recurrent(policy: ActorCriticPolicy) -> bool:
    return isinstance(policy, RecurrentActorCriticPolicy)


def initial_state(policy: ActorCriticPolicy, n: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The actor LSTM's (hidden, cell) state at the start of `n` episodes; None without LSTM."""
    if not is_recurrent(policy):
        return None
    layers, _, hidden = policy.lstm_hidden_state_shape
    zeros = torch.zeros((layers, n, hidden), device=policy.device)
    return zeros, zeros.clone()


def actor_input(
    policy: ActorCriticPolicy, obs: np.ndarray, state: tuple | None = None
) -> tuple[torch.Tensor, tuple | None]:
    """What enters the actor's MLP head for a batch of observations, and the next recurrent
    state: the features for an MLP policy (state stays None); the actor LSTM's output after one
    step from `state` (zeros when None: the episodes' first step) for a recurrent one."""
    obs_t, _ = policy.obs_to_tensor(obs)
    features = policy.extract_features(obs_t, policy.pi_features_extractor)
    if not is_recurrent(policy):
        return features, None
    if state is None:
        state = initial_state(policy, features.shape[0])
    starts = torch.zeros(features.shape[0], device=features.device)
    return policy._process_sequence(features, state, starts, policy.lstm_actor)


def dropout_layers(policy: ActorCriticPolicy) -> list[nn.Dropout]:
    """The dropout layers of the actor MLP, in forward order (those MC dropout samples)."""
    return [m for m in policy.mlp_extractor.policy_net if isinstance(m, nn.Dropout)]


def stack_states(policy: ActorCriticPolicy, states: list) -> tuple | None:
    """One batch state from per-episode states (None entries: the episode's first step)."""
    if not is_recurrent(policy):
        return None
    parts = [s if s is not None else initial_state(policy, 1) for s in states]
    return tuple(torch.cat(layer, dim=1) for layer in zip(*parts, strict=True))


def split_states(state: tuple | None, n: int) -> list:
    """Per-episode states from a batch state (a list of n Nones without LSTM)."""
    if state is None:
        return [None] * n
    return [tuple(s[:, i : i + 1] for s in state) for i in range(n)]
