"""The Table 1 projection of `make bench-gpu`: how long the `table1` preset's cells that are not
complete in the results root would take on this GPU, from benchmark.plan's own estimate of their
work and the decisions/s measured here.

The work (cells, episodes, step limits, LM calls: measured from a complete tiny/oracle reference
cell of the same identity, else bounded at IR 1) is `python -m benchmark.plan +experiment=table1
--json`'s, run as a subprocess (plan and bench are sibling wings: neither imports the other).
Time = each cell's LM calls / the IR-1 decisions/s of its model (generation: every IR-1 decision
is one query, with the policy, the gate, the prompt and the env step included) + its other steps
(at most the step limit x episodes, less the calls) / the IR-0 decisions/s (the loop without a
query). PPO training of policies not trained yet is not included (plan says which). Cells whose
model weights are not on this machine are planned with a stand-in (`table1_plan`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PRESET = "table1"
MISSING_WEIGHTS = "ConsultantError"  # plan's note for a cell whose model cannot be loaded


def plan_table1(root: Path, timeout_s: float, *overrides: str) -> dict[str, Any]:
    """benchmark.plan's JSON for the table1 preset under `root`."""
    cmd = [sys.executable, "-m", "benchmark.plan", f"+experiment={PRESET}", f"paths.root={root}"]
    proc = subprocess.run(
        [*cmd, *overrides, "--json"], capture_output=True, text=True, timeout=max(1.0, timeout_s)
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def table1_plan(root: Path, timeout_s: float) -> dict[str, Any]:
    """The table1 plan; cells that plan calls invalid only because their model's weights are not
    on this machine (SLM-only cells need the weights' identity; this benchmark runs on random
    weights) take their work from the same job planned with a stand-in model directory
    (`slm.backend.path`, a tiny Qwen3.5 with random weights): the work does not depend on the
    weights, only the cell's hash does. Such cells are marked `stand_in`."""
    import tempfile

    from benchmark.bench.qwen_shapes import save_tiny_hybrid

    start = time.perf_counter()
    plan = plan_table1(root, timeout_s)
    absent = [
        c
        for c in plan["cells"]
        if c["status"] == "invalid" and MISSING_WEIGHTS in c.get("note", "")
    ]
    if absent:
        with tempfile.TemporaryDirectory(prefix="bench-standin-") as work:
            stand_in = save_tiny_hybrid(Path(work) / "model")
            left = timeout_s - (time.perf_counter() - start)
            other = plan_table1(root, left, f"slm.backend.path={stand_in}")
        by_job = {j: c for c in other["cells"] for j in c["jobs"]}
        for cell in absent:
            twin = by_job.get(cell["jobs"][0])
            if twin is not None and twin.get("work") is not None:
                cell.update(status="pending", work=twin["work"], stand_in=True)
    return plan


def project(plan: dict[str, Any], rates: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The projected seconds of `plan`'s cells that still need work; `rates`: {slm name:
    {"ir0": decisions/s, "ir1": decisions/s}} as measured (an LM cell whose model was not
    measured is counted in `cells_without_rate`)."""
    if not rates:
        raise ValueError("the Table 1 projection needs the decisions/s of at least one model")
    ir0 = max(r["ir0"] for r in rates.values())  # no query: the model does not matter
    lm_s = loop_s = 0.0
    todo = missing = 0
    episodes = steps = calls = 0
    bases: set[str] = set()
    for cell in plan["cells"]:
        work = cell.get("work")
        if work is None:
            continue
        todo += 1
        episodes += int(work["episodes"]) + int(work["tuning_episodes"])
        steps += int(work["max_steps"])
        calls += int(work["calls"])
        bases.add(str(work["basis"]).split(":")[0])
        if cell.get("lm") and int(work["calls"]) > 0:
            rate = rates.get(str(cell.get("slm")))
            if rate is None:
                missing += 1
                continue
            lm_s += int(work["calls"]) / rate["ir1"]
        loop_s += max(0, int(work["max_steps"]) - int(work["calls"])) / ir0
    totals = plan.get("totals", {})
    return {
        "preset": PRESET,
        "cells": len(plan["cells"]),
        "cells_todo": todo,
        "cells_without_rate": missing,
        "cells_complete": int(totals.get("complete", 0)),
        "cells_stand_in": sum(bool(c.get("stand_in")) for c in plan["cells"]),
        "cells_invalid": sum(c.get("status") == "invalid" for c in plan["cells"]),  # not projected
        "invalid_notes": sorted(
            {c.get("note", "") for c in plan["cells"] if c.get("status") == "invalid"}
        ),
        "policies_not_trained": int(totals.get("policy_not_trained", 0)),
        "episodes": episodes,
        "max_steps": steps,
        "lm_calls": calls,
        "basis": sorted(bases),
        "rates": rates,
        "lm_seconds": lm_s,
        "loop_seconds": loop_s,
        "seconds": lm_s + loop_s,
        "hours": (lm_s + loop_s) / 3600,
    }
