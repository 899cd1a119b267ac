"""Agent-BRACE's measurements, each with 95% bootstrap CIs: a belief model's greedy updates on
teacher-forced states (`held_out`: validation states, or the training states of
`training_states`), the models' greedy rollouts on training seeds (`training_reward`) and on
held-out seeds (`rollout_reward`, each model on its OWN beliefs), and RL's gains over SFT
paired on the same states and seeds (`gains`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.analysis.belief import brier_by_step
from benchmark.brace import joint, rollout
from benchmark.brace.rewards import DEFAULT_WEIGHTS, BeliefWeights, episode_rewards, format_pass
from benchmark.prompts.belief import BELIEF_ROLE
from benchmark.seeds import Splits

# training-reward fields averaged per seed over its updates (name -> joint.samples' raw key)
PER_SEED = {"r_belief": "belief", "format": "gate", "correctness": "correctness"}


def held_out(model_dir: str | Path, states: Sequence[Any],
             weights: BeliefWeights = DEFAULT_WEIGHTS) -> dict[str, Any]:  # fmt: skip
    """A belief model's greedy updates on teacher-forced held-out states: format compliance,
    correctness and R_belief (as `weights` make it), each with its CI over states."""
    from benchmark.brace.sft import rewards_at
    from benchmark.finetune.store import answer_all

    answers, seconds = answer_all(Path(model_dir), states)
    rewards = rewards_at([a.text for a in answers], states, weights)
    return {
        "format_pass": rollout.mean_ci([float(format_pass(a.text)) for a in answers]),
        "format": rollout.mean_ci([r.gate for r in rewards]),
        "correctness": rollout.mean_ci([r.correctness for r in rewards]),
        "r_belief": rollout.mean_ci([r.total for r in rewards]),
        "seconds": round(seconds, 1),
        "example": answers[0].text if answers else "",
        # per state, in the states' order: what the paired SFT vs RL comparison reads (`gains`)
        "per_state": {
            "correctness": [round(r.correctness, 4) for r in rewards],
            "r_belief": [round(r.total, 4) for r in rewards],
        },
    }


def training_states(task: Any, prompt: Any, seeds: Sequence[int], splits: Splits) -> list[Any]:
    """The teacher's belief states on training seeds (refused otherwise): the fixed states on
    which the belief model's R_belief before and after belief RL is compared (`held_out` on
    each, paired per state), so the belief's own gain is measured apart from the policy's."""
    from benchmark.seeds import check_training_seeds

    check_training_seeds(seeds, splits)
    _, logs = rollout.run(task, prompt, rollout.TeacherConsultant(), list(seeds))
    return rollout.belief_states(logs)


def training_reward(task: Any, prompt: Any, dirs: dict[str, Path], seeds: Sequence[int],
                    splits: Splits, gate: Any = None, policy: Any = None,
                    weights: BeliefWeights = DEFAULT_WEIGHTS) -> dict[str, Any]:  # fmt: skip
    """The models' greedy rollouts on training seeds (refused otherwise): `rollout_reward`."""
    from benchmark.seeds import check_training_seeds

    check_training_seeds(seeds, splits)
    return rollout_reward(task, prompt, dirs, seeds, gate, policy, weights)


def rollout_reward(task: Any, prompt: Any, dirs: dict[str, Path], seeds: Sequence[int],
                   gate: Any = None, policy: Any = None,
                   weights: BeliefWeights = DEFAULT_WEIGHTS) -> dict[str, Any]:  # fmt: skip
    """The models' greedy rollouts on `seeds`, each update following the model's OWN previous
    belief (what RL trains on, unlike the teacher-forced `held_out`): R_env per episode,
    R_belief, format and correctness per update, with CIs, and per seed for pairing."""
    from benchmark.finetune import lm

    models = {role: lm.load(d) for role, d in dirs.items()}
    rows, logs = rollout.run(task, prompt, joint.Sampler(models, 0.0), seeds, gate=gate,
                             policy=policy)  # fmt: skip
    per_seed = [joint.samples({s: [[x for x in logs if x.seed == s]]}, weights)[1] for s in seeds]
    raw = {k: [v for r in per_seed for v in r[k]] for k in PER_SEED.values()}
    outcome = episode_rewards(rows)  # an episode with no consulted step counts too
    env = [outcome.get(s, 0.0) for s in seeds]
    updates = [t.text for x in logs for t in x.turns if t.role == BELIEF_ROLE]
    steps, brier = brier_by_step([belief_record(x) for x in logs if x.belief])
    return {"r_env": rollout.mean_ci(env), "r_belief": rollout.mean_ci(raw["belief"]),
            "format": rollout.mean_ci(raw["gate"]),
            "format_pass": rollout.mean_ci([float(format_pass(t)) for t in updates]),
            "correctness": rollout.mean_ci(raw["correctness"]),
            # the held beliefs' calibration per step (the mean over the episodes at that step)
            "brier_by_step": {"step": steps, "brier": [round(b, 4) for b in brier]},
            # per seed, in `seeds` order (R_belief: the mean of its updates, None without one)
            "per_seed": {"r_env": env, **{key: [
                round(float(np.mean(r[raw_key])), 4) if r[raw_key] else None for r in per_seed]
                for key, raw_key in PER_SEED.items()}}}  # fmt: skip


def belief_record(log: rollout.StepLog) -> dict[str, Any]:
    """A rollout step's held belief as the analysis reads a cell's step record: each claim's
    label with the probability its fact holds now (None: no rule verifies it)."""
    from benchmark.envs.truth import truth_probability
    from benchmark.vocabulary import split_claim

    claims = [[split_claim(c)[1], truth_probability(c, log.truth)] for c in log.belief]
    return {"seed": log.seed, "step": log.step, "belief_claims": claims}


def gains(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    """RL's gains (SFT+RL minus SFT), paired: on the same held-out states and the same
    teacher-forced training states (`train_state_*`: correctness, R_belief), on the same
    training seeds (R_env; R_belief, format and correctness averaged over a seed's updates,
    seeds where either model made no update left out), the same for the held-out rollouts
    (validation seeds on the models' own beliefs), each with its 95% bootstrap CI
    (benchmark.metrics.paired_difference): a CI above 0 is a gain."""
    from benchmark.metrics import paired_difference

    tr = report["train_reward"]
    out = {
        f"{prefix}_{k}": paired_difference(side["rl"]["per_state"][k], side["sft"]["per_state"][k])
        for prefix, side in (("held_out", report.get("held_out")),
                             ("train_state", report.get("train_states")))
        for k in ("correctness", "r_belief")
        if side and side.get("rl") and side.get("sft")  # no belief model (raw history): none
    }  # fmt: skip
    rollouts = {"train": tr, "held_out_rollout": report.get("held_out_rollouts")}
    for prefix, side in rollouts.items():
        for k in ("r_env", *PER_SEED) if side else ():
            if k not in side["rl"]["per_seed"]:  # a report written before the field existed
                continue
            pairs = [
                (a, b)
                for a, b in zip(side["rl"]["per_seed"][k], side["sft"]["per_seed"][k], strict=True)
                if a is not None and b is not None
            ]
            if pairs:
                diff = paired_difference(*zip(*pairs, strict=True))
                out[f"{prefix}_{k}"] = {**diff, "n": len(pairs)}
    return out
