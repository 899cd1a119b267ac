"""ASK on the GPU benchmark's consultant: decisions/s at IR 0 and IR 1 (`decision_rates`) and the
gate check (`gate_check`): lockstep and sequential play the same episodes, gate decision for gate
decision, at a tau no entropy of the run lies near.

IR 0 and IR 1 are the two ends every cell's speed lies between: the entropy gate with tau above
the largest entropy a policy can have (log2 |A| + 1) never asks, with tau = 0 it asks at every step
(the PPO suggestion stays in the prompt). Both run Table 1's ASK+ (stateful prompt with
rationale) on fourrooms with an untrained PPO: speed, not quality. IR 1 runs twice, with the
decoding the config gives (`generate`) and with choice scoring (`slm.decoding.mode=choices`).

Why the gate check picks its tau from the gaps between entropies: at a tau in the middle of
many close entropies (an untrained policy's are all near the maximum) a 1e-6 difference between
a batched and a one-row forward flips a gate decision, and the two paths then differ for a
reason that says nothing about the loop. The tau is the midpoint of the widest gap between
consecutive sorted entropies of PPO-only validation trajectories (within the middle quantiles,
so the gate asks on some steps and not on others), and the margin (the nearest entropy of the
runs themselves to tau) is reported beside the verdict."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from benchmark.bench.common import compose, run_rates

GATE_MARGIN_BITS = 1e-3  # entropies nearer tau than this could flip on float noise
HEAD_SCALE = 1000.0  # the gate check's policy: action logits of order 1 (`untrained_policy`)


def ask_config(root: Any, episodes: int, max_steps: int, *extra: str) -> Any:
    """The ASK job config the decision runs build (fourrooms, `episodes` test seeds, capped at
    `max_steps` steps, the response cache off: every query reaches the model)."""
    return compose(
        root,
        "env=fourrooms",
        f"env.task.max_steps={max_steps}",
        "slm.cache=false",
        f"eval.n_episodes={episodes}",
        *extra,
    )


def untrained_policy(cfg: Any, task: Any, head_scale: float = 1.0) -> Any:
    """An untrained PPO policy (speed, not quality). `head_scale` multiplies its action head's
    weights: SB3 initialises them with gain 0.01, so every step's action distribution is near
    uniform and every entropy near log2 |A|; scaled up, the entropies spread over the range
    and a tau can lie away from all of them (the gate check)."""
    import torch

    from benchmark.bench.cpu_policy import new_ppo

    torch.manual_seed(0)
    policy = new_ppo(task, cfg.policy, n_envs=1).policy
    if head_scale != 1.0:
        with torch.no_grad():
            policy.action_net.weight.mul_(head_scale)
    return policy


def decision_rates(consultant: Any, root: Any, sizes: Any) -> dict[str, Any]:
    """Decisions/s of ASK+ at IR 0, and at IR 1 with generation and with choice scoring, each
    with its consultant time per query split into prefill and decode where the backend timed
    them (`query_split`)."""
    from benchmark.bench.cpu_evaluation import query_split, timed_run
    from benchmark.build import build, prepare

    prompt = [
        "method=ask_plus",
        "gate.tau=0",
        f"prompt.thinking_budget={sizes.thinking_budget}",
        f"prompt.rationale_max_new_tokens={sizes.rationale_tokens}",
    ]
    configs = {
        "generate": ask_config(root, sizes.ir_episodes, sizes.ir_max_steps, *prompt),
        "choices": ask_config(
            root, sizes.ir_episodes, sizes.ir_max_steps, *prompt, "slm.decoding.mode=choices"
        ),
    }
    prepared = prepare(configs["generate"])
    task = prepared[0]
    policy = untrained_policy(configs["generate"], task)
    never = math.log2(len(task.action_names)) + 1.0  # above any total entropy: IR 0
    runs = {"ir0": ("generate", never), "ir1_generate": ("generate", 0.0)}
    runs["ir1_choices"] = ("choices", 0.0)
    out: dict[str, Any] = {
        "params": {
            "env": "fourrooms",
            "method": "ask_plus",
            "episodes": sizes.ir_episodes,
            "max_steps": sizes.ir_max_steps,
            "policy": "untrained",
            "tau_ir0": never,
            "tau_ir1": 0.0,
        }
    }
    for key, (decoding, tau) in runs.items():
        evaluation = build(
            configs[decoding], prepared=prepared, policy=policy, consultant=consultant
        )
        run = timed_run(evaluation, evaluation.test_seeds(), "lockstep", tau)
        out[key] = {"stats": run.stats, "split_ms": query_split(run), "prefill": run.prefill}
    return out


def gap_tau(entropies: np.ndarray, lo: float = 0.2, hi: float = 0.8) -> tuple[float, float]:
    """(tau, half the gap): the midpoint of the widest gap between consecutive sorted entropies
    whose both ends lie within the [lo, hi] quantiles (the whole range when that holds fewer
    than two distinct values)."""
    values = np.unique(np.asarray(entropies, dtype=float))
    if values.size < 2:
        raise ValueError(
            f"the gate check needs at least two distinct entropies, got {values.size}: the policy "
            "is deterministic on these steps"
        )
    inner = values[(values >= np.quantile(values, lo)) & (values <= np.quantile(values, hi))]
    pool = inner if inner.size >= 2 else values
    gaps = np.diff(pool)
    k = int(np.argmax(gaps))
    return float((pool[k] + pool[k + 1]) / 2), float(gaps[k] / 2)


def step_agreement(a: dict[int, list[tuple]], b: dict[int, list[tuple]]) -> dict[str, Any]:
    """Two runs' steps per seed, each (asked, action), compared up to and including each
    episode's first differing action (after it the episodes legitimately part): `gate_agreement`
    (share of those steps with the same gate decision: the policy is the same, so any difference
    is a bug, in any dtype), `action_agreement` (share of the asked steps among them with the
    same action: the LM's answers, which bf16 batch shapes may flip), and the counts."""
    gate_same = gate_n = asked_same = asked_n = parted = 0
    for seed, steps_a in a.items():
        for (asked_a, act_a), (asked_b, act_b) in zip(steps_a, b[seed], strict=False):
            gate_n += 1
            gate_same += asked_a == asked_b
            if asked_a and asked_b:
                asked_n += 1
                asked_same += act_a == act_b
            if act_a != act_b:
                parted += 1
                break
    return {
        "gate_agreement": gate_same / gate_n if gate_n else 1.0,
        "action_agreement": asked_same / asked_n if asked_n else 1.0,
        "steps_compared": gate_n,
        "asked_steps_compared": asked_n,
        "episodes_parted": parted,
    }


def gate_check(consultant: Any, root: Any, sizes: Any, dtype: str = "float32") -> dict[str, Any]:
    """ASK (basic prompt, entropy gate at `gap_tau`) lockstep and sequential on the same test
    seeds: the per-episode results, every step's gate decision and action, the margin, and how
    far the runs agree (`step_agreement`; `identical` is the exact check, meant for fp32)."""
    from benchmark import results
    from benchmark.bench.cpu_evaluation import ppo_entropies
    from benchmark.build import build, prepare

    cfg = ask_config(root, sizes.gate_episodes, sizes.gate_max_steps, "method=ask", "gate.tau=1.0")
    prepared = prepare(cfg)
    task = prepared[0]
    policy = untrained_policy(cfg, task, HEAD_SCALE)
    n = int(cfg.gate.mc_samples)
    entropies = ppo_entropies(policy, task, sizes.gate_episodes, sizes.gate_max_steps, n)
    tau, half_gap = gap_tau(entropies)
    evaluation = build(cfg, prepared=prepared, policy=policy, consultant=consultant)
    seeds = evaluation.test_seeds()
    runs, outcomes, steps, nearest = {}, {}, {}, math.inf
    for mode in ("lockstep", "sequential"):
        record: dict[int, list[tuple]] = {s: [] for s in seeds}

        def on_step(event: Any, record: dict = record) -> None:
            total = event.uncertainty[0] if event.uncertainty is not None else math.nan
            record[event.episode.seed].append((event.decision is not None, event.action, total))

        t0 = time.perf_counter()
        rows = evaluation.evaluator(tau=tau).run(seeds, mode=mode, on_step=on_step)
        runs[mode] = run_rates(rows, time.perf_counter() - t0)
        outcomes[mode] = results.split_runtime(rows)[0]
        steps[mode] = {s: [(asked, action) for asked, action, _ in r] for s, r in record.items()}
        nearest = min(nearest, *(abs(t - tau) for r in record.values() for _, _, t in r))
    identical = (
        outcomes["lockstep"] == outcomes["sequential"] and steps["lockstep"] == steps["sequential"]
    )
    return {
        "dtype": dtype,
        **step_agreement(steps["lockstep"], steps["sequential"]),
        "params": {
            "env": "fourrooms",
            "method": "ask",
            "episodes": len(seeds),
            "max_steps": sizes.gate_max_steps,
            "policy": f"untrained, action head weights x {HEAD_SCALE:g}",
            "tau": tau,
            "tau_rule": "midpoint of the widest gap between sorted PPO-only validation entropies "
            "(20-80% quantiles)",
        },
        "calibration": {
            "n_observations": int(entropies.size),
            "half_gap_bits": half_gap,
            "entropy_bits": {
                q: float(np.quantile(entropies, q)) for q in (0.0, 0.25, 0.5, 0.75, 1.0)
            },
            "max_entropy_bits": math.log2(len(task.action_names)),
        },
        "margin_bits": nearest,  # the nearest entropy of either run to tau
        "runs": runs,
        "identical": identical,
        "ratio": runs["sequential"]["wall_s"] / runs["lockstep"]["wall_s"],
    }
