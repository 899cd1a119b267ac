"""Every documented command works as written (tests/doc_commands.py finds and checks them): the
fast test composes each one in-process (a sweep's first and last job), the slow one every job of
every sweep, and a marked subset runs for real at toy size."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.doc_commands import Command, check, collect, doc_files

pytestmark = pytest.mark.timeout(900)


def _check_all(every_job: bool) -> tuple[list[Command], dict[str, int], list[str]]:
    commands = collect()
    counts = {"compose": 0, "mention": 0, "illustrative": 0, "make": 0}
    failures, seen = [], {}  # the same command written twice is checked once
    for c in commands:
        if c.illustrative or c.usage:
            # docs/cli.md's synopsis lines are checked against the CLIs by tests/test_cli_docs.py
            counts["illustrative"] += not c.source.startswith("docs/cli.md")
            continue
        try:
            if c.mention:
                from tests.doc_commands import CLIS, argv_of

                module, _ = argv_of(c.text)
                assert module in CLIS, f"no such command: python -m {module}"
                counts["mention"] += 1
                continue
            if c.text not in seen:
                try:
                    check(c, every_job=every_job)
                    seen[c.text] = ""
                except BaseException as exc:  # noqa: BLE001 - SystemExit from argparse included
                    first = (str(exc).strip().splitlines() or [""])[0]
                    seen[c.text] = f"{type(exc).__name__}: {first}"
            if seen[c.text]:
                raise ValueError(seen[c.text])
            counts["make" if c.kind == "make" else "compose"] += 1
        except BaseException as exc:  # noqa: BLE001 - SystemExit from argparse included
            failures.append(f"{c.source}: {c.text}\n    {exc}")
    return commands, counts, failures


def _summary(commands: list[Command], counts: dict[str, int]) -> str:
    files = len({c.source.rsplit(":", 1)[0] for c in commands})
    return (
        f"{len(commands)} commands in {files} files ({len(doc_files())} searched): "
        f"{counts['compose']} compose, {counts['make']} make -n, {counts['mention']} mentions, "
        f"{len(RUNS)} run (slow), {counts['illustrative']} illustrative"
    )


@pytest.mark.slow  # composes ~100 commands (~20 s)
def test_every_documented_command_composes(capsys):
    commands, counts, failures = _check_all(every_job=False)
    with capsys.disabled():
        print("\n" + _summary(commands, counts))
    assert not failures, "documented commands that do not work:\n" + "\n".join(failures)
    assert len(commands) >= 100 and counts["compose"] >= 60
    # few illustrations: a doc that stops checking its commands shows here
    assert counts["illustrative"] <= 20, counts


def test_a_broken_command_fails_the_check(tmp_path, monkeypatch):
    """The check is not vacuous: a misspelt key, a bad value, an unknown CLI, flag or make
    target, an unknown placeholder and a sweep whose later job is invalid all fail."""
    broken = [
        "python -m benchmark +experiment=table1 slm=tyni -m",  # no such option
        "python -m benchmark env=fourrooms gate.tua=0.5",  # no such key
        "python -m benchmark gate=entropy gate.tau=-1",  # composes, fails validation
        "python -m benchmark eval.n_episodes=2,0 -m",  # the sweep's last job is invalid
        "python -m benchmark.reprot <sweep dir>",
        "python -m benchmark.plan +experiment=table1 --querys-per-s 3",
        "python -m benchmark.prompts show env=fourrooms stepp=5",
        "python -m benchmark.report <sweep_dir>",  # not in the placeholder table
        "make demoo",
    ]
    for text in broken:
        with pytest.raises(BaseException):  # noqa: B017 - ValueError, SystemExit, Hydra errors
            check(Command(text, "test", False))
    check(Command("python -m benchmark eval.n_episodes=2,3 -m", "test", False))  # the control


def test_illustrative_marks_are_understood(tmp_path):
    md = tmp_path / "x.md"
    md.write_text(
        "Run `python -m benchmark env=fourrooms`.\n\n<!-- illustrative -->\n```bash\n"
        "python -m benchmark env=nowhere\n```\n```bash\n"
        "python -m benchmark \\\n  env=doorkey8 gate=never   # a comment\n"
        "python -m benchmark env=mars   # illustrative\n```\n"
        "```text\nusage: python -m benchmark.plan [-h]\n  the games it would make on reset\n```\n"
        "After the output, `python -m benchmark env=empty5x5_random`.\n"
    )
    from tests.doc_commands import _markdown

    found = _markdown(md, root=tmp_path)
    assert [(c.text, c.illustrative) for c in found] == [
        ("python -m benchmark env=fourrooms", False),
        ("python -m benchmark env=nowhere", True),
        ("python -m benchmark env=doorkey8 gate=never", False),
        ("python -m benchmark env=mars", True),
        ("python -m benchmark env=empty5x5_random", False),  # a ```text block is output: not read
    ]


def test_multirun_flag_anywhere():
    from benchmark.config import split_multirun

    assert split_multirun(["+experiment=feedback", "-m", "slm=random"]) == (
        ["+experiment=feedback", "slm=random"],
        True,
    )
    assert split_multirun(["env=fourrooms"]) == (["env=fourrooms"], False)


@pytest.mark.slow
@pytest.mark.timeout(1200)  # ~2,900 jobs validated; ~570 Hydra compositions (config.session)
def test_every_job_of_every_documented_sweep_composes():
    commands, counts, failures = _check_all(every_job=True)
    print(_summary(commands, counts))
    assert not failures, "\n".join(failures)


# ------------------------------------------------------------------------------- runs
TOY = ["tracking=none", "eval.n_episodes=2", "tuning.n_trials=2", "tuning.n_episodes=2"]
# documented command -> the toy overrides it runs with (they shrink, never change, what it does)
RUNS = {
    ".venv/bin/python -m benchmark env=higherlower gate=always slm=oracle": TOY,
    "python -m benchmark +experiment=feedback -m slm=random env.task.actions=all "
    "env.task.step_limit=null hydra.sweeper.params.prompt=hwbp": ["eval.n_episodes=3", *TOY[:1]],
    "python -m benchmark +experiment=feedback -m gate=never env.task.actions=all "
    "hydra.sweeper.params.prompt=hwbp hydra.sweeper.params.slm=random": [
        *TOY[:2],
        "policy.total_timesteps=2048",
        "policy.eval_freq=1024",
        "policy.eval_episodes=2",
        "policy.progress_bar=false",
    ],
    "python -m benchmark.report <sweep dir>": [],
    "python -m benchmark.plan +experiment=smoke --queries-per-s 49": [],
    "python -m benchmark.dashboard +experiment=table1": [],
    ".venv/bin/python -m benchmark.prompts show env=fourrooms prompt=stateful seed=100 step=5 "
    "rationale=true autopilot=FORWARD": [],
}


def test_the_runs_are_documented():
    documented = {c.text for c in collect()}
    missing = [r for r in RUNS if r not in documented]
    assert not missing, f"commands the slow test runs are no longer documented: {missing}"


def _argv(text: str, root: Path) -> tuple[str, list[str]]:
    from tests.doc_commands import argv_of

    return argv_of(text.replace("<sweep dir>", str(root / "SWEEP")))


@pytest.mark.slow
def test_documented_commands_run_at_toy_size(tmp_path):
    """Run the RUNS commands as documented, with toy overrides, in one results root: a job, the
    two feedback baseline sweeps (random and PPO-CNN, as the README and the preset give them),
    the report of the first sweep, the plan, the dashboard and the prompts viewer. Policy
    export/import and serve + an openai cell run in tests/policy/test_bundle.py and
    tests/test_openai_server.py."""
    root = tmp_path
    sweeps = []
    for text, toy in RUNS.items():
        if "<sweep dir>" in text:
            continue
        module, args = _argv(text, root)
        proc = run_cli(root, *args, *toy, module=module, timeout=1200)
        if "-m" in args:
            assert re.search(r"sweep .*: 3 jobs: 3 completed, 0 reused, 0 failed", proc.stdout)
            sweeps.append(max((root / "sweeps" / "feedback").iterdir(), key=os.path.getmtime))
        if module == "benchmark.prompts":
            assert "======== system ========" in proc.stdout and "step=5" in proc.stdout
    random_sweep = sweeps[0]
    envs = {json.loads((random_sweep / j / "summary.json").read_text()).get("env") for j in "012"}
    assert len(envs) == 3  # the preset's three envs
    module, args = _argv("python -m benchmark.report <sweep dir>", random_sweep.parent)
    args = [str(random_sweep) if a.endswith("SWEEP") else a for a in args]
    proc = run_cli(root, *args, "--no-wandb", module=module)
    assert (random_sweep / "report").is_dir() and proc.stdout.strip()


if __name__ == "__main__":  # print every command and how it was checked
    for c in collect():
        try:
            how = "illustrative" if c.illustrative or c.usage else check(c)
        except BaseException as exc:  # noqa: BLE001
            how = f"FAILS: {type(exc).__name__}: {exc}"
        print(f"{c.source}: {c.text}\n    {how}")
    sys.exit(0)
