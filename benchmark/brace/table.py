"""What a sweep of trainer jobs learned, as one table (`+experiment=brace_demo` prints it when
its multirun ends; `python -m benchmark.brace.table <sweep dir> [--check]` prints it again):

- the belief model after SFT on teacher-forced held-out states: format pass rate (every update
  well-formed, benchmark.brace.rewards.format_pass), format score and correctness;
- R_env on held-out games for base / SFT / SFT+PPO and every other trained row of the sweep
  (the frozen-belief ablation), each model greedy on its OWN beliefs, with 95% bootstrap CIs and
  the paired difference against SFT on the same games;
- the critic's value loss per RL iteration and the held beliefs' Brier score per step;
- the training curves figure of each job.

`--check` exits 1 unless each goal holds (`verdict`): the belief format pass after SFT at least
`FORMAT_GOAL`; the belief's claims more often true than the untrained base's; RL improving what
it optimises on a fixed set of training games (greedy R_env after RL minus before, and the
belief's R_belief on the teacher's states of those games after RL minus before); the joint
iteration keeping the held-out format pass within SFT's CI. Each gain is paired, its 95% CI
above 0. The agent's held-out R_env against the base and against SFT are printed with their
CIs whatever they are."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from benchmark.brace.pipeline import RL_DIR
from benchmark.metrics import paired_difference

FORMAT_GOAL = 0.95  # the belief format pass rate SFT must reach on held-out states
ROW_LABEL = {"agent_brace": "SFT+PPO (Agent-BRACE)", "frozen_belief": "frozen belief + PPO",
             "direct_rl": "Direct-Action RL"}  # fmt: skip


def jobs(sweep: Path) -> list[dict[str, Any]]:
    """The complete trainer reports of the sweep's job dirs, in job order."""
    out = []
    numbered = sorted((p for p in sweep.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    for d in numbered:
        summary = d / "summary.json"
        if summary.is_file():
            report = json.loads(summary.read_text())
            if report.get("complete"):
                out.append(report)
    return out


def _ci(m: dict[str, Any] | None) -> str:
    if not m or m.get("n", 1) == 0:
        return "-"
    low, high = m["ci95"]
    return f"{m['mean']:.3f} [{low:.3f}, {high:.3f}]"


def _diff(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    return f"{d['diff_mean']:+.3f} [{d['diff_ci95_low']:+.3f}, {d['diff_ci95_high']:+.3f}]"


def _paired(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    return paired_difference(a["per_seed"]["r_env"], b["per_seed"]["r_env"])


def _brier(m: dict[str, Any]) -> str:
    by = m.get("brier_by_step") or {}
    values = by.get("brier") or []
    return f"{values[0]:.3f} -> {values[-1]:.3f}" if values else "-"


def verdict(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The goals read off the agent_brace job; learned (`learned`) when every one holds:
    - the belief model after SFT passes the format on >= FORMAT_GOAL of the held-out states;
    - its claims are more often true than the untrained base's (paired over the same states);
    - RL raises greedy R_env on the fixed training games (`rl_minus_sft_train_r_env`, paired
      over the games) and the belief's R_belief on the teacher's states of those games
      (`belief_rl_gain_train_r_belief`, paired over the states);
    - the joint iteration keeps the held-out format pass at or above the low end of SFT's CI.
    A paired goal holds when its 95% CI is above 0. Reported whatever they are: SFT+PPO minus
    the base and minus SFT on held-out R_env, `*_shown` when the CI is above 0."""
    main = next((r for r in reports if r["trained_with"]["name"] == "agent_brace"), None)
    if main is None:
        return {"learned": False, "why": "no complete agent_brace job in the sweep"}
    ho = main.get("held_out") or {}
    fmt = (ho.get("sft") or {}).get("format_pass", {}).get("mean")
    belief_gain = {}
    if ho.get("base") and ho.get("sft"):
        belief_gain = paired_difference(ho["sft"]["per_state"]["correctness"],
                                        ho["base"]["per_state"]["correctness"])  # fmt: skip
    rollouts = main.get("held_out_rollouts") or {}
    vs_base = _paired(rollouts["rl"], rollouts["base"]) if "base" in rollouts else {}
    gains = main.get("gains") or {}
    gain = gains.get("held_out_rollout_r_env") or {}
    env_gain = gains.get("train_r_env") or {}
    belief_rl_gain = gains.get("train_state_r_belief") or {}
    kept = format_kept(ho)
    why = []
    if fmt is None or fmt < FORMAT_GOAL:
        why.append(f"belief format pass after SFT {fmt} < {FORMAT_GOAL}")
    if not _shown(belief_gain):
        why.append(f"belief correctness after SFT not above the base's ({_diff(belief_gain)})")
    if not _shown(env_gain):
        why.append(f"R_env on the training games not raised by RL ({_diff(env_gain)})")
    if not _shown(belief_rl_gain):
        why.append(f"the belief's R_belief on the training states not raised by RL "
                   f"({_diff(belief_rl_gain)})")  # fmt: skip
    if not kept.get("kept"):
        why.append(f"held-out format pass after RL {kept.get('rl')} below SFT's CI "
                   f"(low end {kept.get('sft_ci95_low')})")  # fmt: skip
    return {"format_pass": fmt, "format_goal": FORMAT_GOAL,
            "belief_correctness_sft_minus_base": belief_gain,
            "rl_minus_sft_train_r_env": env_gain, "belief_rl_gain_train_r_belief": belief_rl_gain,
            "format_kept": kept,
            "rl_minus_base": vs_base, "rl_minus_base_shown": _shown(vs_base),
            "rl_minus_sft": gain, "ppo_gain_shown": _shown(gain),
            "learned": not why, "why": "; ".join(why)}  # fmt: skip


def format_kept(held_out: dict[str, Any]) -> dict[str, Any]:
    """The belief's held-out format pass after RL against SFT's: kept when RL's mean is at or
    above the low end of SFT's 95% CI (empty when either was not measured)."""
    sft = (held_out.get("sft") or {}).get("format_pass") or {}
    rl = (held_out.get("rl") or {}).get("format_pass") or {}
    if "ci95" not in sft or "mean" not in rl:
        return {}
    low = float(sft["ci95"][0])
    return {"rl": rl["mean"], "sft": sft["mean"], "sft_ci95_low": low, "kept": rl["mean"] >= low}


def _shown(d: dict[str, Any]) -> bool:
    return bool(d) and d["diff_ci95_low"] > 0


def lines(reports: list[dict[str, Any]]) -> list[str]:
    """The table as text (markdown tables: docs/brace.md shows it as measured)."""
    if not reports:
        return ["no complete trainer job in this sweep"]
    first = reports[0]
    w = first["trained_with"]
    env = w["env"] if isinstance(w["env"], dict) else {"name": w["env"]}  # reports before env_name
    games = env.get("task") or {}
    held = first["held_out_rollouts"]["sft"]["r_env"]["n"]
    out = [
        f"## What was learned: {env.get('label', env['name'])}, tiny model "
        f"`{w['base'] or w['tiny_size']}`, seed {w['seed']}",
        "",
        f"Held-out games: {held} validation seeds (generation {games.get('evaluation_generation')},"
        f" training games {games.get('generation')}), at most {w['rl_max_steps'] or 'all'} steps,"
        " greedy, each model on its own beliefs. SFT roles: "
        f"{', '.join(w['sft_roles']) or 'none'}"
        + (
            " (the policy starts from a short SFT on the expert's commands)"
            if "policy" in w["sft_roles"]
            else ""
        ),  # fmt: skip
        "",
        "Belief model on teacher-forced held-out states:",
        "",
        "| model | format pass | format score | correctness |",
        "|---|---|---|---|",
    ]
    ho = first.get("held_out") or {}
    for name in ("base", "sft", "rl"):
        m = ho.get(name)
        if m:
            out.append(f"| {name} | {_ci(m.get('format_pass'))} | {_ci(m['format'])} | "
                       f"{_ci(m['correctness'])} |")  # fmt: skip
    out += ["", "R_env on held-out games (paired differences on the same games):", "",
            "| row | R_env | vs SFT (paired) | format pass | correctness | Brier first -> last |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    sft = first["held_out_rollouts"]["sft"]
    rows = []
    if "base" in first["held_out_rollouts"]:
        base = first["held_out_rollouts"]["base"]
        rows.append(("base (untrained)", base, _paired(base, sft)))
    rows.append(("SFT", sft, None))
    for r in reports:
        rl = r["held_out_rollouts"]["rl"]
        rows.append((ROW_LABEL.get(r["trained_with"]["name"], r["trained_with"]["name"]), rl,
                     r["gains"].get("held_out_rollout_r_env")))  # fmt: skip
    for label, m, d in rows:
        out.append(f"| {label} | {_ci(m['r_env'])} | {_diff(d)} | {_ci(m.get('format_pass'))} | "
                   f"{_ci(m['correctness'])} | {_brier(m)} |")  # fmt: skip
    out += ["", "The critic's value loss per RL iteration (policy / belief):", ""]
    for r in reports:
        vl = (r.get("rl") or {}).get("value_loss") or {}
        for role, values in sorted(vl.items()):
            shown = ", ".join("-" if v is None else f"{v:.3f}" for v in values)
            out.append(f"- {r['trained_with']['name']} {role}: {shown}")
    out += ["", "Brier score of the held beliefs per step (SFT+PPO):", ""]
    by = first["held_out_rollouts"]["rl"].get("brier_by_step") or {}
    out.append(", ".join(f"{s}: {b:.3f}" for s, b in zip(by.get("step", []), by.get("brier", []),
                                                         strict=True)) or "-")  # fmt: skip
    out += [
        "",
        "Training curves: "
        + ", ".join(f"{r['out']}/{RL_DIR[r['trained_with']['mode']]}.png" for r in reports),
    ]
    v = verdict(reports)
    gain = v.get("rl_minus_sft") or {}
    kept = v.get("format_kept") or {}
    out += ["", f"Belief format pass after SFT: {v.get('format_pass')} (goal >= {FORMAT_GOAL})",
            "Belief correctness after SFT - base (paired over held-out states): "
            f"{_diff(v.get('belief_correctness_sft_minus_base'))}",
            "RL - SFT on greedy R_env, fixed training games (paired over the games): "
            f"{_diff(v.get('rl_minus_sft_train_r_env'))}",
            "Belief RL - SFT on R_belief, teacher states of those games (paired over the "
            f"states): {_diff(v.get('belief_rl_gain_train_r_belief'))}",
            "Held-out belief format pass after RL: "
            + (f"{kept['rl']} vs SFT's {kept['sft']} (CI low end {kept['sft_ci95_low']}): "
               + ("kept" if kept["kept"] else "LOWERED") if kept else "-"),
            f"SFT+PPO - base on held-out R_env: {_diff(v.get('rl_minus_base'))}"
            + ("" if v.get("rl_minus_base_shown") else " (the CI reaches 0: not shown)"),
            f"SFT+PPO - SFT on held-out R_env (PPO's own gain): {_diff(gain)}"
            + (" (the CI is above 0: PPO's gain is shown)" if v.get("ppo_gain_shown") else
               " (the CI reaches 0: PPO's gain is not shown at this size)" if gain else ""),
            "Learned: yes" if v["learned"] else f"Learned: NO ({v['why']})"]  # fmt: skip
    return out


class TableOnMultirunEnd(Callback):
    """Hydra callback (+experiment=brace_demo): the table when the trainer sweep ends, also
    written to <sweep>/brace_table.md and its verdict to <sweep>/brace_table.json."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        write(Path(str(config.hydra.sweep.dir)))


def write(sweep: Path) -> dict[str, Any]:
    """Print the sweep's table, write it beside the jobs; returns the verdict."""
    reports = jobs(sweep)
    text = "\n".join(lines(reports))
    print("\n" + text, flush=True)
    (sweep / "brace_table.md").write_text(text + "\n")
    v = verdict(reports) if reports else {"learned": False, "why": "no complete job"}
    (sweep / "brace_table.json").write_text(json.dumps(v, indent=1))
    return v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmark.brace.table", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("sweep", type=Path, help="a trainer sweep's dir (outputs/sweeps/<name>/<time>)")
    ap.add_argument("--check", action="store_true", help="exit 1 when nothing was learned")
    args = ap.parse_args(argv)
    if not args.sweep.is_dir():
        raise SystemExit(f"Error: {args.sweep}: not a sweep dir")
    v = write(args.sweep)
    return 1 if args.check and not v["learned"] else 0


if __name__ == "__main__":
    sys.exit(main())
