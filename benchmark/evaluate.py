"""The ASK loop. All episodes of a job advance in lockstep: per step, one batched policy +
MC-dropout call for the live episodes, the gate, prompts for the gated ones only, one batched
consultant call per consultation round, parse (inside the prompt session), override, env step.
`mode="sequential"` runs the same code one episode at a time (the reference path).
`run(on_step=...)` hears of every step (a `StepEvent`, before the env steps): the per-step records
of benchmark.analysis; it only reads, so episodes are the same with or without it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from benchmark.consultants.base import Consultant
from benchmark.envs.base import Episode, Task
from benchmark.gates import Gate
from benchmark.metrics import episode_rates
from benchmark.policy.network import actor_input, is_recurrent, split_states, stack_states
from benchmark.prompts.base import Decision, PromptVariant, consult_all
from benchmark.uncertainty import draw_masks, mc_dropout

MODES = ("lockstep", "sequential")
# Part of every cell's identity: bump it with any change here or in metrics.py, uncertainty.py or
# gates/ that changes episodes.jsonl for the same config, so no stale cell is reused.
EVALUATION_VERSION = 1


@dataclass
class StepEvent:
    """One step of one episode, as the loop decided it; `episode` is still in the state the
    action is taken in (the hook runs just before `episode.step(action)`)."""

    episode: Episode
    ppo_action: int | None  # None without a policy (SLM-only)
    uncertainty: tuple[float, float, float] | None  # (total, aleatoric, epistemic) bits, or None
    decision: Decision | None  # the consultation, None when the gate did not ask
    action: int  # the action taken
    # PPO's action probabilities (dropout off) where the gate computed the uncertainty, else None
    policy_probs: tuple[float, ...] | None = None


@dataclass
class Evaluator:
    """Everything one evaluation needs; `policy` is an SB3 policy (or None when the gate needs
    none), `consultant`/`prompt` are None for PPO-only."""

    task: Task
    gate: Gate
    policy: torch.nn.Module | None = None
    consultant: Consultant | None = None
    prompt: PromptVariant | None = None
    mc_samples: int = 50
    seed: int = 0
    # the MC-dropout estimator the gate's uncertainty comes from (the bench times the authors'
    # N-pass reference, uncertainty.mc_dropout_sequential, in its place: the same masks, the
    # same entropies)
    mc_dropout_fn: Callable[..., Any] = mc_dropout
    # gate.normalise: the entropies the gate compares (and the step records hold) divided by
    # log2 of the step's admissible actions, in [0, 1] (Uncertainty.normalised)
    normalise: bool = False

    def run(
        self,
        seeds: list[int],
        mode: str = "lockstep",
        progress: Any = None,
        on_step: Callable[[StepEvent], None] | None = None,
    ) -> list[dict]:
        """Evaluate `seeds`; returns one row per episode, in seed order. `progress` (a
        benchmark.progress.EvaluationProgress) hears of every step and finished episode;
        `on_step` gets a StepEvent for every step of every episode."""
        if mode not in MODES:
            raise ValueError(f"eval.mode={mode!r} is not one of {list(MODES)}")
        if self.gate.needs_policy and self.policy is None:
            raise ValueError(f"gate {self.gate.name!r} needs a PPO policy, none was given")
        one_at_a_time = mode == "sequential" or bool(
            getattr(self.prompt, "sequential_episodes", False)
        )
        batches = [[s] for s in seeds] if one_at_a_time else [list(seeds)]
        rows: list[dict] = []
        for batch in batches:
            rows += self._run_batch(batch, progress, on_step)
        return sorted(rows, key=lambda r: r["seed"])

    # -- one lockstep batch ------------------------------------------------------------------
    def _run_batch(
        self, seeds: list[int], progress: Any = None, on_step: Callable | None = None
    ) -> list[dict]:
        episodes = [self.task.episode(s) for s in seeds]
        asks = self.consultant is not None and self.prompt is not None
        sessions = [
            self.prompt.session(ep, self.consultant.needs_expert) if asks else None
            for ep in episodes
        ]
        # one dropout-mask stream per episode: masks never depend on who shares the batch
        streams = [MaskStream(self.seed * 1_000_003 + s) for s in seeds]
        # a recurrent policy's actor LSTM state per episode (None: not started, or no LSTM)
        memory: list = [None] * len(seeds)
        stats = [_new_row(s, self.gate.needs_policy) for s in seeds]
        start = [time.perf_counter()] * len(seeds)
        while live := [i for i, ep in enumerate(episodes) if not ep.done]:
            ppo, states = self._ppo_actions(
                [episodes[i] for i in live], [streams[i] for i in live], [memory[i] for i in live]
            )
            for i, state in zip(live, states, strict=True):
                memory[i] = state
            unc = ppo if not isinstance(ppo, list) else None
            ppo_actions = ppo if isinstance(ppo, list) else ppo.action.tolist()
            mask = self.gate.mask(unc, [seeds[i] for i in live], [episodes[i].steps for i in live])
            asked = [j for j, m in enumerate(mask) if m] if asks else []
            decisions = consult_all(
                [sessions[live[j]].consult(ppo_actions[j]) for j in asked],
                self.consultant.answer if asked else None,
            )
            by_j = dict(zip(asked, decisions, strict=False))
            for j, i in enumerate(live):
                action = self._final_action(ppo_actions[j], by_j.get(j), stats[i], episodes[i])
                if ppo_actions[j] is not None and action != ppo_actions[j]:
                    stats[i]["overwrites"] += 1
                if on_step is not None:
                    probs = None if unc is None else tuple(unc.policy_probs[j].tolist())
                    on_step(
                        StepEvent(
                            episodes[i], ppo_actions[j], _row(unc, j), by_j.get(j), action, probs
                        )
                    )
                episodes[i].step(action)
                if episodes[i].done:
                    stats[i]["wall_seconds"] = time.perf_counter() - start[i]
            if progress is not None:
                progress.step(len(live), len(asked))
                for i in live:
                    if episodes[i].done:
                        progress.episode(stats[i])
        rows = []
        for i, ep in enumerate(episodes):
            row = stats[i]
            row.update(reward=float(ep.total_reward), length=int(ep.steps), **ep.outcome())
            rows.append(episode_rates(row))
        return rows

    def _ppo_actions(self, episodes: list[Episode], streams: list[MaskStream], states: list):
        """Uncertainty (with the deterministic action) when the gate needs it, else plain
        actions; and each episode's next recurrent state (Nones without LSTM)."""
        n = len(episodes)
        if not self.gate.needs_policy:
            return [None] * n, [None] * n
        obs = np.stack([ep.obs for ep in episodes])
        state = stack_states(self.policy, states)
        if self.gate.needs_uncertainty:
            masks = episode_masks(self.policy, streams, self.mc_samples)
            unc = self.mc_dropout_fn(self.policy, obs, self.mc_samples, masks=masks, state=state)
            if self.normalise:
                unc = unc.normalised()
            return unc, split_states(unc.state, n)
        actions, state = policy_step(self.policy, obs, state)
        return actions.tolist(), split_states(state, n)

    def _final_action(
        self, ppo: int | None, decision: Decision | None, row: dict, ep: Episode
    ) -> int:
        """The one place where answers become actions and invalid answers are counted."""
        if decision is None:
            return int(ppo)
        for answer in decision.answers:
            row["prompt_tokens"] += answer.prompt_tokens
            row["generated_tokens"] += answer.generated_tokens
            row["consultant_seconds"] += answer.seconds
            row["cache_hits"] += int(answer.cached)
            row["calls"] += 1
        row["queries"] += int(decision.queried)
        if decision.action is not None:
            return int(decision.action)
        row["invalid"] += 1
        if ppo is not None:
            return int(ppo)  # ASK: keep the PPO action
        if decision.fallback is not None:  # the prompt's own (prompt.style=released)
            return int(decision.fallback)
        return fallback_action(self.seed, ep)


def _row(unc: Any, j: int) -> tuple[float, float, float] | None:
    """Row j's (total, aleatoric, epistemic) entropies, None when the gate computed none."""
    if unc is None:
        return None
    return (float(unc.total[j]), float(unc.aleatoric[j]), float(unc.epistemic[j]))


def deterministic_actions(policy, obs: np.ndarray) -> np.ndarray:
    """PPO's greedy actions with dropout off (a recurrent policy from the episodes' start)."""
    return policy_step(policy, obs)[0]


def policy_step(policy, obs: np.ndarray, state: tuple | None = None) -> tuple[np.ndarray, Any]:
    """PPO's greedy actions with dropout off, and a recurrent policy's next actor LSTM state
    (None for an MLP policy)."""
    policy.set_training_mode(False)
    with torch.inference_mode():
        if not is_recurrent(policy):
            obs_t, _ = policy.obs_to_tensor(obs)
            actions = policy._predict(obs_t, deterministic=True)
        else:
            x, state = actor_input(policy, obs, state)
            actions = policy.action_net(policy.mlp_extractor.forward_actor(x)).argmax(-1)
        return actions.cpu().numpy().astype(np.int64), state


class MaskStream:
    """One episode's own stream of dropout masks, so its uncertainty never depends on which
    other episodes share the batch (lockstep == sequential). Masks are drawn `chunk` steps at a
    time: one generator call per episode every `chunk` steps instead of every step."""

    def __init__(self, seed: int, chunk: int = 8):
        self.generator = torch.Generator().manual_seed(seed)
        self.chunk, self.buffer, self.used = chunk, None, chunk

    def next(self, policy, n_samples: int) -> list[torch.Tensor]:
        if self.used >= self.chunk:
            self.buffer = draw_masks(policy, self.chunk, n_samples, self.generator)
            self.used = 0
        self.used += 1
        return [m[self.used - 1 : self.used] for m in self.buffer]


def episode_masks(policy, streams: list[MaskStream], n_samples: int) -> list[torch.Tensor]:
    """The next step's masks of every live episode, stacked for one batched forward."""
    per_episode = [s.next(policy, n_samples) for s in streams]
    return [torch.cat(layer) for layer in zip(*per_episode, strict=True)]


def fallback_action(seed: int, ep: Episode) -> int:
    """SLM-only with an invalid answer: a uniformly random valid action, seeded by
    (seed, episode seed, step), counted as invalid. Documented in docs/metrics.md."""
    rng = np.random.default_rng([seed, ep.seed, ep.steps, 7])
    return int(rng.integers(len(ep.action_names)))


def _new_row(seed: int, has_policy: bool) -> dict:
    return {
        "seed": seed,
        "queries": 0,
        "calls": 0,
        "overwrites": 0 if has_policy else None,
        "invalid": 0,
        "prompt_tokens": 0,
        "generated_tokens": 0,
        "consultant_seconds": 0.0,
        "cache_hits": 0,
    }
