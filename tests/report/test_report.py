"""The sweep report on a synthetic sweep dir written the way job.py and Hydra write one: numbers
in the tables match the summaries, failed and missing cells are marked, the paired comparison
matches a hand computation, plots and CSVs are written."""

from __future__ import annotations

import csv
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf

from benchmark.cell import CellSpec
from benchmark.config import expand_sweep
from benchmark.envs import available_envs, get_family, load_env_cfg
from benchmark.metrics import episode_rates, summarize
from benchmark.report import build_report, load_sweep
from benchmark.report.__main__ import main as report_main
from benchmark.report.__main__ import tracking_config
from benchmark.report.loading import LABELS
from benchmark.report.model import ENV_ORDER, Layout, env_kind, env_label, method_label
from tests.conftest import compose_cfg

REPO = Path(__file__).resolve().parents[2]
METRIC = {"fourrooms": "success", "higherlower": "accuracy"}
SEEDS = list(range(100, 120))


def episodes(
    env: str, gate: str, skill: float, seed: int, seeds=SEEDS, every_step: bool = False
) -> list[dict]:
    """`every_step`: a gated cell that asks at every step of every episode (IR 1)."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in seeds:
        length = int(rng.integers(20, 200))
        queries = {"never": 0, "always": length}.get(gate, int(rng.integers(0, length)))
        if gate == "entropy" and s % 4 == 0:
            queries = 0  # a gated cell has query-free episodes (they hold no invalid rate)
        if every_step:
            queries = length
        row = {
            "seed": s,
            "length": length,
            "queries": queries,
            "overwrites": None if gate == "always" else int(rng.integers(0, queries + 1)),
            "invalid": int(rng.integers(0, queries + 1)) // 4,
            "prompt_tokens": 300 * queries,
            "generated_tokens": 5 * queries,
            "calls": queries,
        }
        if METRIC[env] == "success":
            row["success"] = bool(rng.random() < skill)
            row["reward"] = float(row["success"]) * float(1 - 0.9 * length / 500)
        else:
            row["accuracy"] = float(np.clip(rng.normal(skill, 0.1), 0, 1))
            row["reward"] = (2 * row["accuracy"] - 1) * 51 / 52
        rows.append(episode_rates(row))
    rng.shuffle(rows)  # the report must match episodes by seed, not by position
    return rows


@functools.cache
def composed(root: Path, *groups: str) -> str:
    """The config composed with these config-group choices (once per choice, for speed)."""
    return OmegaConf.to_yaml(compose_cfg(root, *groups, "experiment_name=synthetic"))


def job_config(root: Path, overrides: list[str]) -> str:
    """The job's config as Hydra saves it (.hydra/config.yaml: composed, unresolved)."""
    groups = [o for o in overrides if o.split("=")[0] in ("env", "gate", "slm", "prompt")]
    cfg = OmegaConf.create(composed(root, *groups))
    for o in overrides:
        if o not in groups:
            key, value = o.split("=", 1)
            OmegaConf.update(cfg, key, yaml.safe_load(value))
    return OmegaConf.to_yaml(cfg)


def write_job(
    root: Path,
    num: int,
    *,
    env: str,
    gate: str,
    slm=None,
    prompt=None,
    rationale=False,
    tau="auto",
    checkpoint="final",
    policy_seed=0,
    skill=0.5,
    status="ok",
    ckpt_dir: Path | None = None,
    seeds=SEEDS,
    every_step: bool = False,
    extra: tuple[str, ...] = (),
) -> dict | None:
    d = root / str(num)
    (d / ".hydra").mkdir(parents=True)
    overrides = [f"env={env}", f"gate={gate}", f"policy.checkpoint={checkpoint}", *extra]
    if slm:
        overrides += [f"slm={slm}", f"prompt={prompt}", f"prompt.rationale={rationale}"]
    if gate == "entropy":
        overrides.append(f"gate.tau={tau}")
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    mc = ["gate.mc_samples=10"] if gate == "entropy" else []
    cfg = job_config(root, [*overrides, f"policy.seed={policy_seed}", *mc])
    (d / ".hydra" / "config.yaml").write_text(cfg)
    spec = CellSpec.from_config(OmegaConf.create(cfg))
    config, name = spec.config, spec.name  # what error.json and the summary hold
    if status == "missing":
        return None
    if status == "failed":
        (d / "error.json").write_text(
            json.dumps(
                {
                    "cell": name,
                    "type": "RuntimeError",
                    "message": "CUDA out of memory | while batching",
                    "traceback": "Traceback ...",
                    "config": config,
                }
            )
        )
        return None
    rows = episodes(env, gate, skill, seed=num, seeds=seeds, every_step=every_step)
    summary = summarize(rows)
    tuned = gate == "entropy" and tau == "auto"
    summary.update(
        complete=True,
        cell=name,
        cell_hash=f"h{num:011d}",
        env=env,
        metric=METRIC[env],
        gate=gate,
        slm=slm,
        prompt=prompt,
        rationale=rationale if slm else None,
        checkpoint=checkpoint if gate != "always" else None,
        checkpoint_path=str(ckpt_dir / f"{checkpoint}.zip")
        if ckpt_dir and gate != "always"
        else None,
        policy_seed=policy_seed if gate != "always" else None,
        tau=0.8 + num / 100 if tuned else (tau if gate == "entropy" else None),
        mc_samples=10 if gate == "entropy" else None,
        split="test",
        seeds=[min(seeds), max(seeds), len(seeds)],
        wall_seconds=12.5,
        experiment="synthetic",
        cache={"hits": 3, "misses": 9},
    )
    (d / "summary.json").write_text(json.dumps(summary))
    (d / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "episode_costs.jsonl").write_text(
        "".join(json.dumps({"seed": r["seed"], "consultant_seconds": 0.1}) + "\n" for r in rows)
    )
    if tuned:
        with open(d / "trials.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["trial", "tau", "reward", "ir", "seeds"])
            for t, tau_t in enumerate([0.2, 0.7, 1.3, 1.9]):
                w.writerow([t, tau_t, 0.4 + 0.1 * t, 1 - tau_t / 2, "[0, 4]"])
    return summary


def write_checkpoint_dir(root: Path, env: str) -> Path:
    d = root / "checkpoints" / f"{env}-abc123def456"
    d.mkdir(parents=True)
    with open(d / "curve.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["timesteps", "eval_reward", "eval_success", "wall_seconds"])
        for i, t in enumerate(range(5000, 40001, 5000)):
            w.writerow([t, 0.05 * i, min(1.0, 0.1 * i), 2.0 * i])
    for name, t, r in (
        ("r010", 15000, 0.10),
        ("r030", 35000, 0.30),
        ("best", 40000, 0.35),
        ("final", 40000, 0.35),
    ):
        (d / f"{name}.zip").write_bytes(b"PK")
        meta = {"name": name, "timesteps": t, "eval_reward": r, "eval_success": r}
        (d / f"{name}.json").write_text(json.dumps(meta))
    (d / "config.json").write_text(
        json.dumps({"env": {"name": env}, "policy": {"seed": 0, "thresholds": [0.1, 0.3, 0.5]}})
    )
    return d


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("sweep")
    sweep_dir = root / "sweeps" / "synthetic" / "2025-01-01_00-00-00_abcdef"
    sweep_dir.mkdir(parents=True)
    (sweep_dir / "multirun.yaml").write_text(
        yaml.safe_dump(
            {
                "experiment_name": "synthetic",
                "tracking": {
                    "enabled": False,
                    "project": "ask-benchmark",
                    "mode": "offline",
                    "dir": "${paths.root}/wandb",
                },
                "paths": {"root": str(root)},
                "hydra": {
                    "sweeper": {"params": {}},
                    "overrides": {"task": []},
                    "runtime": {"cwd": str(root)},
                },
            }
        )
    )
    ckpts = {env: write_checkpoint_dir(root, env) for env in METRIC}
    summaries: dict[str, dict] = {}
    num = 0

    def job(key: str, **kw) -> None:
        nonlocal num
        summaries[key] = write_job(sweep_dir, num, ckpt_dir=ckpts[kw["env"]], **kw)
        summaries[key + "#job"] = num
        num += 1

    for env in METRIC:
        job(
            f"ppo/{env}", env=env, gate="never", skill=0.5, seeds=list(range(100, 125))
        )  # more seeds than the others: pairing intersects
        job(
            f"slm/{env}",
            env=env,
            gate="always",
            slm="tiny",
            prompt="stateful",
            rationale=True,
            skill=0.3,
        )
        job(f"ask/{env}", env=env, gate="entropy", slm="tiny", prompt="basic", skill=0.55)
        for tau in (0.5, 1.0, 1.5):
            status = "failed" if (env, tau) == ("higherlower", 1.0) else "ok"
            job(
                f"ask+/{env}/{tau}",
                env=env,
                gate="entropy",
                slm="tiny",
                prompt="stateful",
                rationale=True,
                tau=tau,
                skill=0.6 + tau / 10,
                status=status,
            )
        for ckpt in ("r010", "r030"):
            job(f"ppo/{env}/{ckpt}", env=env, gate="never", checkpoint=ckpt, skill=0.2)
            job(
                f"ask+/{env}/{ckpt}",
                env=env,
                gate="entropy",
                slm="tiny",
                prompt="stateful",
                rationale=True,
                tau=1.0,
                checkpoint=ckpt,
                skill=0.4,
                status="missing" if (env, ckpt) == ("fourrooms", "r030") else "ok",
            )
    report = build_report(sweep_dir)
    return {"dir": sweep_dir, "report": report, "summaries": summaries, "root": root}


def _row(table, *index) -> list[str]:
    for idx, vals in table.rows:
        if idx[: len(index)] == list(index):
            return dict(zip(table.header(), idx + vals, strict=True))
    raise AssertionError(f"no row {index} in {[r[0] for r in table.rows]}")


def test_main_table_numbers_match_summaries(sweep):
    main = sweep["report"].table("main")
    assert main.index == ["method", "checkpoint"]  # checkpoints vary: table3-like rows
    assert [g for g, _ in main.groups] == ["FourRooms", "HigherLower"]
    assert main.groups[0][1] == ["reward", "success", "IR", "OR", "invalid"]
    assert main.groups[1][1][1] == "accuracy"
    s = sweep["summaries"]["ask+/fourrooms/0.5"]
    row = _row(main, "ASK+ tiny τ=0.5", "final")
    assert row["FourRooms: reward"] == (
        f"{s['reward_mean']:.3f} [{s['reward_ci95_low']:.2f}, {s['reward_ci95_high']:.2f}]"
    )
    assert row["FourRooms: success"].startswith(f"{s['success_mean']:.3f} [")
    assert row["FourRooms: IR"].startswith(f"{s['ir_mean']:.3f} [")
    assert row["FourRooms: OR"].startswith(f"{s['or_mean']:.3f} [")
    assert row["FourRooms: invalid"] == (
        f"{s['invalid_rate_pooled']:.3f} "
        f"[{s['invalid_rate_pooled_ci95_low']:.2f}, {s['invalid_rate_pooled_ci95_high']:.2f}]"
    )
    hl = sweep["summaries"]["slm/higherlower"]
    slm = _row(main, "SLM-only tiny", "—")
    assert slm["HigherLower: accuracy"].startswith(f"{hl['accuracy_mean']:.3f} [")
    assert slm["HigherLower: OR"] == "—"  # no policy, no overwrites
    ppo = _row(main, "PPO", "final")
    assert ppo["FourRooms: IR"] == "0.000 [0.00, 0.00]"
    assert ppo["FourRooms: invalid"] == "—"  # never asked: no invalid rate
    assert _row(main, "ASK tiny τ=auto", "final")["FourRooms: reward"].startswith(
        f"{sweep['summaries']['ask/fourrooms']['reward_mean']:.3f}"
    )
    # weakest checkpoint first, method order PPO, SLM-only, ASK, ASK+ within a checkpoint
    labels = [(idx[1], idx[0]) for idx, _ in main.rows]
    assert (
        labels.index(("r010", "PPO"))
        < labels.index(("r030", "PPO"))
        < labels.index(("final", "PPO"))
        < labels.index(("final", "ASK tiny τ=auto"))
    )


def test_main_table_shows_the_chosen_rate_definitions(sweep):
    """IR and OR: per-episode means (ASK+ Table 1); invalid: pooled over queries, so episodes
    without queries count neither as 0% invalid nor at all. Details: both figures of each."""
    d, main = sweep["dir"], sweep["report"].table("main")
    job = sweep["summaries"]["ask+/fourrooms/0.5#job"]
    eps = [json.loads(x) for x in (d / str(job) / "episodes.jsonl").open()]
    asked = [e for e in eps if e["queries"]]
    assert 0 < len(asked) < len(eps)  # the cell has query-free episodes
    ir_mean = np.mean([e["queries"] / e["length"] for e in eps])
    ir_pooled = sum(e["queries"] for e in eps) / sum(e["length"] for e in eps)
    or_mean = np.mean([e["overwrites"] / e["length"] for e in eps])
    or_pooled = sum(e["overwrites"] for e in eps) / sum(e["length"] for e in eps)
    invalid_pooled = sum(e["invalid"] for e in asked) / sum(e["queries"] for e in asked)
    invalid_mean = np.mean([e["invalid"] / e["queries"] for e in asked])
    zero_filled = np.mean([e["invalid_rate"] for e in eps])  # the old reading: 0% when not asked
    for a, b in ((ir_mean, ir_pooled), (or_mean, or_pooled), (invalid_pooled, zero_filled)):
        assert f"{a:.3f}" != f"{b:.3f}"  # the synthetic numbers tell the definitions apart
    row = _row(main, "ASK+ tiny τ=0.5", "final")
    assert row["FourRooms: IR"].startswith(f"{ir_mean:.3f} [")
    assert row["FourRooms: OR"].startswith(f"{or_mean:.3f} [")
    assert row["FourRooms: invalid"].startswith(f"{invalid_pooled:.3f} [")
    notes = " ".join(main.notes)
    assert "IR = queried steps / steps, mean over episodes" in notes
    assert "invalid = unparseable answers / queries, pooled over all queries" in notes
    details = _row(sweep["report"].table("details"), str(job))
    assert details["IR (episode mean)"].startswith(f"{ir_mean:.3f} [")
    assert details["IR (pooled)"].startswith(f"{ir_pooled:.3f} [")
    assert details["OR (episode mean)"].startswith(f"{or_mean:.3f} [")
    assert details["OR (pooled)"].startswith(f"{or_pooled:.3f} [")
    assert details["invalid (episode mean)"].startswith(f"{invalid_mean:.3f} [")
    assert details["invalid (pooled)"].startswith(f"{invalid_pooled:.3f} [")
    ppo = _row(sweep["report"].table("details"), str(sweep["summaries"]["ppo/fourrooms#job"]))
    assert ppo["invalid (pooled)"] == ppo["invalid (episode mean)"] == "—"  # never asked
    slm = _row(sweep["report"].table("details"), str(sweep["summaries"]["slm/fourrooms#job"]))
    assert slm["OR (pooled)"] == "—"  # no policy, no overwrites
    cells = pd.read_csv(d / "report" / "cells.csv")
    got = cells.loc[cells["job"] == job]
    assert got["invalid_rate_pooled"].item() == pytest.approx(invalid_pooled)
    assert got["or_pooled"].item() == pytest.approx(or_pooled)


def test_failed_and_missing_cells_are_marked_and_listed(sweep):
    main = sweep["report"].table("main")
    failed_job = sweep["summaries"]["ask+/higherlower/1.0#job"]
    missing_job = sweep["summaries"]["ask+/fourrooms/r030#job"]
    assert (
        _row(main, "ASK+ tiny τ=1", "final")["HigherLower: reward"] == f"FAILED (job {failed_job})"
    )
    assert (
        _row(main, "ASK+ tiny τ=1", "r030")["FourRooms: reward"] == f"MISSING (job {missing_job})"
    )
    fails = sweep["report"].table("failures")
    assert [idx for idx, _ in fails.rows] == [
        [str(missing_job), "MISSING"],
        [str(failed_job), "FAILED"],
    ]
    failed = _row(fails, str(failed_job))
    assert "RuntimeError: CUDA out of memory" in failed["message"]
    assert "gate.tau=1.0" in failed["overrides"] and failed["env"] == "HigherLower"
    assert "killed" in _row(fails, str(missing_job))["message"]
    md = sweep["report"].markdown
    assert "CUDA out of memory \\| while batching" in md  # pipes escaped in Markdown
    assert "Jobs: 20 (18 finished, 1 failed, 1 missing)" in md


def test_paired_difference_matches_hand_computation(sweep):
    d = sweep["dir"]
    job = sweep["summaries"]["ask+/fourrooms/0.5#job"]
    ref = sweep["summaries"]["ppo/fourrooms#job"]
    a = {json.loads(x)["seed"]: json.loads(x) for x in (d / str(job) / "episodes.jsonl").open()}
    b = {json.loads(x)["seed"]: json.loads(x) for x in (d / str(ref) / "episodes.jsonl").open()}
    common = sorted(set(a) & set(b))
    assert len(common) == 20 and len(b) == 25
    diff = np.array([a[s]["reward"] - b[s]["reward"] for s in common])
    rng = np.random.default_rng(0)  # metrics.bootstrap_ci's resampling, by hand
    boots = diff[rng.integers(0, diff.size, size=(2000, diff.size))].mean(axis=1)
    low, high = np.quantile(boots, 0.025), np.quantile(boots, 0.975)
    row = _row(sweep["report"].table("paired"), "ASK+ tiny τ=0.5", "final")
    assert row["FourRooms: Δ reward"].startswith(f"{diff.mean():+.3f} [{low:+.2f}, {high:+.2f}]")
    assert row["FourRooms: n"] == "20"
    succ = np.array([float(a[s]["success"]) - float(b[s]["success"]) for s in common])
    assert row["FourRooms: Δ success"].startswith(f"{succ.mean():+.3f} [")
    # a weak-checkpoint cell is compared with PPO at the same checkpoint
    weak = sweep["summaries"]["ask+/higherlower/r010#job"]
    weak_ref = sweep["summaries"]["ppo/higherlower/r010#job"]
    a = {
        json.loads(x)["seed"]: json.loads(x)["reward"]
        for x in (d / str(weak) / "episodes.jsonl").open()
    }
    b = {
        json.loads(x)["seed"]: json.loads(x)["reward"]
        for x in (d / str(weak_ref) / "episodes.jsonl").open()
    }
    mean = np.mean([a[s] - b[s] for s in sorted(set(a) & set(b))])
    row = _row(sweep["report"].table("paired"), "ASK+ tiny τ=1", "r010")
    assert row["HigherLower: Δ reward"].startswith(f"{mean:+.3f} [")
    assert all(idx[0] != "PPO" for idx, _ in sweep["report"].table("paired").rows)


def test_files_written_and_parse(sweep):
    out = sweep["dir"] / "report"
    for name in (
        "report.md",
        "report.tex",
        "main.csv",
        "main.tex",
        "paired.csv",
        "failures.csv",
        "cells.csv",
        "policy_checkpoints.csv",
        "details.csv",
    ):
        assert (out / name).stat().st_size > 0, name
    main = pd.read_csv(out / "main.csv")
    assert list(main.columns[:3]) == ["method", "checkpoint", "FourRooms: reward"]
    assert len(main) == len(sweep["report"].table("main").rows)
    cells = pd.read_csv(out / "cells.csv")
    assert len(cells) == 20 and set(cells["status"]) == {"ok", "failed", "missing"}
    assert set(cells["env_kind"]) == {"navigation", "card_game"}
    s = sweep["summaries"]["ask/higherlower"]
    got = cells.loc[cells["job"] == sweep["summaries"]["ask/higherlower#job"], "reward_mean"]
    assert got.item() == pytest.approx(s["reward_mean"])
    tex = (out / "main.tex").read_text()
    assert (
        "\\toprule" in tex
        and "\\cmidrule(lr){3-7}" in tex
        and "\\multicolumn{5}{c}{FourRooms}" in tex
    )
    assert "ASK+ tiny $\\tau$=0.5" in tex and "{\\scriptsize[" in tex
    for png in ("tau.png", "checkpoints.png", "trials.png", "learning_curves.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, png


def test_policy_checkpoints_listed(sweep):
    table = sweep["report"].table("policy_checkpoints")
    row = _row(table, "FourRooms")
    assert row["thresholds reached"] == "r010 (0.100 @ 15,000), r030 (0.300 @ 35,000)"
    assert row["not reached"] == "r050"
    assert row["final"] == "0.350 @ 40,000"


def test_policy_seed_variance(tmp_path):
    sweep_dir = tmp_path / "policies"
    sweep_dir.mkdir()
    ckpt = write_checkpoint_dir(tmp_path, "fourrooms")
    sums = [
        write_job(
            sweep_dir,
            i,
            env="fourrooms",
            gate="never",
            policy_seed=i,
            skill=0.3 + i / 5,
            ckpt_dir=ckpt,
        )
        for i in range(3)
    ]
    report = build_report(sweep_dir)
    table = report.table("policy_seeds")
    rewards = [s["reward_mean"] for s in sums]
    row = _row(table, "PPO", "mean ± std")
    assert row["FourRooms: reward"] == (
        f"{np.mean(rewards):.3f} ± {np.std(rewards, ddof=1):.3f} (n=3)"
    )
    assert _row(table, "PPO", "1")["FourRooms: reward"].startswith(f"{rewards[1]:.3f} [")
    assert report.table("main").index == ["method", "policy seed"]
    assert (sweep_dir / "report" / "learning_curves.png").stat().st_size > 5_000
    assert not (sweep_dir / "report" / "tau.png").exists()  # nothing to draw: nothing drawn
    assert report.table("paired") is None and report.table("failures") is None


def test_a_degenerate_learned_gate_is_named_under_the_main_table(tmp_path):
    sweep_dir = tmp_path / "s"
    sweep_dir.mkdir()
    ckpt = write_checkpoint_dir(tmp_path, "fourrooms")
    kw = {"env": "fourrooms", "gate": "entropy", "slm": "tiny", "prompt": "basic", "ckpt_dir": ckpt}
    write_job(sweep_dir, 0, **kw, tau=0.5)
    summary = write_job(sweep_dir, 1, **kw, tau=1.0)
    reason = "its training labels have one class only (0 of 40 judged steps are PPO mistakes)"
    (sweep_dir / "1" / "summary.json").write_text(
        json.dumps({**summary, "gate_degenerate": reason})
    )
    (note,) = [n for n in build_report(sweep_dir).table("main").notes if "DEGENERATE" in n]
    assert note.endswith(f": {summary['cell']} τ=1.0 ({reason}).")  # only that cell


def test_never_started_jobs_are_missing(tmp_path):
    """Jobs of the sweep's grid without a dir (the sweep was killed) are reported missing."""
    sweep_dir = tmp_path / "s"
    sweep_dir.mkdir()
    (sweep_dir / "multirun.yaml").write_text(
        yaml.safe_dump(
            {
                "experiment_name": "grid",
                "tracking": {"enabled": False},
                "hydra": {
                    "sweeper": {"params": {"env": "fourrooms,higherlower", "gate": "never"}},
                    "overrides": {"task": ["eval.n_episodes=20"]},
                },
            }
        )
    )
    write_job(sweep_dir, 0, env="fourrooms", gate="never")
    report = build_report(sweep_dir)
    fails = report.table("failures")
    row = _row(fails, "1")
    assert row["status"] == "MISSING" and "never started" in row["message"]
    assert row["overrides"] == "env=higherlower gate=never eval.n_episodes=20"


@pytest.mark.parametrize(
    ("params", "task"),
    [
        (  # Table 3's grid
            {
                "env": "fourrooms,doorkey8,higherlower",
                "policy.checkpoint": "t1,t2,t3,t4,best",
                "method": "ppo,ask_plus",
                "slm": "qwen3.5-2b,qwen3.5-4b",
            },
            [],
        ),
        (  # the command line replaces a param in its place; range, choice, +key and ~key
            {"env": "fourrooms", "gate.tau": "range(0.5,2.0,0.5)", "seed": "0"},
            ["prompt=choice(basic,stateful)", "env=higherlower,doorkey8", "+x=1,2", "~tracking"],
        ),
        ({}, ["gate=never", "eval.n_episodes=20"]),  # no sweep: one job
    ],
)
def test_sweep_expansion_matches_hydra_basic_sweeper(params, task):
    """expand_sweep (Hydra's public override parser) numbers jobs as Hydra's BasicSweeper does:
    a Hydra upgrade that changes the order fails here, not silently in a report."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    sweeper = BasicSweeper(max_batch_size=None, params=params)
    args = sweeper._parse_config() + task  # what BasicSweeper.sweep parses
    parsed = OverridesParser.create().parse_overrides(args)
    expected = [job for batch in sweeper.split_arguments(parsed, None) for job in batch]
    config = OmegaConf.create(
        {
            "hydra": {
                "sweeper": {
                    "_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                    "params": params,
                },
                "overrides": {"task": task},
            }
        }
    )
    assert expand_sweep(config) == expected
    if "method" in params:  # the last key varies fastest
        assert len(expected) == 60 and expected[:2] == [
            ["env=fourrooms", "policy.checkpoint=t1", "method=ppo", "slm=qwen3.5-2b"],
            ["env=fourrooms", "policy.checkpoint=t1", "method=ppo", "slm=qwen3.5-4b"],
        ]
    if task[1:2] == ["env=higherlower,doorkey8"]:
        assert expected[0][:2] == ["env=higherlower", "gate.tau=0.5"] and len(expected) == 24


def test_report_package_uses_no_private_hydra_api():
    for path in (REPO / "benchmark" / "report").glob("*.py"):
        assert "hydra._internal" not in path.read_text(), path


def test_labels_come_from_the_cell_spec(tmp_path):
    """A cell is labelled by CellSpec.labels() of its config, whatever the config holds for the
    parts it does not use: SLM-only has no policy or checkpoint, PPO-only no slm or prompt. The
    summary's labels win, but the checkpoint stays as configured (t2), with the file used."""
    sweep_dir = tmp_path / "labels"
    sweep_dir.mkdir()
    ckpt = write_checkpoint_dir(tmp_path, "higherlower")
    kw = {"slm": "tiny", "prompt": "stateful", "rationale": True}
    write_job(
        sweep_dir, 0, env="fourrooms", gate="always", checkpoint="r030", status="missing", **kw
    )
    write_job(
        sweep_dir, 1, env="fourrooms", gate="never", checkpoint="final", status="failed", **kw
    )
    write_job(sweep_dir, 2, env="higherlower", gate="entropy", checkpoint="t2", policy_seed=1, **kw)
    summary_path = sweep_dir / "2" / "summary.json"
    summary = json.loads(summary_path.read_text())  # the job records the rNNN that t2 stands for
    summary.update(checkpoint="r020", checkpoint_path=str(ckpt / "r020.zip"))
    summary_path.write_text(json.dumps(summary))
    sweep = load_sweep(sweep_dir)
    cells = {c.job: c for c in sweep.cells}
    assert [cells[j].status for j in "012"] == ["missing", "failed", "ok"]
    for job in "01":  # no results: every label is the spec's
        config = OmegaConf.load(sweep_dir / job / ".hydra" / "config.yaml")
        labels = CellSpec.from_config(config).labels()
        assert {k: getattr(cells[job], k) for k in LABELS} == {k: labels[k] for k in LABELS}
        assert cells[job].name == labels["cell"]
    slm_only, ppo, ask = cells["0"], cells["1"], cells["2"]
    assert (slm_only.checkpoint, slm_only.policy_seed, slm_only.has_policy) == (None, None, False)
    assert (slm_only.slm, slm_only.prompt, slm_only.rationale) == ("tiny", "stateful", True)
    assert method_label(slm_only) == "SLM-only tiny"
    assert (ppo.slm, ppo.prompt, ppo.rationale) == (None, None, None)
    assert (ppo.checkpoint, ppo.policy_seed, ppo.has_policy) == ("final", 0, True)
    assert (ask.checkpoint, ask.checkpoint_name, ask.policy_seed) == ("t2", "r020", 1)
    assert (ask.tau_setting, ask.mc_samples, ask.has_policy) == ("auto", 10, True)
    assert {c.checkpoint for c in sweep.cells} == {None, "final", "t2"}  # not SLM-only's r030
    assert Layout.of(sweep).checkpoint


def test_labels_of_configs_that_do_not_resolve(tmp_path):
    """An older sweep's config that does not resolve as a whole (an interpolation only Hydra
    could resolve) is read through CellSpec from the parts that do; one the spec cannot read (no
    gate class) keeps its labels as configured."""
    sweep_dir = tmp_path / "old"
    overrides = ["env=fourrooms", "gate=always", "slm=tiny", "prompt=stateful"]
    old = yaml.safe_load(job_config(tmp_path, [*overrides, "policy.checkpoint=r030"]))
    old["paths"]["root"] = "${oc.env:REPORT_TEST_UNSET_ROOT}/outputs"
    with pytest.raises(Exception, match="REPORT_TEST_UNSET_ROOT"):
        CellSpec.from_config(OmegaConf.create(old))
    bare = {
        "env": {"name": "higherlower", "metric": "accuracy"},
        "gate": {"name": "entropy", "tau": 0.5, "mc_samples": 10},
        "slm": {"name": "tiny"},
        "prompt": {"name": "basic", "rationale": False},
        "policy": {"checkpoint": "best", "seed": 0},
    }
    for job, config in enumerate((old, bare)):
        (sweep_dir / str(job) / ".hydra").mkdir(parents=True)
        (sweep_dir / str(job) / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    cells = load_sweep(sweep_dir).cells
    assert (cells[0].env, cells[0].gate, cells[0].slm) == ("fourrooms", "always", "tiny")
    assert (cells[0].checkpoint, cells[0].has_policy) == (None, False)
    # the paper protocol's planner hint (the released code's), named as the family reads it
    assert cells[0].name == "fourrooms/always/tiny/stateful,planner_hint=seen_target"
    assert (cells[1].env, cells[1].gate, cells[1].tau_setting) == ("higherlower", "entropy", 0.5)
    assert (cells[1].checkpoint, cells[1].uses_policy, cells[1].has_policy) == ("best", None, True)


def test_env_names_and_kinds_come_from_conf_env():
    assert set(ENV_ORDER) <= set(available_envs())  # the papers' order; the others follow
    for name in available_envs():
        cfg = load_env_cfg(name)
        assert env_label(name) == cfg.label and env_kind(name) == cfg.kind
        assert cfg.kind in get_family(cfg.family).kinds
    assert (env_label("doorkey8"), env_kind("higherlower")) == ("DoorKey-8x8", "card_game")
    assert (env_label("not_an_env"), env_kind("not_an_env")) == ("not_an_env", None)


@pytest.mark.slow  # report subprocesses (~4 s)
def test_cli_errors_and_output(tmp_path, sweep, capsys):
    with pytest.raises(SystemExit) as exc:
        report_main([str(tmp_path / "nope")])
    assert exc.value.code == 2 and "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit):
        report_main([str(tmp_path / "empty")])
    assert "holds no job dirs" in capsys.readouterr().err
    out = tmp_path / "elsewhere"
    assert report_main([str(sweep["dir"]), "--out", str(out), "--no-wandb"]) == 0
    printed = capsys.readouterr().out
    assert (
        printed.startswith("# Report: synthetic")
        and "## Paired comparison with PPO-only" in printed
    )
    assert (out / "report.md").read_text() == printed.rstrip("\n") + "\n" or (
        out / "report.md"
    ).read_text().strip() == printed.strip()


def test_tracking_config_resolves_hydra_interpolations(sweep):
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        {
            "tracking": {"enabled": True, "project": "p", "dir": "${paths.root}/wandb"},
            "paths": {"root": "${hydra:runtime.cwd}/outputs"},
            "hydra": {"runtime": {"cwd": "/somewhere"}, "sweep": {"dir": "x/${now:%H}_${uid:}"}},
        }
    )
    got = tracking_config(cfg, Path("/fallback"))
    assert got.dir == "/somewhere/outputs/wandb" and got.project == "p"
    assert tracking_config(OmegaConf.create({"tracking": {"enabled": False}}), Path("/f")) is None


@pytest.mark.slow
def test_wandb_offline_report_run(tmp_path, sweep):
    """With tracking enabled the report logs one offline W&B run (job_type report)."""
    sweep_dir = tmp_path / "tracked"
    sweep_dir.mkdir()
    write_job(sweep_dir, 0, env="fourrooms", gate="never")
    (sweep_dir / "multirun.yaml").write_text(
        yaml.safe_dump(
            {
                "experiment_name": "tracked",
                "tracking": {
                    "enabled": True,
                    "project": "ask-benchmark",
                    "mode": "offline",
                    "dir": str(tmp_path / "wandb"),
                },
                "hydra": {"sweeper": {"params": {}}},
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "benchmark.report", str(sweep_dir)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={"WANDB_MODE": "offline", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    runs = list((tmp_path / "wandb" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and "W&B run" in proc.stderr


def test_details_say_where_a_shared_tau_came_from():
    from benchmark.report.tables import tau_source

    assert tau_source({"tau_from": "fourrooms/entropy/q/stateful+r/final-s0"}, True) == (
        " (from fourrooms/entropy/q/stateful+r/final-s0)"
    )
    assert tau_source({}, True) == " (tuned)" and tau_source({}, False) == ""


def test_brief_report_is_the_main_and_paired_tables_and_where_the_rest_is(sweep):
    """`--brief` (make demo): the main table, the paired differences, one line on the largest
    paired gain, and the paths of the full report and figures; no other section."""
    from benchmark.report.__main__ import brief

    report = sweep["report"]
    text = brief(report)
    assert "## Results" in text and "## Paired comparison with PPO-only" in text
    assert "Thresholds and cost" not in text and "Failed and missing" not in text
    line = next(x for x in text.splitlines() if x.startswith("What it shows: "))
    paired = report.table("paired")
    firsts = [
        float(m.group(0))
        for _, vals in paired.rows
        if (m := re.match(r"[+-]?\d+\.\d+", str(vals[0])))
    ]
    assert f"{max(firsts):+.3f}" in line
    assert f"full report: {report.out / 'report.md'}" in text
    assert all(f"figure: {p}" in text for p in report.plots)


def test_captions_name_the_protocol(sweep):
    """Every table caption names the protocol the jobs ran under (the synthetic jobs are composed
    with the default, paper) and the protocol key the entropy cells override (gate.mc_samples);
    report.md says it once more under the title."""
    report = sweep["report"]
    assert report.tables
    for table in report.tables:
        assert "; protocol paper; cells override gate.mc_samples=10" in table.title, table.title
    md = (sweep["dir"] / "report" / "report.md").read_text()
    assert "Protocol paper; cells override gate.mc_samples=10" in md
    assert "protocol paper" in (sweep["dir"] / "report" / "main.tex").read_text()


def test_a_matched_checkpoint_row_is_captioned(tmp_path):
    """Table 1's PPO matched to the paper's PPO row (policy.checkpoint=match) is a row of its own
    beside the recipe's checkpoint; the main table's notes say what `match` means and what it
    picked: the file, its validation success and the target (nearest is not equal)."""
    from benchmark.report.tables import MATCH_NOTE

    sweep_dir = tmp_path / "s"
    sweep_dir.mkdir()
    ckpt = write_checkpoint_dir(tmp_path, "fourrooms")
    write_job(sweep_dir, 0, env="fourrooms", gate="never", ckpt_dir=ckpt, checkpoint="final")
    matched = ("policy.match_success=0.53",)
    summary = write_job(
        sweep_dir,
        1,
        env="fourrooms",
        gate="never",
        ckpt_dir=ckpt,
        checkpoint="match",
        extra=matched,
    )
    summary.update(checkpoint_path=str(ckpt / "r030.zip"))  # what the job resolved `match` to
    (sweep_dir / "1" / "summary.json").write_text(json.dumps(summary))
    main = build_report(sweep_dir).table("main")
    (note,) = [n for n in main.notes if n.startswith(MATCH_NOTE)]
    assert note.endswith(" Picked: FourRooms: r030, validation success 0.30 (target 0.53).")
    assert len(main.rows) == 2 and "paper's PPO strength" not in note
    other = tmp_path / "other"
    other.mkdir()
    write_job(other, 0, env="fourrooms", gate="never", ckpt_dir=ckpt, checkpoint="final")
    assert not any(n.startswith(MATCH_NOTE) for n in build_report(other).table("main").notes)


def test_a_gated_row_that_asks_at_every_step_is_flagged_and_compared_with_slm_only(tmp_path):
    """A gated row whose IR CI reaches 1 is the consultant alone: the main and paired tables
    say so, and the paired table sets its gain over SLM-only (of the same consultant, paired by
    seed) beside its gain over PPO-only; a row that asks selectively is not flagged."""
    sweep_dir = tmp_path / "s"
    sweep_dir.mkdir()
    ckpt = write_checkpoint_dir(tmp_path, "fourrooms")
    ask = {"env": "fourrooms", "slm": "tiny", "prompt": "basic", "ckpt_dir": ckpt}
    write_job(sweep_dir, 0, env="fourrooms", gate="never", ckpt_dir=ckpt)
    write_job(sweep_dir, 1, gate="always", **ask)
    write_job(sweep_dir, 2, gate="entropy", tau=0.1, every_step=True, **ask)
    write_job(sweep_dir, 3, gate="entropy", tau=1.0, **ask)
    report = build_report(sweep_dir)
    always, selective = "ASK tiny τ=0.1", "ASK tiny τ=1"
    for name in ("main", "paired"):
        (flag,) = [n for n in report.table(name).notes if n.startswith("ASKS AT EVERY STEP")]
        assert f"{always} on FourRooms (IR 1.000 [1.00, 1.00])" in flag
        assert selective not in flag
        assert not any(n.startswith("NEVER ASKS") for n in report.table(name).notes)
    assert "asks at every step: the consultant alone".upper() in report.markdown

    paired_rows = report.table("paired")
    rows = {
        json.loads(x)["seed"]: json.loads(x) for x in (sweep_dir / "2" / "episodes.jsonl").open()
    }
    slm = {
        json.loads(x)["seed"]: json.loads(x) for x in (sweep_dir / "1" / "episodes.jsonl").open()
    }
    diff = np.array([rows[s]["reward"] - slm[s]["reward"] for s in sorted(rows)])
    row = _row(paired_rows, always)
    assert row["FourRooms: Δ reward vs SLM-only"].startswith(f"{diff.mean():+.3f} [")
    assert row["FourRooms: Δ success vs SLM-only"] != "—"
    assert row["FourRooms: Δ reward"] not in ("", "—")  # beside the gain over PPO-only
    slm_only = _row(paired_rows, "SLM-only tiny (basic)")
    assert slm_only["FourRooms: Δ reward vs SLM-only"] == "—"  # not a gated row


def test_a_gated_row_that_never_asks_is_flagged(tmp_path):
    sweep_dir = tmp_path / "s"
    sweep_dir.mkdir()
    ckpt = write_checkpoint_dir(tmp_path, "fourrooms")
    write_job(sweep_dir, 0, env="fourrooms", gate="never", ckpt_dir=ckpt)
    summary = write_job(
        sweep_dir, 1, env="fourrooms", gate="entropy", slm="tiny", prompt="basic", ckpt_dir=ckpt
    )
    rows = [json.loads(x) for x in (sweep_dir / "1" / "episodes.jsonl").open()]
    for r in rows:  # the tuned tau asked nothing
        r.update(queries=0, overwrites=0, invalid=0, calls=0)
    rows = [episode_rates(r) for r in rows]
    (sweep_dir / "1" / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept = {k: summary[k] for k in summary if k not in summarize(rows)}
    (sweep_dir / "1" / "summary.json").write_text(json.dumps({**summarize(rows), **kept}))
    main = build_report(sweep_dir).table("main")
    (flag,) = [n for n in main.notes if n.startswith("NEVER ASKS")]
    assert "never asks: the policy alone".upper() in flag and "ASK tiny" in flag
    assert not any(n.startswith("ASKS AT EVERY STEP") for n in main.notes)
