"""The evaluation loop's own choices, with a real untrained dropout PPO (conftest `untrained`):
the batches it runs episodes in, PPO's greedy action, and each episode's dropout-mask stream."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from benchmark.evaluate import (
    Evaluator,
    MaskStream,
    deterministic_actions,
    episode_masks,
    policy_step,
)
from benchmark.gates import NeverGate
from benchmark.results import split_runtime
from benchmark.uncertainty import draw_masks


class Progress:
    """What benchmark.progress.EvaluationProgress hears: steps and finished episodes."""

    def __init__(self) -> None:
        self.decisions, self.queries, self.episodes = 0, 0, []

    def step(self, decisions: int, queries: int) -> None:
        self.decisions += decisions
        self.queries += queries

    def episode(self, row: dict) -> None:
        self.episodes.append(row["seed"])


def test_lockstep_runs_one_batch_sequential_one_episode_at_a_time(untrained, monkeypatch):
    """Both give the same rows in seed order; a prompt that carries memory across episodes
    runs them one at a time whatever the mode; a bad mode or a missing policy fails first."""
    task, model, _ = untrained
    ev = Evaluator(task=task, gate=NeverGate(), policy=model.policy)
    batches: list[list[int]] = []
    real = Evaluator._run_batch

    def spy(self, seeds, *args):
        batches.append(list(seeds))
        return real(self, seeds, *args)

    monkeypatch.setattr(Evaluator, "_run_batch", spy)
    seeds = [102, 100, 101]
    progress = Progress()
    lockstep = ev.run(seeds, progress=progress)
    sequential = ev.run(seeds, mode="sequential")
    assert batches == [seeds, [102], [100], [101]]
    assert [r["seed"] for r in lockstep] == [100, 101, 102]
    assert split_runtime(sequential)[0] == split_runtime(lockstep)[0]
    assert progress.decisions == sum(r["length"] for r in lockstep) and progress.queries == 0
    assert sorted(progress.episodes) == [100, 101, 102]
    batches.clear()
    ev.prompt = SimpleNamespace(sequential_episodes=True)  # no consultant: it never asks
    assert split_runtime(ev.run(seeds))[0] == split_runtime(lockstep)[0]
    assert batches == [[102], [100], [101]]
    with pytest.raises(ValueError, match=r"eval.mode='batched' is not one of \['lockstep', "):
        ev.run(seeds, mode="batched")
    with pytest.raises(ValueError, match="gate 'never' needs a PPO policy, none was given"):
        Evaluator(task=task, gate=NeverGate()).run(seeds)


def test_ppos_action_is_its_greedy_one_with_dropout_off(untrained):
    """Left in training mode (dropout on), the policy is switched off it first: the actions are
    SB3's deterministic predictions, as int64."""
    task, model, _ = untrained
    obs = np.stack([task.episode(s).obs for s in range(100, 140)])
    model.policy.set_training_mode(True)
    actions, state = policy_step(model.policy, obs)
    assert not model.policy.training and state is None and actions.dtype == np.int64
    expected, _ = model.predict(obs, deterministic=True)
    assert actions.tolist() == expected.tolist()
    assert deterministic_actions(model.policy, obs).tolist() == expected.tolist()


def test_an_episodes_mask_stream_hands_out_its_draws_in_order(untrained):
    """A stream draws 8 steps of masks at a time from its own seeded generator and hands them
    out one step each, in order; episode_masks stacks the live episodes' next masks per layer."""
    policy = untrained[1].policy
    stream = MaskStream(7)
    got = [stream.next(policy, 3) for _ in range(10)]
    generator = torch.Generator().manual_seed(7)
    draws = [draw_masks(policy, 8, 3, generator) for _ in range(2)]
    want = [[m[k % 8 : k % 8 + 1] for m in draws[k // 8]] for k in range(10)]
    assert len(got[0]) == 2  # one mask per dropout layer of net_arch [32, 32]
    for step, (g, w) in enumerate(zip(got, want, strict=True)):
        assert all(torch.equal(a, b) for a, b in zip(g, w, strict=True)), f"step {step}"
    stacked = episode_masks(policy, [MaskStream(1), MaskStream(2)], 3)
    alone = [MaskStream(1).next(policy, 3), MaskStream(2).next(policy, 3)]
    assert [tuple(m.shape) for m in stacked] == [(2, 3, 32), (2, 3, 32)]
    for layer, mask in enumerate(stacked):
        assert torch.equal(mask, torch.cat([alone[0][layer], alone[1][layer]]))
