"""What a trainer sweep learned (benchmark.brace.table, `+experiment=brace_demo`): the belief
format pass rule, the verdict that fails a demo in which nothing was learned, and the demo's
sweep at toy size printing its table (every row, the paired CIs, the critic's value loss, the
Brier per step, the curves)."""

from __future__ import annotations

import json

import pytest

from benchmark.brace.rewards import format_pass, format_score
from benchmark.brace.table import FORMAT_GOAL, verdict
from tests.conftest import run_cli

GOOD = "<belief_state>\n- the agent is in the kitchen [confirmed]\n- score 0 of 1 [confirmed]\n</belief_state>"


@pytest.mark.parametrize(
    "text, passes",
    [
        (GOOD, True),
        (GOOD.replace("</belief_state>", ""), False),  # not closed
        (GOOD.replace(" [confirmed]\n- score", "\n- score"), False),  # a bullet without a label
        (GOOD.replace("score 0 of 1", "the agent is in the kitchen"), False),  # repeated
        ("<belief_state>\n</belief_state>", False),  # no bullet
        ("<belief_state>\nthe agent is in the kitchen [confirmed]\n</belief_state>", False),
        (
            "<belief_state>\n"
            + "".join(f"- {i} rooms entered so far [confirmed]\n" for i in range(21))
            + "</belief_state>",
            False,
        ),  # > 20
        ("", False),
        (None, False),
    ],
)
def test_format_pass_is_a_well_formed_belief_whatever_its_length(text, passes):
    assert format_pass(text) is passes
    if passes:  # two bullets pass the format but earn a quarter of the count credit
        assert format_score(text) == pytest.approx(2 / 8)


def _rollouts(r_env: list[float]) -> dict:
    return {"per_seed": {"r_env": r_env}}


def _report(format_rate: float, correct: list[float], base_correct: list[float],
            rl: list[float], sft: list[float], name: str = "agent_brace") -> dict:  # fmt: skip
    from benchmark.metrics import paired_difference

    return {"trained_with": {"name": name},
            "held_out": {"sft": {"format_pass": {"mean": format_rate},
                                 "per_state": {"correctness": correct}},
                         "base": {"per_state": {"correctness": base_correct}}},
            "held_out_rollouts": {"rl": _rollouts(rl), "sft": _rollouts(sft),
                                  "base": _rollouts([0.0] * len(rl))},
            "gains": {"held_out_rollout_r_env": paired_difference(rl, sft)}}  # fmt: skip


HIGH, LOW = [1.0] * 8, [0.0] * 8


def test_the_verdict_fails_when_the_belief_learned_nothing_and_reports_r_env_as_it_is():
    """Learned: the belief format goal and the belief's correctness above the base's (paired CI
    above 0); R_env against the base and PPO's own gain are reported, shown or not."""
    learned = verdict([_report(0.97, HIGH, LOW, HIGH, HIGH)])
    assert learned["learned"] and learned["rl_minus_base_shown"]
    assert not learned["ppo_gain_shown"]  # PPO added nothing over SFT
    assert verdict([_report(0.97, HIGH, LOW, HIGH, LOW)])["ppo_gain_shown"]
    r_env_flat = verdict([_report(0.97, HIGH, LOW, LOW, LOW)])
    assert r_env_flat["learned"] and not r_env_flat["rl_minus_base_shown"]
    no_format = verdict([_report(FORMAT_GOAL - 0.01, HIGH, LOW, HIGH, HIGH)])
    assert not no_format["learned"] and "format pass" in no_format["why"]
    no_content = verdict([_report(1.0, [1.0, 0.0] * 4, [0.0, 1.0] * 4, HIGH, HIGH)])
    assert not no_content["learned"] and "belief correctness" in no_content["why"]
    assert not verdict([_report(1.0, HIGH, LOW, HIGH, HIGH, "frozen_belief")])["learned"]


# the demo at toy size: 2 training games, 2 teacher episodes, one short RL iteration per stage
TOY_DEMO = ["env.task.train_games=2", "brace.teacher_episodes=2", "brace.sft_examples=4",
            "brace.sft_epochs=1", "brace.held_out_episodes=2", "brace.reward_episodes=1",
            "brace.rl_max_steps=2", "brace.rl.iterations=1", "brace.rl.policy_iterations=1",
            "brace.rl.seeds_per_step=1", "brace.rl.group=2", "brace.rl.minibatch=4"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_demo_sweep_prints_what_was_learned_for_every_row(tmp_path):
    """`python -m benchmark.brace.train +experiment=brace_demo -m` at toy size: both rows train
    side by side, and the table printed at the sweep's end has base / SFT / SFT+PPO / frozen
    belief with paired CIs, the critic's value loss, the Brier per step and the curves; `--check`
    exits 1 exactly when the verdict says nothing was learned (toy size: not expected to learn)."""
    run = run_cli(tmp_path, "+experiment=brace_demo", "-m", *TOY_DEMO,
                  module="benchmark.brace.train", timeout=900)  # fmt: skip
    assert "2 jobs: 2 completed" in run.stdout, run.stdout[-3000:]
    (sweep,) = (tmp_path / "sweeps" / "brace_demo").iterdir()
    table = (sweep / "brace_table.md").read_text()
    for row in ("| base (untrained) |", "| SFT |", "| SFT+PPO (Agent-BRACE) |",
                "| frozen belief + PPO |", "value loss", "Brier", "rl-always.png"):  # fmt: skip
        assert row in table, table
    assert table.splitlines()[0] in run.stdout  # printed when the sweep ended
    v = json.loads((sweep / "brace_table.json").read_text())
    assert set(v) >= {"learned", "format_pass", "rl_minus_sft"}
    check = run_cli(tmp_path, str(sweep), "--check", module="benchmark.brace.table", check=False)
    assert check.returncode == (0 if v["learned"] else 1), check.stdout[-2000:]
