"""MC-dropout uncertainty of a PPO policy's action distribution (ASK / ASK+ gate signal).

N stochastic passes through the actor MLP with dropout on give N categorical distributions per
observation. A policy that masks actions (policy.network.MaskedDropoutPolicy: a text game's
commands) masks every pass the same way, so the entropies count only the allowed actions. In bits: total = H(mean_n p_n) (the ASK+ gate signal), aleatoric = mean_n H(p_n),
epistemic = total - aleatoric (the mutual information between action and dropout mask).

The fast path is one batched forward: the layers before the first dropout run once per
observation, then each row is widened to N rows (B x N in all) and the rest of the actor runs
once. Masks are drawn by one helper in one fixed order, so the batched path and the N-pass
reference (`mc_dropout_sequential`) see identical masks for the same generator state and agree
up to float rounding.

A recurrent policy (`policy=ppo_lstm`) takes and returns the actor LSTM's state: the LSTM steps
once per observation, dropout acts in the MLP head after it, so the N samples share the state."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticPolicy
from torch import nn

from benchmark.policy.network import (
    action_mask,
    actor_input,
    initial_state,
    logits_head,
    mask_logits,
)

LN2 = math.log(2.0)


@dataclass
class Uncertainty:
    """Per-observation results, all arrays of shape (B,); entropies in bits."""

    action: np.ndarray  # deterministic PPO action (dropout off), int64
    total: np.ndarray  # entropy of the mean action distribution over the N passes
    aleatoric: np.ndarray  # mean of the per-pass entropies
    epistemic: np.ndarray  # total - aleatoric (mutual information), >= 0
    state: tuple | None = None  # a recurrent policy's next actor LSTM (hidden, cell), else None
    # (B, A) the action probabilities of the dropout-off pass, the distribution PPO's greedy
    # `action` is the argmax of (a learned gate's `policy_probs` feature)
    policy_probs: np.ndarray | None = None
    # (B,) how many actions the entropies count (a masked policy's admissible ones, else |A|)
    n_allowed: np.ndarray | None = None

    def normalised(self) -> Uncertainty:
        """The entropies divided by log2 of the actions each row counts (`gate.normalise`): the
        largest entropy over n actions is log2(n) bits, so every value lies in [0, 1] and one
        tau means the same in a state of 2 admissible commands as in one of 48. A row with one
        action has no uncertainty: 0."""
        if self.n_allowed is None:
            raise ValueError("normalised() needs n_allowed (the MC-dropout paths fill it in)")
        ceiling = np.log2(np.maximum(self.n_allowed, 1)).astype(np.float64)
        scale = np.divide(1.0, ceiling, out=np.zeros_like(ceiling), where=ceiling > 0)
        # float rounding can put a maximal entropy a hair above log2(n): clip to the ceiling
        parts = (np.clip(x * scale, 0.0, 1.0).astype(x.dtype) for x in self.entropies())
        total, aleatoric, epistemic = parts
        return replace(self, total=total, aleatoric=aleatoric, epistemic=epistemic)

    def entropies(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.total, self.aleatoric, self.epistemic


def _policy(policy: object) -> ActorCriticPolicy:
    """Accept a PPO model or its policy."""
    pol = getattr(policy, "policy", policy)
    if not isinstance(pol, ActorCriticPolicy):
        raise TypeError(f"expected an SB3 PPO model or ActorCriticPolicy, got {type(policy)!r}")
    if not isinstance(pol.action_space, spaces.Discrete):
        raise ValueError(
            f"MC-dropout entropy needs a Discrete action space, got {pol.action_space!r}"
        )
    return pol


def _check_n(n_samples: int) -> int:
    if isinstance(n_samples, bool) or not isinstance(n_samples, int | np.integer) or n_samples < 1:
        raise ValueError(f"n_samples={n_samples!r} must be an integer >= 1")
    return int(n_samples)


def _dropout_modules(pol: ActorCriticPolicy) -> list[nn.Dropout]:
    layers = [m for m in pol.mlp_extractor.policy_net if isinstance(m, nn.Dropout)]
    if not layers:
        raise ValueError(
            "the policy has no nn.Dropout in mlp_extractor.policy_net, so MC dropout has nothing "
            "to sample: train it with benchmark.policy.network.DropoutActorCriticPolicy"
        )
    return layers


def _widths(pol: ActorCriticPolicy) -> list[int]:
    """Width of the activation entering each dropout layer of the actor, in forward order."""
    widths, width = [], getattr(pol, "lstm_output_dim", pol.features_dim)
    for m in pol.mlp_extractor.policy_net:
        if isinstance(m, nn.Linear):
            width = m.out_features
        elif isinstance(m, nn.Dropout):
            widths.append(width)
    return widths


def draw_masks(
    policy: object,
    n_obs: int,
    n_samples: int,
    generator: torch.Generator | None = None,
) -> list[torch.Tensor]:
    """Scaled dropout masks, one (n_obs, n_samples, width) float tensor per actor dropout layer.

    Entries are 0 or 1/(1-p), what nn.Dropout multiplies by in train mode. Both MC paths draw
    through here, in this order, so equal generator states give equal masks. Speed: one 64-bit
    random draw yields four 16-bit uniforms, so a unit is dropped with probability
    round(p * 65536) / 65536 (within 8e-6 of p); torch's Bernoulli sampler is ~5x slower."""
    pol = _policy(policy)
    n_samples = _check_n(n_samples)
    device = pol.device
    masks = []
    for layer, width in zip(_dropout_modules(pol), _widths(pol), strict=True):
        shape = (n_obs, n_samples, width)
        drop_levels = round(float(layer.p) * 65536)
        if drop_levels == 0:
            masks.append(torch.ones(shape, device=device))
            continue
        numel = n_obs * n_samples * width
        bits = torch.empty((numel + 3) // 4, dtype=torch.int64, device=device)
        bits.random_(-(2**63), None, generator=generator)  # full 64-bit range
        u16 = bits.view(torch.int16)[:numel].view(shape).to(torch.float32)
        # keep iff u16 >= threshold; u16 - (threshold - 1) is >= 1 when kept, <= 0 when dropped
        threshold = -32768 + drop_levels
        mask = u16.sub_(threshold - 1).clamp_(0.0, 1.0)
        masks.append(mask.mul_(65536 / (65536 - drop_levels)))
    return masks


def _inputs(pol, obs, n, generator, masks, state) -> tuple:
    """The actor head's input for the B observations, the next recurrent state, and the masks
    both MC paths use (drawn if not given)."""
    x, state = actor_input(pol, obs, state)
    b = x.shape[0]
    if masks is None:
        masks = draw_masks(pol, b, n, generator)
    _check_masks(masks, _widths(pol), b, n)
    return x, b, masks, state


def _entropies(logits: torch.Tensor, n_obs: int, n_samples: int) -> tuple[torch.Tensor, ...]:
    """(total, aleatoric, epistemic) in bits from (n_obs * n_samples, A) logits, obs-major."""
    logp = torch.log_softmax(logits.float(), dim=-1).view(n_obs, n_samples, -1)
    p = logp.exp()
    aleatoric = -(p * logp).sum(-1).mean(1) / LN2
    total = torch.special.entr(p.mean(1)).sum(-1) / LN2
    epistemic = (total - aleatoric).clamp_min_(0.0)
    return total, aleatoric, epistemic


def _to_result(
    action: torch.Tensor,
    ent: tuple[torch.Tensor, ...],
    state,
    logits: torch.Tensor,
    allowed: torch.Tensor | None,
) -> Uncertainty:
    """`logits`: the dropout-off pass's, (B, A); `allowed`: the (B, A) action mask or None."""
    total, aleatoric, epistemic = (t.cpu().numpy() for t in ent)
    probs = torch.softmax(logits.float(), dim=-1).cpu().numpy()
    action = action.cpu().numpy().astype(np.int64)
    if allowed is None:
        n_allowed = np.full(len(action), probs.shape[-1], dtype=np.int64)
    else:
        n_allowed = allowed.sum(-1).cpu().numpy().astype(np.int64)
    return Uncertainty(action, total, aleatoric, epistemic, state, probs, n_allowed)


def _mc_method(passes):
    """The public signature, input checks and result of an MC path, written once for both:
    `passes(pol, obs, x, b, n, masks, state, allowed)` returns the PPO action (B,), the
    sampled passes' logits (B x N obs-major rows) and the dropout-off logits (B, A), masked by
    `allowed`; `state` is the recurrent state before the step (None: episode start)."""

    def method(
        policy: object,
        obs: np.ndarray,
        n_samples: int,
        generator: torch.Generator | None = None,
        masks: list[torch.Tensor] | None = None,
        state: tuple | None = None,
    ) -> Uncertainty:
        pol = _policy(policy)
        n = _check_n(n_samples)
        with torch.inference_mode():
            x, b, masks, next_state = _inputs(pol, obs, n, generator, masks, state)
            allowed = action_mask(pol, obs)  # None: every action counts
            action, mc, logits = passes(pol, obs, x, b, n, masks, state, allowed)
            ent = _entropies(mask_logits(mc, _per_sample(allowed, n)), b, n)
        return _to_result(action, ent, next_state, logits, allowed)

    method.__name__, method.__qualname__ = passes.__name__, passes.__qualname__
    method.__doc__ = passes.__doc__
    return method


@_mc_method
def mc_dropout(pol, obs, x, b, n, masks, state, allowed):
    """Batched MC dropout: one forward of B x N rows for the sampled passes (the layers before
    the first dropout run on the B rows only) plus the dropout-off pass for the PPO action.
    `state`: a recurrent policy's actor LSTM state before this step (None: episode start).

    `masks` (from `draw_masks`) injects the dropout masks; otherwise they are drawn from
    `generator` (torch's default generator when None). Module train/eval modes are not touched:
    dropout is applied here with explicit masks, which is what nn.Dropout does in train mode."""
    det, mc, k = x, None, 0
    for layer in pol.mlp_extractor.policy_net:
        if isinstance(layer, nn.Dropout):
            m = masks[k]
            k += 1
            if mc is None:  # widen B -> B x N rows at the first dropout
                mc = (det.unsqueeze(1) * m).reshape(b * n, -1)
            else:
                mc = mc * m.reshape(b * n, -1)
        elif mc is None:
            det = layer(det)
        else:
            det, mc = layer(det), layer(mc)
    head = logits_head(pol, obs)
    logits = mask_logits(head(det), allowed)
    return logits.argmax(-1), head(mc, n), logits


def _per_sample(mask: torch.Tensor | None, n: int) -> torch.Tensor | None:
    """A (B, A) action mask for the B x N obs-major rows of the MC passes."""
    return None if mask is None else mask.repeat_interleave(n, dim=0)


@_mc_method
def mc_dropout_sequential(pol, obs, x, b, n, masks, state, allowed):
    """Reference: N separate passes over the B observations through the real SB3 modules
    (nn.Dropout outputs replaced by input x mask via forward hooks), and the PPO action from
    `policy.predict(deterministic=True)` (with the recurrent state, for a recurrent policy).
    Same masks as `mc_dropout` for the same generator."""
    layers = _dropout_modules(pol)
    head = logits_head(pol, obs)
    logits = []
    for i in range(n):
        hooks = [
            layer.register_forward_hook(lambda _m, inp, _out, mask=mask[:, i]: inp[0] * mask)
            for layer, mask in zip(layers, masks, strict=True)
        ]
        try:
            logits.append(head(pol.mlp_extractor.forward_actor(x)))
        finally:
            for h in hooks:
                h.remove()
    stacked = torch.stack(logits, dim=1).reshape(b * n, -1)  # obs-major, as in the batched path
    was_training = pol.training
    pol.set_training_mode(False)
    try:
        if state is None:
            state = initial_state(pol, b)
        as_numpy = None if state is None else tuple(s.detach().cpu().numpy() for s in state)
        action, _ = pol.predict(obs, state=as_numpy, deterministic=True)
        # the dropout-off distribution (eval mode: no dropout)
        det = mask_logits(head(pol.mlp_extractor.forward_actor(x)), allowed)
    finally:
        pol.set_training_mode(was_training)
    return torch.as_tensor(np.asarray(action).reshape(b)), stacked, det


def _check_masks(masks: list[torch.Tensor], widths: list[int], b: int, n: int) -> None:
    want = [(b, n, w) for w in widths]
    got = [tuple(m.shape) for m in masks]
    if got != want:
        raise ValueError(f"masks must have shapes {want} (one per actor dropout layer), got {got}")
