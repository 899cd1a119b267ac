"""The contract every environment family keeps, one test parametrised over one env of each task
class (conf/env, grouped by `env.task._target_`): PPO-only, ASK with the oracle, the oracle, the
dice, the tiny model alone and ASK+ with it run as whole jobs with step records, and what the suite promises
of any family holds (the family's metric on every episode, the test seeds, no query without a
gate, IR 1 when the consultant acts alone, every step record naming the action and whether it
was optimal, the oracle never worse than the dice). A new family is covered by its conf/env file;
what a family needs to stay small enough for a test is the only entry it adds here."""

from __future__ import annotations

from collections import defaultdict

import pytest

from benchmark import results
from benchmark.config import load_yaml, option_file, options
from tests.conftest import SMALL_POLICY, compose_cfg

# task class -> the env the contract runs on (the first of its conf/env options unless named)
PREFERRED = {
    "benchmark.envs.minigrid_nav.MiniGridTask": "empty5x5_random",  # the committed small PPO
    "benchmark.envs.textworld.TextWorldTask": "tw_treasure",
}
# env -> what keeps its jobs at test size (the family's own knobs)
TOY = {
    "empty5x5_random": [],
    "memory_s11": ["env.task.max_steps=20"],  # the expert needs at most 11 steps
    "keycorridor_s3r1": ["env.task.max_steps=60"],
    "tw_treasure": [
        "env.task.train_games=2",
        "policy.total_timesteps=256",
        "policy.n_envs=2",
        "++policy.ppo.n_steps=64",
        "++policy.ppo.batch_size=64",
        "policy.eval_freq=256",
        "policy.eval_episodes=2",
    ],
}
# the families whose expert always reaches the goal (HigherLower's card counter guesses)
ORACLE_SOLVES = {"empty5x5_random", "memory_s11", "keycorridor_s3r1", "repeatprevious_easy"}
ORACLE_SOLVES |= {"tw_treasure"}
# env -> the family's own field every step record carries (its true state for the analyses)
STATE_FIELD = {
    "empty5x5_random": "pos",
    "memory_s11": "pos",
    "repeatprevious_easy": "suit",
    "tw_treasure": "facts",
}


def contract_envs() -> list[str]:
    by_class: dict[str, list[str]] = defaultdict(list)
    for name in options("env"):
        by_class[str(load_yaml(option_file("env", name)).task._target_)].append(name)
    return sorted(PREFERRED.get(cls, envs[0]) for cls, envs in by_class.items())


def test_every_task_class_has_a_contract_env():
    envs = contract_envs()
    assert len(envs) >= 6 and "higherlower" in envs and "tw_treasure" in envs
    assert set(TOY) <= set(options("env")), "TOY names an env conf/env no longer has"


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a short PPO training and five cells (2 shared cores)
@pytest.mark.parametrize("env", contract_envs())
def test_every_method_runs_on_every_family(env, tmp_path):
    from benchmark.analysis.steps import STEPS_FILE, read_steps
    from benchmark.job import run_job

    small = [f"env={env}", *SMALL_POLICY, *TOY.get(env, []), "eval.n_episodes=2"]
    small += ["eval.step_records=true", "prompt.rationale_max_new_tokens=24"]
    cells = {
        "ppo": ["method=ppo"],
        "ask": ["method=ask", "slm=oracle", "gate.tau=0.5", "gate.mc_samples=8"],
        "oracle": ["method=slm_only", "slm=oracle"],
        "dice": ["method=slm_only", "slm=random"],
        "tiny": ["method=slm_only", "slm=tiny"],
        "ask_plus": ["method=ask_plus", "slm=tiny", "gate.tau=0.3", "gate.mc_samples=8"],
    }
    summaries = {}
    for name, overrides in cells.items():
        cfg = compose_cfg(tmp_path / "root", *small, *overrides, "quiet=true")
        summaries[name] = run_job(cfg, tmp_path / name, multirun=False)
        metric = summaries[name]["metric"]
        rows = results.read_jsonl(tmp_path / name / "episodes.jsonl")
        assert [r["seed"] for r in rows] == [100, 101], name
        assert all(r.get(metric) is not None and r["length"] > 0 for r in rows), name
        steps = read_steps(tmp_path / name / STEPS_FILE)
        assert len(steps) == sum(r["length"] for r in rows), name
        assert all("action" in s and "action_optimal" in s for s in steps), name
        if env in STATE_FIELD:
            assert all(STATE_FIELD[env] in s for s in steps), name
    metric = summaries["ppo"]["metric"]
    assert summaries["ppo"]["queries_total"] == 0
    for alone in ("oracle", "dice", "tiny"):
        assert summaries[alone]["ir_pooled"] == 1.0, alone
    assert summaries["tiny"]["queries_total"] == summaries["tiny"]["steps_total"]
    assert all(s["action_optimal"] for s in read_steps(tmp_path / "oracle" / STEPS_FILE))
    oracle, dice = summaries["oracle"][f"{metric}_mean"], summaries["dice"][f"{metric}_mean"]
    assert oracle >= dice
    if env in ORACLE_SOLVES:
        assert oracle == 1.0
