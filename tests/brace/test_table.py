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


def _format(rate: float, low: float | None = None) -> dict:
    return {"mean": rate, "ci95": [rate if low is None else low, rate], "n": 8}


def _report(format_rate: float = 0.97, correct: list[float] | None = None,
            base_correct: list[float] | None = None, rl: list[float] | None = None,
            sft: list[float] | None = None, name: str = "agent_brace",
            train_env: tuple[list[float], list[float]] | None = None,
            train_belief: tuple[list[float], list[float]] | None = None,
            rl_format: float | None = None) -> dict:  # fmt: skip
    """A complete agent's report in which every goal holds unless an argument says otherwise:
    (RL, SFT) per training game for R_env (`train_env`) and per training state for R_belief
    (`train_belief`); `rl_format`: the held-out format pass after RL (SFT's CI [0.95, 0.97])."""
    from benchmark.metrics import paired_difference

    correct, base_correct = correct or HIGH, base_correct or LOW
    rl, sft = rl or HIGH, sft or HIGH
    env_rl, env_sft = train_env or (HIGH, LOW)
    belief_rl, belief_sft = train_belief or ([0.8] * 8, [0.5] * 8)
    return {"trained_with": {"name": name},
            "held_out": {"sft": {"format_pass": _format(format_rate, 0.95),
                                 "per_state": {"correctness": correct}},
                         "rl": {"format_pass": _format(format_rate if rl_format is None
                                                       else rl_format)},
                         "base": {"per_state": {"correctness": base_correct}}},
            "held_out_rollouts": {"rl": _rollouts(rl), "sft": _rollouts(sft),
                                  "base": _rollouts([0.0] * len(rl))},
            "gains": {"held_out_rollout_r_env": paired_difference(rl, sft),
                      "train_r_env": paired_difference(env_rl, env_sft),
                      "train_state_r_belief": paired_difference(belief_rl, belief_sft)}}  # fmt: skip


HIGH, LOW = [1.0] * 8, [0.0] * 8
MIXED = [1.0, 0.0] * 4  # half the games won


def test_the_verdict_passes_when_every_goal_holds_and_reports_held_out_r_env_as_it_is():
    """Every goal met: learned, whatever held-out R_env shows (it is reported, shown or not)."""
    learned = verdict([_report()])
    assert learned["learned"] and learned["why"] == ""
    assert learned["rl_minus_base_shown"] and not learned["ppo_gain_shown"]
    assert learned["rl_minus_sft_train_r_env"]["diff_ci95_low"] > 0
    assert learned["belief_rl_gain_train_r_belief"]["diff_mean"] == pytest.approx(0.3)
    assert learned["format_kept"]["kept"]
    assert verdict([_report(rl=HIGH, sft=LOW)])["ppo_gain_shown"]
    held_out_flat = verdict([_report(rl=LOW, sft=LOW)])
    assert held_out_flat["learned"] and not held_out_flat["rl_minus_base_shown"]


@pytest.mark.parametrize(
    "kwargs, why",
    [
        ({"format_rate": FORMAT_GOAL - 0.01, "rl_format": FORMAT_GOAL}, "format pass after SFT"),
        ({"correct": MIXED, "base_correct": [0.0, 1.0] * 4}, "belief correctness"),
        ({"train_env": (LOW, LOW)}, "R_env on the training games"),  # RL left R_env flat
        ({"train_env": (MIXED, [0.0, 1.0] * 4)}, "R_env on the training games"),  # CI spans 0
        ({"train_belief": ([0.5] * 8, [0.5] * 8)}, "R_belief on the training states"),
        ({"train_belief": ([0.4] * 8, [0.5] * 8)}, "R_belief on the training states"),
        ({"rl_format": 0.94}, "format pass after RL"),  # below SFT's CI [0.95, 0.97]
    ],
    ids=[
        "format",
        "correctness",
        "r_env_flat",
        "r_env_ci_spans_0",
        "r_belief_flat",
        "r_belief_lowered",
        "format_lowered_by_rl",
    ],  # fmt: skip
)
def test_the_verdict_fails_when_any_one_goal_fails(kwargs, why):
    v = verdict([_report(**kwargs)])
    assert not v["learned"] and why in v["why"], v["why"]
    assert v["why"].count(";") == 0  # that goal alone


def test_the_verdict_reads_the_agent_brace_job_and_a_report_without_the_gains_fails():
    assert not verdict([_report(name="frozen_belief")])["learned"]
    old = _report()
    del old["gains"]["train_state_r_belief"], old["held_out"]["rl"]  # written before them
    v = verdict([old])
    assert not v["learned"] and "R_belief" in v["why"] and "after RL None" in v["why"]


def test_the_table_prints_each_goal_with_its_ci():
    from benchmark.brace.table import lines

    report = _report()
    report["trained_with"] = {"name": "agent_brace", "env": {"name": "grid"}, "base": "",
                              "tiny_size": "text", "seed": 0, "rl_max_steps": 4,
                              "sft_roles": ["belief"], "mode": "slm"}  # fmt: skip
    report["out"] = "out"
    for side in report["held_out_rollouts"].values():
        side.update(r_env=_format(1.0), correctness=_format(0.5))
    for side in report["held_out"].values():
        side.update(format=_format(1.0), correctness=_format(0.5))
    text = "\n".join(lines([report]))
    assert "R_env, fixed training games (paired over the games): +1.000 [+1.000, +1.000]" in text
    assert "R_belief, teacher states of those games (paired over the states): +0.300 [" in text
    assert "vs SFT's 0.97 (CI low end 0.95): kept" in text
    assert text.endswith("Learned: yes")


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
