"""The actor-critic network with MC dropout (ASK / ASK+): dropout after every hidden activation of
the policy and value MLPs, and nowhere else, so that keeping it on at inference gives the
stochastic forward passes that `benchmark.uncertainty` turns into entropies.

`policy=ppo_cnn` (the feedback paper's RL baseline) puts `MinigridFeaturesExtractor` in front of
the same MLPs: a CNN over the 7x7x3 egocentric image instead of SB3's flatten.

`policy=ppo_lstm` (ASK+'s open question for HigherLower) is sb3-contrib's RecurrentPPO: an LSTM
in front of the same dropout MLPs, so dropout acts in the head only and the N MC samples of a
step share that step's recurrent state."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from hydra.utils import get_class
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from benchmark.envs.minigrid_nav import IMAGE_SCALE, VIEW

FLAT = "flat"  # SB3's flatten; every other `policy.extractor` is an env family's (extractors())
ALGORITHMS = ("ppo", "recurrent_ppo")
IMAGE_NORMALIZATIONS = ("sb3", "per_channel")
# where the dropout of each hidden layer sits: after its activation (the suite's and the paper
# protocol's) or between the Linear and its activation (the released code's DropoutMlpExtractor)
DROPOUT_PLACEMENTS = ("after_activation", "before_activation")
# the actor's last layer on a masked-command task: one logit per slot (a Linear over the latent,
# so slot i means "the i-th sorted command", whatever it is now) or each command scored from its
# own text (CommandScoringPolicy: a command keeps its meaning across steps)
HEADS = ("slots", "commands")


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

    @classmethod
    def config_kwargs(cls, cfg: dict[str, Any]) -> dict[str, Any]:
        """Its `features_extractor_kwargs` from a policy config (policy=ppo_cnn's keys)."""
        return {
            "features_dim": int(cfg.get("features_dim", 128)),
            "normalization": str(cfg.get("image_normalization", "sb3")),
        }

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
    if extractor != FLAT:
        found = extractors()
        if extractor not in found:
            raise ValueError(f"policy.extractor={extractor!r}: allowed {(FLAT, *found)}")
        extractor_cls = get_class(found[extractor])
        kwargs["features_extractor_class"] = extractor_cls
        config_kwargs = getattr(extractor_cls, "config_kwargs", None)
        kwargs["features_extractor_kwargs"] = config_kwargs(cfg) if config_kwargs else {}
    if algorithm(cfg) == "recurrent_ppo":
        kwargs["lstm_hidden_size"] = int(cfg["lstm_hidden_size"])
        kwargs["n_lstm_layers"] = int(cfg.get("n_lstm_layers", 1))
    return kwargs


def extractors() -> dict[str, str]:
    """The features extractors the env families provide (`Family.extractors`), by the
    `policy.extractor` value that selects one: "module.Class" of an SB3 BaseFeaturesExtractor
    whose classmethod `config_kwargs(policy config)` gives its constructor arguments (none
    without it). The first family to name one keeps it."""
    from benchmark.envs.family import available_families, get_family

    found: dict[str, str] = {}
    for name in available_families():
        for key, target in get_family(name).extractors.items():
            found.setdefault(key, target)
    return found


def algorithm(cfg: dict[str, Any]) -> str:
    """`ppo` (SB3 PPO, the MLP policies) or `recurrent_ppo` (sb3-contrib's RecurrentPPO); configs
    without the key are PPO, so their checkpoint hashes do not change."""
    name = cfg.get("algorithm", "ppo")
    if name not in ALGORITHMS:
        raise ValueError(f"policy.algorithm={name!r}: allowed {ALGORITHMS}")
    return name


def policy_head(cfg: dict[str, Any]) -> str:
    """`slots` (a Linear over the latent, one logit per action) or `commands` (on a masked-command
    task, CommandScoringPolicy); configs without the key are `slots`, so their checkpoint hashes
    do not change."""
    head = cfg.get("head", HEADS[0])
    if head not in HEADS:
        raise ValueError(f"policy.head={head!r}: allowed {HEADS}")
    return head


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
    # one (rollouts, training's log-probs, predict) keeps what its batch's head needs first
    def forward(self, obs, deterministic: bool = False):
        self._keep(obs)
        return super().forward(obs, deterministic)

    def evaluate_actions(self, obs, actions):
        self._keep(obs)
        return super().evaluate_actions(obs, actions)

    def get_distribution(self, obs):
        self._keep(obs)
        return super().get_distribution(obs)

    def _keep(self, obs: torch.Tensor) -> None:
        self._mask = self._obs_mask(obs)

    def _obs_mask(self, obs: torch.Tensor) -> torch.Tensor:
        return obs[..., -int(self.action_space.n) :] > 0.5

    def _logits(self, latent_pi: torch.Tensor) -> torch.Tensor:
        return self.action_net(latent_pi)

    def _get_action_dist_from_latent(self, latent_pi: torch.Tensor):
        logits = mask_logits(self._logits(latent_pi), self._mask)
        return self.action_dist.proba_distribution(action_logits=logits)


class CommandScorer(nn.Module):
    """Scores each command slot from the command's own features: logit_i = q(latent) . e(c_i)
    + w . e(c_i), e a Linear + Tanh embedding shared by every slot. A command's score depends on
    its text and the state, never on its slot, so it means the same at every step (the slot
    head's Linear gives slot i one weight row whatever command lies there)."""

    def __init__(self, latent_dim: int, command_dim: int, embed_dim: int) -> None:
        super().__init__()
        self.query = nn.Linear(latent_dim, embed_dim)
        self.embed = nn.Sequential(nn.Linear(command_dim, embed_dim), nn.Tanh())
        self.prior = nn.Linear(embed_dim, 1, bias=False)  # a command's score whatever the state

    def forward(self, latent: torch.Tensor, commands: torch.Tensor, n: int = 1) -> torch.Tensor:
        """(B * n, latent_dim) latents, `n` per observation (obs-major: MC dropout's rows), and
        the (B, K, command_dim) commands of the B observations -> (B * n, K) logits. Each
        observation's commands are embedded once, whatever n."""
        e = self.embed(commands)  # (B, K, d)
        q = self.query(latent).view(e.shape[0], n, -1)  # (B, n, d)
        logits = torch.einsum("bkd,bnd->bnk", e, q) + self.prior(e).transpose(1, 2)
        return logits.reshape(e.shape[0] * n, -1)


class CommandSetFeatures(BaseFeaturesExtractor):
    """What the command-scoring policy's MLPs read: the observation before its command slots,
    and the sum of the slots' command features (the mask is left out). A sum does not know which
    command lies in which slot, so the state's latent, and with it each command's score, stays
    the same when the commands change slots."""

    def __init__(self, observation_space: gym.spaces.Box, n: int, command_dim: int) -> None:
        self.head_dim = int(observation_space.shape[-1]) - n * (command_dim + 1)
        super().__init__(observation_space, self.head_dim + command_dim)
        self.n, self.command_dim = n, command_dim

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        x = observations.reshape(observations.shape[0], -1)
        commands = x[:, self.head_dim : -self.n].reshape(-1, self.n, self.command_dim)
        return torch.cat([x[:, : self.head_dim], commands.sum(1)], dim=1)


class CommandScoringPolicy(MaskedDropoutPolicy):
    """The masked dropout actor-critic with the command-scoring head (`policy.head=commands`):
    before the action mask, the observation holds `action_space.n` blocks of `command_dim`
    features, one per slot (a text game's hashed command words, envs.textworld.task); the actor
    scores each with CommandScorer over a latent that does not depend on the slots' order
    (CommandSetFeatures). The MC dropout sits where it always does, in the actor MLP before the
    head, so the gate's entropies are computed as for the slot head."""

    def __init__(self, *args: Any, command_dim: int, embed_dim: int = 64, **kwargs: Any) -> None:
        for key, value in (("command_dim", command_dim), ("embed_dim", embed_dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key}={value!r} is invalid: allowed an integer >= 1")
        if kwargs.get("features_extractor_class") not in (None, CommandSetFeatures):
            raise ValueError(
                "policy.head=commands reads the observation through its own features "
                f"(CommandSetFeatures), not {kwargs['features_extractor_class'].__name__}"
            )
        self.command_dim, self.embed_dim = command_dim, embed_dim
        action_space = args[1] if len(args) > 1 else kwargs["action_space"]
        kwargs["features_extractor_class"] = CommandSetFeatures
        kwargs["features_extractor_kwargs"] = {"n": int(action_space.n), "command_dim": command_dim}
        super().__init__(*args, **kwargs)

    def _build(self, lr_schedule) -> None:
        super()._build(lr_schedule)
        n = int(self.action_space.n)
        if self.observation_space.shape[-1] < n * (self.command_dim + 1):
            raise ValueError(
                f"observation of {self.observation_space.shape[-1]} entries cannot hold "
                f"{n} commands of {self.command_dim} features and their mask"
            )
        self.action_net = CommandScorer(
            self.mlp_extractor.latent_dim_pi, self.command_dim, self.embed_dim
        )
        if self.ortho_init:  # as SB3 treats its action_net: a near-uniform first policy
            self.action_net.embed.apply(partial(self.init_weights, gain=1.0))
            self.action_net.query.apply(partial(self.init_weights, gain=0.01))
            self.action_net.prior.apply(partial(self.init_weights, gain=0.01))
        # SB3's _build made the optimizer over the slot head's parameters
        self.optimizer = self.optimizer_class(
            self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs
        )

    def _keep(self, obs: torch.Tensor) -> None:
        super()._keep(obs)
        self._commands = self.obs_commands(obs)

    def obs_commands(self, obs: torch.Tensor) -> torch.Tensor:
        """(..., K, command_dim): each slot's command features, just before the mask."""
        n, c = int(self.action_space.n), self.command_dim
        block = obs[..., -(n + n * c) : -n]
        return block.reshape(*obs.shape[:-1], n, c)

    def _logits(self, latent_pi: torch.Tensor) -> torch.Tensor:
        return self.action_net(latent_pi, self._commands)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        for key in ("features_extractor_class", "features_extractor_kwargs"):
            data.pop(key, None)  # implied by the class (__init__ sets them)
        data.update(command_dim=self.command_dim, embed_dim=self.embed_dim)
        return data


def logits_head(policy: ActorCriticPolicy, obs: np.ndarray) -> Callable[..., torch.Tensor]:
    """The actor's last layer for a batch of observations, as `head(latent, n=1)`: latent rows,
    `n` per observation (obs-major, MC dropout's layout) -> logits. The slot head reads the
    latent alone; the command-scoring head scores each observation's own commands."""
    if not isinstance(policy, CommandScoringPolicy):
        return lambda latent, n=1: policy.action_net(latent)
    obs_t, _ = policy.obs_to_tensor(obs)
    commands = policy.obs_commands(obs_t)
    return lambda latent, n=1: policy.action_net(latent, commands, n)


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
