"""Mutation testing (mutmut) of the modules whose arithmetic the results rest on, one module at a
time with the fast tests that cover it, and the share of mutants the tests kill per module.

A module runs in its own folder, outputs/mutants/<module>/ (benchmark/, tests/ and conf/ linked
in, pyproject.toml copied with the module's own `only_mutate` and test selection added to
[tool.mutmut]), so each module keeps its own mutants and cache: a rerun tests only the mutants
of functions that changed, and `mutmut results` / `mutmut show <mutant>` run in that folder
list and show its survivors. The shared settings are pyproject's [tool.mutmut].

    PYTHONPATH=$PWD .venv/bin/python -m tests.mutation [module ...]   # make mutants
    PYTHONPATH=$PWD .venv/bin/python -m tests.mutation --table         # the table only
    PYTHONPATH=$PWD .venv/bin/python -m tests.mutation --survivors m   # tests added: survivors only
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO / "outputs" / "mutants"
LINKED = ("benchmark", "tests", "conf")
# module -> the tests that cover it; smallest module first
MODULES: dict[str, list[str]] = {
    "brace/rewards": ["tests/brace/test_brace.py"],
    "metrics": ["tests/test_engine_units.py", "tests/test_metrics.py"],
    "learned": ["tests/test_learned_gate.py"],
    "gates": ["tests/test_engine_units.py", "tests/test_learned_gate.py"],
    "uncertainty": ["tests/test_uncertainty.py", "tests/test_engine_units.py"],
    "evaluate": [
        "tests/analysis/test_belief.py",
        "tests/analysis/test_analysis.py",
        "tests/test_evaluate_loop.py",
    ],
    "tuning": ["tests/test_tuning_objectives.py", "tests/test_engine_units.py"],
}
# left out everywhere: tests of 2 s or more (a training fixture, a fine-tune, a whole preset);
# mutmut reruns a test, fixtures included, for every mutant of a function the test calls, and
# these are covered by make test anyway
SLOW = (
    "tests/brace/test_brace.py::test_finetune_held_out_says_a_two_round_prompt_is_not_scored_by_one_answer",
    "tests/brace/test_brace.py::test_teacher_states_come_from_training_seeds_only",
    "tests/brace/test_brace.py::test_brace_prompt_is_its_own_finetuned_consultant",
    "tests/test_learned_gate.py::test_the_classifier_never_sees_a_validation_or_test_seed",
    "tests/test_learned_gate.py::test_policy_probabilities_are_a_named_feature_of_its_own_classifier",
    "tests/test_learned_gate.py::test_a_learned_gate_cell_tunes_its_threshold_and_runs",
    "tests/test_learned_gate.py::test_the_classifier_scores_ppos_mistakes_above_its_good_steps",
    "tests/analysis/test_belief.py::test_two_models_route_by_role_and_are_named_by_both_weights",
    "tests/analysis/test_analysis.py::test_analysis_preset_records_steps_in_every_cell",
    "tests/analysis/test_analysis.py::test_report_has_the_gate_quality_table_roc_curves_and_where_figures",
    "tests/test_tuning_objectives.py::test_only_a_non_default_objective_enters_the_identity",
)
COLUMNS = ("mutants", "killed", "survived", "no tests", "timeout", "other")


def selection(module: str) -> list[str]:
    files = MODULES[module]
    slow = [t for t in SLOW if t.split("::")[0] in files]
    return files + [arg for t in slow for arg in ("--deselect", t)]


def prepare(module: str, keep: bool = False) -> Path:
    """The module's folder: the sources linked, pyproject with its mutmut selection. `keep`:
    keep every verdict even when the module's tests changed (for `--survivors`)."""
    work = ROOT / module.replace("/", ".")
    work.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        link = work / name
        if not link.is_symlink():
            link.symlink_to(REPO / name, target_is_directory=True)
    text = (REPO / "pyproject.toml").read_text()
    header = "[tool.mutmut]\n"
    if header not in text:
        raise SystemExit("pyproject.toml has no [tool.mutmut] table")
    own = (
        f"only_mutate = {json.dumps([f'benchmark/{module}.py'])}\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(selection(module))}\n"
    )
    (work / "pyproject.toml").write_text(text.replace(header, header + own, 1))
    # mutmut reruns the mutants of changed source functions but keeps every other verdict, so
    # a new or changed test would not count: then the module starts over
    tests = {a.split("::")[0] for a in selection(module) if a.startswith("tests/")}
    digest = hashlib.sha256()
    for name in sorted(tests | {"tests/conftest.py"}):
        digest.update(name.encode() + (REPO / name).read_bytes())
    stamp = work / "tests.sha256"
    if stamp.exists() and stamp.read_text() != digest.hexdigest() and not keep:
        print(f"{module}: its tests changed since the last run, all mutants are tested again")
        shutil.rmtree(work / "mutants", ignore_errors=True)
    stamp.write_text(digest.hexdigest())
    return work


def survivors(module: str) -> list[str]:
    """The module's mutants that no test killed (survived or no tests) in its last run."""
    from mutmut.stats import status_by_exit_code

    meta = ROOT / module.replace("/", ".") / "mutants" / "benchmark" / f"{module}.py.meta"
    codes = json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}
    return [k for k, c in codes.items() if status_by_exit_code[c] in ("survived", "no tests")]


def run(module: str, only_survivors: bool = False) -> int:
    names = survivors(module) if only_survivors else []
    if only_survivors and not names:
        print(f"== {module}: no survivors of an earlier run to test again")
        return 0
    work = prepare(module, keep=only_survivors)
    if only_survivors:  # which tests call which function: collected again, for the new tests
        (work / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    mutmut = Path(sys.executable).with_name("mutmut")
    print(f"== {module}: mutmut run in {work.relative_to(REPO)}", flush=True)
    # one worker and one thread (torch, sklearn's OpenMP): on a shared machine, threads that spin
    # against other processes made a 0.2 s rollout-and-fit take 4 to 10 s
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    command = [str(mutmut), "run", "--max-children", "1", *names]
    return subprocess.call(command, cwd=work, env=env)


def counts(module: str) -> dict[str, int] | None:
    """Statuses of the module's mutants from mutmut's .meta file (None: never run)."""
    from mutmut.stats import status_by_exit_code

    meta = ROOT / module.replace("/", ".") / "mutants" / "benchmark" / f"{module}.py.meta"
    if not meta.exists():
        return None
    codes = json.loads(meta.read_text())["exit_code_by_key"].values()
    out = dict.fromkeys(COLUMNS, 0)
    for code in codes:
        status = status_by_exit_code[code]
        out[status if status in out else "other"] += 1
    out["mutants"] = len(codes)
    return out


def table(modules: list[str]) -> str:
    """Markdown: per module the mutants by status and the share killed (timeouts count as
    killed, as mutmut's own score does; not-run mutants count against)."""
    lines = [
        "| module | " + " | ".join(COLUMNS) + " | killed share |",
        "|---" * (len(COLUMNS) + 2) + "|",
    ]
    for module in modules:
        c = counts(module)
        if c is None:
            lines.append(f"| benchmark/{module}.py | not run |" + " |" * len(COLUMNS))
            continue
        share = (c["killed"] + c["timeout"]) / c["mutants"] if c["mutants"] else 0.0
        cells = " | ".join(str(c[k]) for k in COLUMNS)
        lines.append(f"| benchmark/{module}.py | {cells} | {share:.0%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help=f"default: all of {', '.join(MODULES)}")
    parser.add_argument("--table", action="store_true", help="print the table, run nothing")
    parser.add_argument(
        "--survivors",
        action="store_true",
        help="test only the mutants the last run left alive, against the tests as they are now "
        "(after adding tests; the killed keep their verdict, so never after removing one)",
    )
    args = parser.parse_args(argv)
    modules = args.modules or list(MODULES)
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; known: {list(MODULES)}")
    failed = []
    if not args.table:
        failed = [m for m in modules if run(m, args.survivors) != 0]
    print(table(modules))
    if failed:
        print(f"mutmut failed for {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
