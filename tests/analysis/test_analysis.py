"""Per-step records judged by the expert, gate quality and where queries land.

Gate-quality numbers against hand computations on hand-built episodes; the expert's optimal
action sets on hand-checked Empty-5x5 states and HigherLower decks; the records of real
evaluations (an untrained dropout policy, so no training: fast) with the oracle (help 1, harm 0)
and PPO-only (recall 0); the job writes steps.jsonl.gz, adds them to a complete cell without
changing its results, and refuses when a rerun disagrees; the report section and the preset."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from benchmark import cell, results
from benchmark.analysis import STEPS_FILE, StepRecorder, auroc, auroc_ci, gate_quality, read_steps
from benchmark.analysis.quality import roc_curve
from benchmark.analysis.where import by_decision, by_position, by_rank, wall_frequency
from benchmark.envs import make_task
from benchmark.envs.higherlower import HigherLowerTask, counting_choice, optimal_guesses
from benchmark.envs.minigrid_nav import MiniGridTask
from benchmark.evaluate import Evaluator
from benchmark.gates import EntropyGate, NeverGate
from benchmark.job import run_job
from benchmark.validate import validate
from tests.conftest import CONF, compose_cfg, untrained_ppo

# --------------------------------------------------------------------------------------------
# gate quality on hand-built episodes


def _step(seed, step, ppo_ok, queried, final_ok, total, epistemic):
    return {
        "seed": seed,
        "step": step,
        "total": total,
        "aleatoric": None if total is None else total - epistemic,
        "epistemic": epistemic,
        "optimal": None if ppo_ok is None else [0],
        "ppo": 0 if ppo_ok else 1,
        "ppo_optimal": ppo_ok,
        "queried": queried,
        "consultant": None,
        "consultant_optimal": None,
        "action": 0 if final_ok else 1,
        "action_optimal": final_ok,
    }


HAND = [
    # episode 1: right & not asked; wrong, asked, fixed; right, asked, broken; wrong, not asked
    _step(1, 0, True, False, True, 0.1, 0.05),
    _step(1, 1, False, True, True, 0.9, 0.3),
    _step(1, 2, True, True, False, 0.7, 0.1),
    _step(1, 3, False, False, False, 0.4, 0.4),
    # episode 2: wrong, asked, not fixed; right, asked, kept; no expert answer (not judged)
    _step(2, 0, False, True, False, 0.8, 0.2),
    _step(2, 1, True, True, True, 0.7, 0.2),
    _step(2, 2, None, True, True, 0.5, 0.5),
]


def test_gate_quality_matches_hand_computation():
    q = gate_quality(list(reversed(HAND)))  # order does not matter
    assert (q["gate_judged"], q["gate_wrong"], q["gate_queried"]) == (6, 3, 4)
    assert q["gate_ppo_error_rate"] == pytest.approx(3 / 6)
    assert q["gate_precision"] == pytest.approx(2 / 4)  # wrong among the 4 queried
    assert q["gate_recall"] == pytest.approx(2 / 3)  # 2 of the 3 wrong steps were queried
    assert q["gate_help_rate"] == pytest.approx(1 / 2)  # 1 of 2 queried wrong steps fixed
    assert q["gate_harm_rate"] == pytest.approx(1 / 2)  # 1 of 2 queried right steps broken
    assert q["gate_fixed"] == pytest.approx(1 / 6) and q["gate_broken"] == pytest.approx(1 / 6)
    # total: wrong {.9, .4, .8} vs right {.1, .7, .7}: 3 + 1 + 3 pairs of 9 ranked right
    assert q["gate_auroc_total"] == pytest.approx(7 / 9)
    # epistemic: wrong {.3, .4, .2} vs right {.05, .1, .2}: 3 + 3 + 2.5 (one tie)
    assert q["gate_auroc_epistemic"] == pytest.approx(8.5 / 9)
    for rate in ("precision", "recall", "auroc_total", "auroc_epistemic"):
        low, high = q[f"gate_{rate}_ci95_low"], q[f"gate_{rate}_ci95_high"]
        assert low <= q[f"gate_{rate}"] <= high


def test_undefined_rates_are_none_and_ppo_only_has_recall_zero():
    ppo_only = [{**r, "queried": False, "total": None, "epistemic": None} for r in HAND]
    q = gate_quality(ppo_only)
    assert q["gate_recall"] == 0.0 and q["gate_precision"] is None
    assert q["gate_help_rate"] is None and q["gate_harm_rate"] is None
    assert q["gate_auroc_total"] is None  # no entropies without an uncertainty gate
    slm_only = [{**r, "ppo": None, "ppo_optimal": None} for r in HAND]
    assert gate_quality(slm_only)["gate_judged"] == 0


def test_auroc_is_the_pairwise_rank_statistic_and_its_bootstrap_resamples_episodes():
    rng = np.random.default_rng(3)
    scores = [np.round(rng.normal(size=n), 1) for n in (5, 9, 1, 7)]  # rounding makes ties
    labels = [rng.random(s.size) < 0.4 for s in scores]
    s, y = np.concatenate(scores), np.concatenate(labels)
    pairs = [(a > b) + 0.5 * (a == b) for a in s[y] for b in s[~y]]
    assert auroc(s, y) == pytest.approx(np.mean(pairs))
    assert auroc([1, 2, 3], [True, True, True]) is None
    # the matrix bootstrap equals concatenating the resampled episodes
    value, low, high = auroc_ci(scores, labels, n_boot=200, seed=5)
    idx = np.random.default_rng(5).integers(0, 4, size=(200, 4))
    direct = []
    for row in idx:
        a = auroc(
            np.concatenate([scores[e] for e in row]), np.concatenate([labels[e] for e in row])
        )
        if a is not None:
            direct.append(a)
    assert value == pytest.approx(np.mean(pairs))
    assert (low, high) == pytest.approx((np.quantile(direct, 0.025), np.quantile(direct, 0.975)))
    fpr, tpr = roc_curve(s, y)
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0, 0, 1, 1)
    area = np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2)  # ties: straight segments
    assert area == pytest.approx(np.mean(pairs))


# --------------------------------------------------------------------------------------------
# the expert's sets of optimal actions

L, R, F = 0, 1, 2  # TURN_LEFT, TURN_RIGHT, FORWARD in the task below


def _empty5(pos, direction):
    """MiniGrid-Empty-5x5: floor (1..3, 1..3), goal at (3, 3); the agent put at `pos`."""
    task = MiniGridTask("e5", "MiniGrid-Empty-5x5-v0", None, ["TURN_LEFT", "TURN_RIGHT", "FORWARD"])
    ep = task.episode(0)
    ep.sim.agent_pos, ep.sim.agent_dir = np.array(pos), direction
    return ep


@pytest.mark.parametrize(
    ("pos", "direction", "optimal"),
    [
        ((1, 1), 0, {F}),  # facing east: F F R F F (5), turning first costs a second turn
        ((3, 1), 0, {R}),  # at the east wall: turn south
        ((3, 1), 3, {L, R}),  # facing north, goal straight behind: either way round, 4 steps
        ((3, 2), 1, {F}),  # the goal ahead: one step
        ((2, 2), 3, {R}),  # R F R F
        ((2, 2), 2, {L}),  # L F L F
        ((1, 3), 1, {L}),  # facing the south wall, goal to the east
        ((2, 3), 2, {L, R}),  # goal straight behind again
    ],
)
def test_navigation_optimal_sets_on_hand_checked_empty5x5_states(pos, direction, optimal):
    ep = _empty5(pos, direction)
    assert ep.optimal_actions() == optimal
    assert ep.expert_action() in optimal


@pytest.mark.parametrize("env", ["fourrooms", "doorkey8"])
def test_every_optimal_action_shortens_the_plan_by_one_and_the_others_do_not(env):
    """Brute force: each action from copies of the state, the plan length after it."""
    task = make_task(env)
    rng = np.random.default_rng(0)
    for seed in (100, 101):
        ep = task.episode(seed)
        for _ in range(12):
            base = len(ep.expert_plan())
            optimal = ep.optimal_actions()
            assert ep.expert_action() in optimal
            for a in range(len(ep.action_names)):
                probe = task.episode(seed)
                for past in ep.memory.actions:
                    probe.step(ep.action_names.index(past))
                probe.step(a)
                if probe.terminated and probe.last_reward > 0:
                    after = 0  # reached the goal
                else:
                    plan = probe.expert_plan()
                    after = len(plan) if plan else None
                assert (a in optimal) == (after == base - 1), (seed, ep.steps, a, optimal)
            ep.step(
                int(rng.choice(sorted(optimal))) if rng.random() < 0.6 else int(rng.integers(3))
            )


def test_higherlower_optimal_guesses_on_hand_built_decks():
    full = [4] * 13
    assert optimal_guesses(0, full) == ("HIGHER",)  # an ace: everything else is higher
    assert optimal_guesses(12, full) == ("LOWER",)  # a king
    seven = full[:6] + [3] + full[7:]  # the 7 (rank 6) dealt: 24 above, 24 below
    assert optimal_guesses(6, seven) == ("HIGHER", "LOWER")
    assert counting_choice(6, seven) == "HIGHER"  # the expert's tie-break is one of the two
    assert optimal_guesses(5, [0] * 5 + [1] + [0] * 7) == ("HIGHER", "LOWER")  # only a push left
    assert optimal_guesses(5, [0, 0, 0, 0, 1] + [0] * 8) == ("LOWER",)


def test_higherlower_episode_optimal_actions_count_the_remaining_deck():
    task = HigherLowerTask("hl", actions=("LOWER", "HIGHER"))  # indices swapped on purpose
    ep = task.episode(7)
    seen_both = False
    while not ep.done:
        v = ep.view()
        want = {"HIGHER"} if v.higher > v.lower else {"LOWER"} if v.higher < v.lower else None
        names = {task.action_names[a] for a in ep.optimal_actions()}
        assert names == (want or {"HIGHER", "LOWER"})
        seen_both |= want is None
        ep.step(ep.expert_action())
    assert seen_both


# --------------------------------------------------------------------------------------------
# records of real evaluations (an untrained dropout policy: nothing to train)


def _untrained_evaluator(tmp_path, env, gate, slm="oracle"):
    cfg = compose_cfg(tmp_path, f"env={env}", f"slm={slm}", "prompt=basic")
    from benchmark.build import build_prompt
    from benchmark.consultants import make_consultant

    task = make_task(cfg.env)
    model = untrained_ppo(task)
    with torch.no_grad():  # sharper than at initialisation: entropies spread over (0, log2 |A|)
        model.policy.action_net.weight.mul_(40.0)
    asks = not isinstance(gate, NeverGate)
    return Evaluator(
        task=task,
        gate=gate,
        policy=model.policy,
        consultant=make_consultant(cfg.slm, cfg.paths) if asks else None,
        prompt=build_prompt(cfg, task) if asks else None,
        mc_samples=8,
    )


@pytest.mark.parametrize(("env", "tau"), [("empty5x5_random", 1.981), ("higherlower", 0.996)])
def test_oracle_helps_on_every_query_and_never_harms(tmp_path, env, tau):
    ev = _untrained_evaluator(tmp_path, env, EntropyGate(tau))
    seeds = list(range(100, 105))
    plain = ev.run(seeds)
    recorder = StepRecorder()
    rows = ev.run(seeds, on_step=recorder)
    assert results.split_runtime(rows)[0] == results.split_runtime(plain)[0]  # the hook only reads
    records = recorder.records
    assert len(records) == sum(r["length"] for r in rows)
    assert sum(r["queried"] for r in records) == sum(r["queries"] for r in rows)
    q = gate_quality(records)
    assert 0 < q["gate_queried"] < q["gate_judged"]  # tau chosen so that the gate is selective
    assert q["gate_help_rate"] == 1.0 and q["gate_harm_rate"] == 0.0
    assert all(r["consultant_optimal"] for r in records if r["queried"])
    assert all(r["action"] == r["ppo"] for r in records if not r["queried"])
    assert all(r["total"] == pytest.approx(r["aleatoric"] + r["epistemic"]) for r in records)
    key = "pos" if env != "higherlower" else "rank"
    assert all(key in r for r in records)
    sequential = StepRecorder()
    ev.run(seeds, mode="sequential", on_step=sequential)
    # lockstep and sequential record the same steps (entropies and PPO's probabilities up to
    # float rounding: batch size)
    unc = ("total", "aleatoric", "epistemic", "policy_probs")
    assert all(len(r["policy_probs"]) == len(ev.task.action_names) for r in records)
    for a, b in zip(sequential.records, records, strict=True):
        assert {k: v for k, v in a.items() if k not in unc} == {
            k: v for k, v in b.items() if k not in unc
        }
        assert [a[k] for k in unc[:3]] == pytest.approx([b[k] for k in unc[:3]], abs=1e-5)
        assert a["policy_probs"] == pytest.approx(b["policy_probs"], abs=1e-5)


def test_ppo_only_records_have_recall_zero_and_no_entropies(tmp_path):
    ev = _untrained_evaluator(tmp_path, "empty5x5_random", NeverGate())
    recorder = StepRecorder()
    ev.run([100, 101, 102], on_step=recorder)
    q = gate_quality(recorder.records)
    assert q["gate_wrong"] > 0 and q["gate_recall"] == 0.0 and q["gate_queried"] == 0
    assert all(r["total"] is None and r["consultant"] is None for r in recorder.records)
    assert not any("policy_probs" in r for r in recorder.records)  # only where computed


def test_tallies_by_position_rank_and_decision():
    recs = [
        {"pos": [1, 2], "queried": True, "ppo_optimal": False},
        {"pos": [1, 2], "queried": False, "ppo_optimal": True},
        {"pos": [3, 1], "queried": True, "ppo_optimal": None},
    ]
    t = by_position(recs, 5, 4)
    assert t.steps[2, 1] == 2 and t.query_rate[2, 1] == 0.5 and t.error_rate[2, 1] == 0.5
    assert (
        t.query_rate[1, 3] == 1.0 and np.isnan(t.error_rate[1, 3]) and np.isnan(t.query_rate[0, 0])
    )
    cards = [
        {"rank": 0, "decision": 0, "queried": True, "ppo_optimal": True},
        {"rank": 12, "decision": 1, "queried": False, "ppo_optimal": False},
    ]
    assert by_rank(cards).error_rate[12] == 1.0 and by_decision(cards, 3).query_rate[0] == 1.0


def test_fourrooms_walls_are_fixed_but_for_the_doorways():
    walls = wall_frequency(make_task("fourrooms"), range(100, 110))
    assert walls.shape == (19, 19)
    assert (walls[0] == 1).all() and (walls[:, 0] == 1).all()  # the outer wall
    inner = walls[9, 1:-1]  # the horizontal inner wall: fixed but for its two doorways
    assert ((inner > 0) & (inner <= 1)).all() and (inner < 1).sum() >= 2


# --------------------------------------------------------------------------------------------
# the job: steps.jsonl.gz, and records for a complete cell without them


@pytest.fixture
def records_outside_identity(monkeypatch):
    """eval.step_records is no part of a cell's identity (benchmark.cell.EXECUTION_KEYS)."""
    keys = tuple(dict.fromkeys((*cell.EXECUTION_KEYS["eval"], "step_records")))
    monkeypatch.setitem(cell.EXECUTION_KEYS, "eval", keys)


ORACLE_CELL = [
    "env=higherlower",
    "gate=always",
    "slm=oracle",
    "prompt=basic",
    "eval.n_episodes=4",
    "quiet=true",
]


def test_a_complete_cell_is_reused_without_records_unless_a_rerun_is_asked_for(
    tmp_path, records_outside_identity, caplog, monkeypatch
):
    """Step records come from the cell's evaluation: a complete cell computed without them is
    reused as it is, with a warning that says how to get them, and never evaluated a second
    time; eval.step_records=rerun runs its evaluation again, once, to add them without losing
    its results."""
    import benchmark.job as job

    root = tmp_path / "root"
    first = run_job(compose_cfg(root, *ORACLE_CELL), tmp_path / "a", multirun=False)
    cell_dir = root / "cells" / first["cell_hash"]
    episodes = (cell_dir / "episodes.jsonl").read_bytes()
    before = results.read_json(cell_dir / "summary.json")
    assert not (cell_dir / STEPS_FILE).exists() and "gate_judged" not in before
    evaluations = []
    evaluate = job._evaluate
    monkeypatch.setattr(
        job, "_evaluate", lambda *a, **k: evaluations.append(1) or evaluate(*a, **k)
    )
    caplog.set_level("WARNING")
    reused = run_job(
        compose_cfg(root, *ORACLE_CELL, "eval.step_records=true"), tmp_path / "t", multirun=False
    )
    assert reused == before and evaluations == []  # no second evaluation
    assert not (cell_dir / STEPS_FILE).exists() and not (tmp_path / "t" / STEPS_FILE).exists()
    assert "step records are missing: reused without them" in caplog.text
    assert "eval.step_records=rerun" in caplog.text
    again = run_job(
        compose_cfg(root, *ORACLE_CELL, "eval.step_records=rerun"), tmp_path / "b", multirun=False
    )
    assert evaluations == [1] and again["cell_hash"] == first["cell_hash"]
    assert (cell_dir / "episodes.jsonl").read_bytes() == episodes  # never rewritten
    records = read_steps(tmp_path / "b" / STEPS_FILE)  # published into the job dir too
    assert records == read_steps(cell_dir / STEPS_FILE)
    assert len(records) == 4 * 51 and all(r["action_optimal"] for r in records)
    assert [r["decision"] for r in records[:3]] == [0, 1, 2] and records[0]["ppo"] is None
    stored = results.read_json(cell_dir / "summary.json")
    assert {
        k: v for k, v in stored.items() if not k.startswith(("gate_", "step_records_"))
    } == before
    assert stored["step_records_count"] == len(records) == 4 * 51
    assert stored["gate_queried"] == 0 and again == stored  # SLM-only: no PPO step to judge
    # asked again: nothing to do, the file is not rewritten
    mtime = (cell_dir / STEPS_FILE).stat().st_mtime_ns
    run_job(compose_cfg(root, *ORACLE_CELL, "eval.step_records=rerun"), tmp_path / "c", False)
    assert (cell_dir / STEPS_FILE).stat().st_mtime_ns == mtime and evaluations == [1]


def test_step_records_take_true_false_or_rerun(tmp_path):
    with pytest.raises(ValueError, match=r"eval.step_records='again' is invalid: allowed true"):
        run_job(
            compose_cfg(tmp_path, *ORACLE_CELL, "eval.step_records=again"), tmp_path / "j", False
        )


def test_records_are_refused_when_the_rerun_disagrees_with_the_stored_episodes(
    tmp_path, records_outside_identity
):
    root = tmp_path / "root"
    first = run_job(compose_cfg(root, *ORACLE_CELL), tmp_path / "a", multirun=False)
    cell_dir = root / "cells" / first["cell_hash"]
    rows = results.read_jsonl(cell_dir / "episodes.jsonl")
    rows[1]["accuracy"] = 0.0  # as if the code had changed since the cell was computed
    results.write_jsonl(cell_dir / "episodes.jsonl", rows)
    with pytest.raises(RuntimeError, match="other episodes than its episodes.jsonl"):
        run_job(compose_cfg(root, *ORACLE_CELL, "eval.step_records=rerun"), tmp_path / "b", False)
    assert not (cell_dir / STEPS_FILE).exists()
    assert "gate_judged" not in results.read_json(cell_dir / "summary.json")


def test_a_new_cell_with_records_writes_them_and_its_gate_fields(tmp_path):
    over = ["env=empty5x5_random", *ORACLE_CELL[1:], "eval.step_records=true"]
    summary = run_job(compose_cfg(tmp_path, *over), tmp_path / "job", multirun=False)
    records = read_steps(tmp_path / "job" / STEPS_FILE)
    assert len(records) == sum(
        r["length"] for r in results.read_jsonl(tmp_path / "job" / "episodes.jsonl")
    )
    assert all("pos" in r and "dir" in r and r["action_optimal"] for r in records)
    assert summary["gate_judged"] == 0 and "gate_auroc_total" in summary


# --------------------------------------------------------------------------------------------
# the preset and the report


def test_analysis_preset_records_steps_in_every_cell(tmp_path):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["+experiment=analysis"], return_hydra_config=True)
        params = {k: str(v).split(",") for k, v in cfg.hydra.sweeper.params.items()}
        assert params == {
            "env": ["fourrooms", "doorkey8", "higherlower"],
            "method": ["ppo", "ask"],
            "slm": ["oracle", "random"],
        }
        for combo in itertools.product(*params.values()):
            over = [f"{k}={v}" for k, v in zip(params, combo, strict=True)]
            job = compose(
                "config", overrides=["+experiment=analysis", *over, f"paths.root={tmp_path}"]
            )
            validate(job)
            assert job.eval.step_records is True and job.experiment_name == "analysis"
            if "method=ask" in over:
                assert job.gate.name == "entropy" and job.gate.tau == "auto"
    default = compose_cfg(tmp_path)
    assert default.eval.step_records is False


def _write_job(d, env, gate, slm, records, rows):
    from benchmark.metrics import summarize

    d.mkdir(parents=True)
    summary = summarize(rows)
    summary.update(
        complete=True,
        cell_hash=d.name,
        env=env,
        metric="success" if env != "higherlower" else "accuracy",
        gate=gate,
        slm=slm,
        prompt="basic",
        rationale=False,
        checkpoint="final",
        policy_seed=0,
        mc_samples=8,
        tau=1.9,
        **gate_quality(records),
    )
    results.write_json(d / "summary.json", summary)
    results.write_jsonl(d / "episodes.jsonl", results.split_runtime(rows)[0])
    from benchmark.analysis import write_steps

    write_steps(d / STEPS_FILE, records)


def test_report_has_the_gate_quality_table_roc_curves_and_where_figures(tmp_path):
    from benchmark.report import build_report

    sweep = tmp_path / "sweep"
    for k, (env, tau) in enumerate([("empty5x5_random", 1.981), ("higherlower", 0.996)]):
        ev = _untrained_evaluator(tmp_path, env, EntropyGate(tau))
        recorder = StepRecorder()
        rows = ev.run(list(range(100, 104)), on_step=recorder)
        _write_job(sweep / str(k), env, "entropy", "oracle", recorder.records, rows)
    report = build_report(sweep)
    table = report.table("gate_quality")
    assert [r[0][1] for r in table.rows] == ["HigherLower", "Empty-Random-5x5"]  # ENV_ORDER
    summary = results.read_json(sweep / "0" / "summary.json")
    row = dict(zip(table.header(), table.rows[1][0] + table.rows[1][1], strict=True))
    assert row["help"].startswith("1.000") and row["harm"].startswith("0.000")
    assert row["recall"].startswith(f"{summary['gate_recall']:.3f}")
    names = {p.name for p in report.plots}
    assert {"gate_roc.png", "where_empty5x5_random.png", "where_higherlower.png"} <= names
    assert "## Gate quality against the expert" in report.markdown
    assert "AUROC H" in (sweep / "report" / "gate_quality.csv").read_text()


def test_report_titles_tell_cells_apart_by_checkpoint_and_policy_seed():
    """Three training seeds of one method share a method label: the gate-quality rows and the
    figures' panel titles add the seed (and the checkpoint) only where the shown cells differ."""
    from benchmark.report.analysis import _label
    from benchmark.report.model import Cell, Layout

    def cell(seed, checkpoint="best"):
        return Cell(
            job=str(seed),
            status="ok",
            env="higherlower",
            gate="never",
            checkpoint=checkpoint,
            policy_seed=seed,
        )

    seeds = [cell(0), cell(1), cell(2)]
    assert [_label(c, Layout.of_cells(seeds)) for c in seeds] == ["PPO s0", "PPO s1", "PPO s2"]
    assert _label(seeds[0], Layout.of_cells(seeds[:1])) == "PPO"
    mixed = [cell(0, "best"), cell(0, "final")]
    assert [_label(c, Layout.of_cells(mixed)) for c in mixed] == ["PPO @best", "PPO @final"]


# --------------------------------------------------------------------------------------------
# the records are checked against their cell: count, digest, (seed, step), the episodes' seeds


def test_step_records_are_checked_against_their_cell():
    from benchmark.analysis.steps import check_steps, steps_fields

    records = [{"seed": s, "step": t, "total": 0.5} for s in (100, 101) for t in range(3)]
    episodes = [{"seed": 100, "length": 3}, {"seed": 101, "length": 3}]
    summary = steps_fields(records)
    assert summary == {
        "step_records_count": 6,
        "step_records_sha256": summary["step_records_sha256"],
    }
    assert check_steps(records, summary, episodes) == []
    assert check_steps(records, {}, episodes) == []  # an old summary: the rest still checked
    moved = [dict(r, total=0.6) if i == 2 else r for i, r in enumerate(records)]
    assert check_steps(moved, summary, episodes) == [
        "their SHA-256 is not the one its summary recorded"
    ]
    doubled = records + records[:2]
    assert check_steps(doubled, {}, episodes) == ["2 repeated (seed, step), first (100, 0)"]
    other = records + [{"seed": 7, "step": 0}]
    assert "seeds not the episodes' (extra [7], missing [])" in check_steps(other, {}, episodes)
    short = records[:-1]
    assert check_steps(short, {}, episodes) == [
        "1 episodes with another number of steps (seed 101: 2 records, 3 steps)"
    ]


def test_records_appended_to_a_cells_steps_file_are_refused_by_the_report(tmp_path):
    """Another gzip member appended to steps.jsonl.gz (gzip reads it as more records): the
    report says the job's records do not match its cell and leaves them out of the figures; a
    cell whose summary predates the count and digest is read and said to be unchecked."""
    import gzip

    from benchmark.report import build_report

    over = ["env=empty5x5_random", *ORACLE_CELL[1:], "eval.step_records=true"]
    sweep = tmp_path / "sweep"
    run_job(compose_cfg(tmp_path / "root", *over), sweep / "0", multirun=False)
    clean = build_report(sweep, tmp_path / "clean")
    assert "## Step records" not in clean.markdown
    assert "where_empty5x5_random.png" in {p.name for p in clean.plots}

    path = sweep / "0" / STEPS_FILE
    original = path.read_bytes()
    records = read_steps(path)
    extra = [dict(r, step=r["step"] + 1000, queried=True) for r in records[:5]]
    with path.open("ab") as f:  # a second gzip member: more records after the first
        f.write(gzip.compress("".join(json.dumps(r) + "\n" for r in extra).encode()))
    assert len(read_steps(path)) == len(records) + 5
    text = build_report(sweep, tmp_path / "tampered").markdown
    assert "## Step records" in text
    assert (
        f"- job 0: step records refused, left out of the step-record tables and figures: {path} "
        f"does not match its cell: {len(records) + 5} records, its summary says {len(records)}; "
        "their SHA-256 is not the one its summary recorded; " in text
    )

    # the cell's own copy too (later sweeps copy it): a job that reuses the cell says so and,
    # asked to rerun for step records, writes them again
    cell_steps = (
        tmp_path
        / "root"
        / "cells"
        / results.read_json(sweep / "0" / "summary.json")["cell_hash"]
        / STEPS_FILE
    )
    cell_steps.write_bytes(path.read_bytes())
    rerun = [*over[:-1], "eval.step_records=rerun"]
    run_job(compose_cfg(tmp_path / "root", *rerun), tmp_path / "again", multirun=False)
    assert read_steps(cell_steps) == records == read_steps(tmp_path / "again" / STEPS_FILE)

    path.write_bytes(original)  # the records as written, under a summary from before the digest
    summary = results.read_json(sweep / "0" / "summary.json")
    for key in ("step_records_count", "step_records_sha256"):
        summary.pop(key)
    results.write_json(sweep / "0" / "summary.json", summary)
    old = build_report(sweep, tmp_path / "old")
    assert "- jobs 0: step records unchecked (their summary.json predates" in old.markdown
    assert "where_empty5x5_random.png" in {p.name for p in old.plots}
