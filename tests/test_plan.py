"""`python -m benchmark.plan`: a smoke-sized sweep with real cells computed, one failed, others
pending, each with the right status and counts, and a projection that is the counted work
divided by the given throughput. Also `make bench`'s progress lines (benchmark.bench.cpu)."""

from __future__ import annotations

import csv
import json
import os
import statistics

import pytest

from benchmark import results, workers
from benchmark.build import locate_inputs, prepare
from benchmark.job import run_job
from benchmark.plan import plan_sweep
from benchmark.plan_data import COMPLETE, FAILED, INVALID, PENDING
from benchmark.plan_estimate import Throughput
from benchmark.plan_format import format_plan
from tests.conftest import SMALL_POLICY, compose_cfg, run_cli

STEP_LIMIT = 100  # empty5x5_random's evaluation step limit
CAP_ASK_PLUS = 64 + 10 + len("</think>\n\n")  # rationale tokens, thinking budget, closing tag
SMALL = ["env=empty5x5_random", "eval.n_episodes=2", "tuning.n_trials=2", "tuning.n_episodes=2"]


@pytest.fixture(scope="module")
def sweep(trained_root, tmp_path_factory):
    """(root, the sweep's overrides): SLM-only oracle s0 and dice s0 and ASK oracle s0
    computed, SLM-only oracle s1 failed after its cell dir was made, the rest pending."""
    tmp = tmp_path_factory.mktemp("plan")
    root = tmp / "out"
    base = [*SMALL, *SMALL_POLICY, f"paths.checkpoints={trained_root / 'checkpoints'}"]

    def run(*overrides: str, multirun: bool = False):
        cfg = compose_cfg(root, *base, "quiet=true", *overrides)
        return run_job(cfg, tmp / "-".join(overrides), multirun)

    for over in (
        "method=slm_only slm=oracle",
        "method=slm_only slm=random",
        "method=ask slm=oracle",
    ):
        assert run(*over.split(), "seed=0") is not None
    original = workers.run  # what a job's evaluation runs through (eval.workers)

    def crash(*args, **kwargs):
        raise RuntimeError("consultant crashed\nsecond line of the message")

    workers.run = crash
    try:
        assert run("method=slm_only", "slm=oracle", "seed=1", multirun=True) is None
    finally:
        workers.run = original
    return root, [
        f"paths.root={root}",
        *base,
        "method=slm_only,ask",
        "slm=oracle,random,tiny",
        "seed=0,1",
    ]


@pytest.mark.slow
def test_statuses_counts_and_projection(sweep):
    root, overrides = sweep
    plan = plan_sweep(overrides, throughput=Throughput(queries_per_s=4.0))
    assert plan.jobs == 12 and len(plan.cells) == 12
    by = {(c.overrides[-3], c.slm, c.overrides[-1]): c for c in plan.cells}
    statuses = [COMPLETE, FAILED, COMPLETE, PENDING, PENDING, PENDING]  # per method, in job order
    assert [c.status for c in plan.cells] == [*statuses, COMPLETE, *[PENDING] * 5]
    only = {(slm, seed): by[("method=slm_only", slm, f"seed={seed}")] for slm, seed in by_slm()}
    ask = {(slm, seed): by[("method=ask", slm, f"seed={seed}")] for slm, seed in by_slm()}
    failed = only[("oracle", 1)]
    assert failed.note == "RuntimeError: consultant crashed"
    assert (root / "cells" / failed.hash / "error.json").exists()
    assert all(c.work is None and c.hash for c in plan.cells if c.status == COMPLETE)

    # failed and pending cells are work: 2 episodes, at most 100 steps each
    for c in (failed, only[("random", 1)], only[("tiny", 0)], only[("tiny", 1)]):
        assert (c.work.episodes, c.work.tuning_trials) == (2, 0)
        assert c.work.max_steps == 2 * STEP_LIMIT
    # SLM-only: the consultant decides how long an episode lasts, so always the bound (IR 1)
    tiny = only[("tiny", 0)].work
    assert tiny.basis.startswith("bound") and tiny.calls == tiny.calls_max == 2 * STEP_LIMIT
    assert tiny.generated_tokens == 2 * STEP_LIMIT * CAP_ASK_PLUS and tiny.prompt_tokens is None

    # ASK tiny s0 is measured from the complete ASK oracle s0 (same policy and tau settings);
    # its own study (another consultant) still needs both trials
    ref = ask[("oracle", 0)]
    summary, episodes = results.complete_cell(root / "cells" / ref.hash)
    with open(root / "cells" / ref.hash / "trials.csv") as f:
        irs = [float(r["ir"]) for r in csv.DictReader(f)]
    steps = sum(e["length"] for e in episodes)
    tuning_calls = round(2 * 2 * steps / len(episodes) * statistics.fmean(irs))
    work = ask[("tiny", 0)].work
    assert work.basis == f"measured: oracle cell {ref.hash}"
    assert (work.episodes, work.tuning_trials, work.tuning_episodes) == (2, 2, 4)
    assert work.max_steps == (2 + 4) * STEP_LIMIT
    assert work.calls == summary["queries_total"] + tuning_calls
    assert work.generated_tokens == work.calls * 8  # basic prompt: 8 answer tokens a call
    assert ask[("tiny", 1)].work.basis.startswith("bound")  # no ASK oracle s1

    # the projection is the counted work / the given throughput, for LM cells only
    lm = [c for c in plan.cells if c.work is not None and c.lm]
    assert {c.slm for c in lm} == {"tiny"} and len(lm) == 4
    assert all(c.projected_s == c.work.calls / 4.0 for c in lm)
    assert all(c.projected_s is None for c in plan.cells if not c.lm)
    assert Throughput(tokens_per_s=50.0).seconds(work) == work.generated_tokens / 50
    both = Throughput(queries_per_s=4.0, tokens_per_s=1e9)
    assert both.seconds(work) == work.calls / 4.0  # the slower of the two
    totals = plan.totals()
    assert (totals[COMPLETE], totals[FAILED], totals[PENDING]) == (3, 1, 8)
    assert (
        totals["episodes"] == 9 * 2 and totals["projected_s"] == sum(c.work.calls for c in lm) / 4
    )
    text = format_plan(plan)
    assert "3 complete, 1 failed, 8 pending" in text and "RuntimeError: consultant crashed" in text

    # the CLI says the same (--json)
    proc = run_cli(root, *overrides, "--json", "--queries-per-s", "4", module="benchmark.plan")
    data = json.loads(proc.stdout)
    assert data["totals"] == totals
    assert [c["status"] for c in data["cells"]] == [c.status for c in plan.cells]


def by_slm():
    return [(slm, seed) for slm in ("oracle", "random", "tiny") for seed in (0, 1)]


def test_tuning_trials_left_and_inputs_changed(tmp_path):
    """A cell whose checkpoint at policy.path was replaced is flagged with the old hash; the
    trials its study already holds are not counted again."""
    from benchmark.tuning import tune

    root, ckpt = tmp_path / "out", tmp_path / "mine.zip"
    ckpt.write_bytes(b"weights A")
    over = [
        f"paths.root={root}",
        "env=empty5x5_random",
        f"policy.path={ckpt}",
        "gate=entropy",
        "prompt=basic",
        "slm=oracle",
        "eval.n_episodes=2",
        "tuning.n_trials=3",
        "tuning.n_episodes=2",
    ]
    cfg = compose_cfg(root, *over)
    _, _, spec = prepare(cfg)
    old = locate_inputs(spec, cfg, ckpt)
    results.write_json(old.dir(root) / "cell.json", old.record())  # computed with weights A
    ckpt.write_bytes(b"weights B")
    new = locate_inputs(spec, cfg, ckpt)
    study = root / "tuning" / new.inputs["tau_study"]
    tune(
        lambda tau, seeds: (0.5, 0.25),
        study,
        tau_range=(0.1, 1.0),
        n_trials=2,
        seeds=[0, 1],
        sampler_seed=0,
        max_reward=1.0,
    )
    journal = study / "study.journal"
    before = journal.read_bytes()
    (cell,) = plan_sweep(over).cells
    assert journal.read_bytes() == before  # read-only
    assert cell.status == PENDING and cell.hash == new.hash != old.hash
    assert cell.changed_from == old.hash
    assert cell.note == f"inputs changed since {old.hash} (policy checkpoint, tuning study)"
    assert cell.work.tuning_trials == 1 and cell.work.tuning_episodes == 2
    assert cell.work.max_steps == STEP_LIMIT * (2 + 2)


def test_untrained_policy_and_invalid_values(tmp_path):
    over = [f"paths.root={tmp_path}", "env=empty5x5_random", "method=ask", "slm=oracle"]
    plan = plan_sweep([*over, "policy.checkpoint=best,t9", "tuning.n_trials=4"])
    untrained, invalid = plan.cells
    assert untrained.status == PENDING and untrained.hash is None
    assert untrained.note == "policy not trained"
    assert untrained.work.tuning_trials == 4 and untrained.work.calls == untrained.work.calls_max
    assert invalid.status == INVALID and invalid.work is None
    assert invalid.note.startswith("ValueError: policy.checkpoint=t9 is invalid")


def test_a_checkpoint_that_fails_its_manifest_is_changed_or_corrupt(trained_root, tmp_path):
    """A zip that no longer matches COMPLETE was shown as "policy not trained"."""
    import shutil

    from benchmark.policy.checkpoints import checkpoint_dir

    over = ["env=empty5x5_random", "gate=never", *SMALL_POLICY]
    source = checkpoint_dir(compose_cfg(trained_root, *over))
    over.append(f"paths.root={tmp_path}")
    ckpt_dir = tmp_path / "checkpoints" / source.name
    shutil.copytree(source, ckpt_dir)
    (ckpt_dir / "best.zip").write_bytes((ckpt_dir / "best.zip").read_bytes()[:100])
    (cell,) = plan_sweep(over).cells
    assert cell.status == PENDING and cell.hash is None
    assert cell.note.startswith(f"checkpoint changed or corrupt (best.zip in {ckpt_dir.name}")
    (ckpt_dir / "COMPLETE").write_text("{trunc")
    (cell,) = plan_sweep(over).cells
    assert cell.note.startswith(f"checkpoint changed or corrupt ({ckpt_dir.name}/COMPLETE")


def test_bench_prints_each_section_and_the_time_left(tmp_path, capsys):
    from benchmark.bench.cpu import CpuBench
    from benchmark.bench.cpu_settings import QUICK, SECTIONS

    class Instant(CpuBench):
        pass

    for name in SECTIONS:
        setattr(Instant, f"section_{name}", lambda self: {})
    Instant(tmp_path, tmp_path, QUICK, 1).run(expected_s={n: 10.0 for n in SECTIONS})
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(SECTIONS) + 1
    for k, (line, name) in enumerate(zip(lines, SECTIONS, strict=False)):
        assert line.startswith(f"bench: {10 * k}/{10 * len(SECTIONS)} s as last timed")
        assert f"running {name} ({k + 1}/{len(SECTIONS)})" in line
        assert ("ETA" in line) == (k > 0)
    total = 10 * len(SECTIONS)
    assert lines[-1].startswith(f"bench: {total}/{total}") and "all sections done" in lines[-1]


def test_throughput_per_model_from_the_newest_bench_json(tmp_path):
    """`make bench-gpu`'s figures at its largest batch for each model (dry runs skipped), `make
    bench`'s lockstep figure for the tiny model; the newest file wins."""
    from benchmark.plan_estimate import bench_throughputs

    def tp(q, t=None):
        return {"queries_per_s": q, "generated_tokens_per_s": t}

    files = {
        "old-gpu.json": {
            "kind": "gpu",
            "device": "NVIDIA H200",
            "models": {"qwen3.5-2b": {"throughput": {"1": tp(1.0)}}, "qwen3.5-4b": {}},
        },
        "gpu.json": {
            "kind": "gpu",
            "device": "NVIDIA H200",
            "models": {"qwen3.5-2b": {"throughput": {"8": tp(20.0, 300.0), "32": tp(60.0, 900.0)}}},
        },
        "cpu.json": {
            "kind": "cpu",
            "sections": {"evaluation": {"median": {"lockstep": {"queries_per_s": 49.0}}}},
        },
        "dry.json": {"kind": "gpu", "dry_run": True, "models": {"qwen3.5-2b": {"throughput": {}}}},
    }
    for age, (name, data) in enumerate(files.items()):
        (tmp_path / name).write_text(json.dumps(data))
        os.utime(tmp_path / name, (1000 + age, 1000 + age))
    found = bench_throughputs(tmp_path)
    assert set(found) == {"qwen3.5-2b", "tiny"}
    qwen = found["qwen3.5-2b"]
    assert (qwen.queries_per_s, qwen.tokens_per_s) == (60.0, 900.0)
    assert qwen.source == "gpu.json: qwen3.5-2b at batch 32 on NVIDIA H200"
    assert found["tiny"].queries_per_s == 49.0 and found["tiny"].tokens_per_s is None
    only = bench_throughputs(tmp_path, tmp_path / "old-gpu.json")
    assert only["qwen3.5-2b"].queries_per_s == 1.0


def test_bench_time_left_comes_from_the_last_run_of_the_same_size(tmp_path):
    from benchmark.bench.__main__ import last_section_seconds

    assert last_section_seconds(tmp_path, quick=True) is None
    for name, quick, seconds in (("a.json", True, 3.0), ("b.json", False, 90.0)):
        data = {"kind": "cpu", "quick": quick, "sections": {"gate": {"seconds": seconds}}}
        (tmp_path / name).write_text(json.dumps(data))
    assert last_section_seconds(tmp_path, quick=True) == {"gate": 3.0}
    assert last_section_seconds(tmp_path, quick=False) == {"gate": 90.0}


def test_plan_builds_no_model_and_trains_nothing(tmp_path):
    """Computing a cell's identity has no side effect: on a fresh root, the plan of
    SLM-only and ASK cells with the tiny model and a fine-tuned one (whose recipe needs the tiny
    base and a PPO policy) builds no model, trains no policy and writes nothing; the cells are
    pending with "model not built yet" (or "policy not trained")."""
    import benchmark.policy.checkpoints as checkpoints

    root = tmp_path / "fresh"

    def no_training(*args, **kwargs):
        raise AssertionError("plan trained a policy")

    saved, checkpoints.train = checkpoints.train, no_training
    try:
        plan = plan_sweep(
            [
                f"paths.root={root}",
                "env=empty5x5_random",
                "eval.n_episodes=2",
                "method=slm_only,ask",
                "slm=tiny,finetuned",
            ]
        )
    finally:
        checkpoints.train = saved
    assert not root.exists() or not any(root.rglob("*")), sorted(root.rglob("*"))
    by = {(c.overrides[-2], c.overrides[-1][4:]): c for c in plan.cells}
    assert len(by) == 4 and all(c.status == PENDING and c.hash is None for c in plan.cells)
    assert by[("method=slm_only", "tiny")].note.startswith("model not built yet: tiny model")
    assert by[("method=slm_only", "finetuned")].note == (
        "model not built yet: fine-tuned model not made yet (its PPO policy is not trained)"
    )
    assert by[("method=ask", "tiny")].note.startswith("policy not trained")
    totals = plan.totals()
    assert (totals["model_not_built"], totals["policy_not_trained"]) == (2, 2)
    assert "2 model not built" in format_plan(plan)


@pytest.mark.parametrize(("protocol", "studies"), [("paper", 1), ("official", 2)])
def test_a_shared_study_is_counted_once_in_a_fresh_root(tmp_path, protocol, studies):
    """Table 1 under the paper protocol: ASK reuses ASK+'s study (tuning.scope=shared), so a
    root where no policy is trained yet still needs one study, not one per cell."""
    over = [f"paths.root={tmp_path}", "+experiment=table1", f"protocol={protocol}"]
    one_policy = "ppo_baseline=recipe"  # not also the matched checkpoint (its own study)
    plan = plan_sweep([*over, "env=fourrooms", "method=ask,ask_plus", "slm=qwen3.5-2b", one_policy])
    assert [c.note for c in plan.cells] == ["policy not trained"] * 2
    assert plan.totals()["tuning_trials"] == studies * 15


def test_a_shared_study_is_bounded_by_the_prompt_it_tunes_with(tmp_path):
    """ASK's share of ASK+'s study costs what ASK+'s prompt (with a rationale) may generate: the
    pair's bound is ASK+ with its study plus ASK's evaluation alone (a fixed tau)."""
    over = [f"paths.root={tmp_path}", "+experiment=table1", "env=fourrooms", "slm=qwen3.5-2b"]

    def bound(*more: str) -> int:
        return plan_sweep([*over, *more]).totals()["generated_tokens_max"]

    both, ask_plus = bound("method=ask,ask_plus"), bound("method=ask_plus")
    assert both == ask_plus + bound("method=ask", "gate.tau=1.0")


# the papers' remaining tables and figures: preset -> (jobs, cells) of its plan, and with slm=tiny
PRESET_PLANS = {
    "feedback_curves": ((3, 3), (3, 3)),
    "feedback_table5": ((6, 6), (3, 3)),
    "slm_only_prompts": ((30, 30), (15, 15)),
    "released_mc_samples": ((30, 30), (15, 15)),
    # 11 grid points per env: DoorKey's 8 taus and HigherLower's 10 leave 3 + 1 repeated points
    "released_tau_grid": ((66, 58), (33, 29)),
    "fig2_tau": ((60, 60), (30, 30)),
}
BIG_PLANS = {"slm_only_prompts", "released_mc_samples", "released_tau_grid", "fig2_tau"}


@pytest.mark.parametrize(
    "preset",
    [pytest.param(p, marks=pytest.mark.slow) if p in BIG_PLANS else p for p in PRESET_PLANS],
)
def test_plan_lists_the_cells_of_each_paper_preset(preset, tmp_path):
    """`python -m benchmark.plan +experiment=<preset>` in a fresh root: the preset's jobs and
    distinct cells, each pending (with slm=tiny; a hub model not in the local cache would make
    the cell invalid here), and one row per cell in the printed plan."""
    full, tiny = PRESET_PLANS[preset]
    over = [f"paths.root={tmp_path}", f"+experiment={preset}"]
    plan = plan_sweep(over)
    assert (plan.jobs, len(plan.cells)) == full
    plan = plan_sweep([*over, "slm=tiny"])
    assert (plan.jobs, len(plan.cells)) == tiny
    assert {c.status for c in plan.cells} == {PENDING}
    text = format_plan(plan)
    assert sum(line.startswith(PENDING) for line in text.splitlines()) == tiny[1]


def test_rows_of_a_tau_grid_name_their_tau(tmp_path):
    """Cells that differ only by a fixed tau are told apart in the plan's rows; a tuned tau is
    not named (it is not known before the study)."""
    grid = plan_sweep(
        [
            f"paths.root={tmp_path}",
            "env=empty5x5_random",
            "method=ask",
            "slm=oracle",
            "gate.tau=0.25,1.5",
        ]  # fmt: skip
    )
    names = [c.name for c in grid.cells]
    assert len(names) == 2 and names[0].endswith(" tau=0.25") and names[1].endswith(" tau=1.5")
    tuned = plan_sweep(
        [f"paths.root={tmp_path}", "env=empty5x5_random", "method=ask", "slm=oracle"]
    )
    assert "tau=" not in tuned.cells[0].name


def test_table1_plans_the_recipes_and_the_matched_ppo_rows(tmp_path):
    """`python -m benchmark.plan +experiment=table1`: every PPO-using cell twice, at the recipe's
    checkpoint (paper: final) and at `match` (the saved checkpoint nearest the paper's PPO
    success of that env); SLM-only uses no policy, so its two jobs are one cell."""
    over = [f"paths.root={tmp_path}", "+experiment=table1", "slm=tiny"]
    plan = plan_sweep(over)
    assert (plan.jobs, len(plan.cells)) == (24, 21)
    rows = format_plan(plan).splitlines()
    # the recipe's checkpoint: paper's `final`; DoorKey trains the suite's recipe (`best`)
    for env, own in (("fourrooms", "final"), ("doorkey8", "best"), ("higherlower", "final")):
        for checkpoint in (own, "match"):
            assert sum(f"{env}/never/{checkpoint}-s0" in r for r in rows) == 1, (env, checkpoint)
    targets = {
        env: compose_cfg(tmp_path, "+experiment=table1", f"env={env}", "ppo_baseline=match")
        for env in ("fourrooms", "doorkey8", "higherlower")
    }
    assert {e: (c.policy.checkpoint, c.policy.match_success) for e, c in targets.items()} == {
        "fourrooms": ("match", 0.53),
        "doorkey8": ("match", 0.89),
        "higherlower": ("match", 0.72),
    }
    suite = plan_sweep([*over, "protocol=suite"])  # the suite recipe's own checkpoint: best
    assert sum("fourrooms/never/best-s0" in r for r in format_plan(suite).splitlines()) == 1


def test_a_refused_match_is_said_as_refused_not_untrained(trained_root):
    """policy.checkpoint=match with every saved checkpoint beyond the tolerance: the plan names
    the refusal (the line the job would fail with), not "policy not trained"."""
    over = ["env=empty5x5_random", "gate=never", *SMALL_POLICY, "policy.checkpoint=match",
            f"paths.root={trained_root}"]  # fmt: skip
    (far,) = plan_sweep([*over, "policy.match_success=0.5"]).cells  # every checkpoint at 1.0
    assert far.status == PENDING and far.hash is None
    assert far.note.startswith("policy.checkpoint=match refused for empty5x5_random"), far.note
    assert "\n" not in far.note
    (near,) = plan_sweep([*over, "policy.match_success=0.95"]).cells
    assert near.hash is not None and "refused" not in near.note
