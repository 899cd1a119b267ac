"""One response cache shared by many processes, as the array tasks of a sweep share
`<paths.cache>/responses/` on a cluster's filesystem: writers on one root with overlapping
queries (plain processes, and array tasks on the local SLURM cluster), then every entry is whole and
the answer the backend gives without the cache, the cap holds, and the processes found each
other's answers; a lockstep evaluation writes byte-identical episodes.jsonl with the cache off, on
(cold and warm) and shared by concurrent jobs.

No network filesystem can be mounted here: these tests show the one-host behaviour, on the
filesystem operations the design rests on (docs/cluster.md, "What the results root must
support"); tests/consultants/test_cache.py kills writers mid-write."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmark.consultants.base import Decoding, Query
from benchmark.consultants.cache import cache_key
from benchmark.consultants.cache_store import ResponseStore
from tests.conftest import compose_cfg, start_cli
from tests.test_slurm import slurm_env  # noqa: F401 - the fixture, for the array-task test

REPO = Path(__file__).resolve().parents[2]
IDENTITY = "shared-test-model"
N_TASKS, N_KEYS, STEPS, CAP = 6, 90, 120, 50

# One writer: a task of the sweep. Its backend answers slowly enough that the writers interleave;
# `expected` is the answer without the cache. Every answer the cache serves is checked here too.
WORKER = """
import hashlib, json, os, random, socket, sys, time
from pathlib import Path

from benchmark.consultants.base import Answer, Consultant, Decoding, Query
from benchmark.consultants.cache import CachedConsultant

IDENTITY = "shared-test-model"


def expected(text):
    return "answer:" + hashlib.sha256(text.encode()).hexdigest()[:24] + ":" + text


def query(text):
    return Query(
        messages=[{"role": "user", "content": text}],
        actions=("FORWARD",),
        render_answer=lambda a, r: a,
        decoding=Decoding(),
    )


class Backend(Consultant):
    def __init__(self):
        self.asked = []

    @property
    def identity(self):
        return IDENTITY

    def answer(self, queries):
        time.sleep(0.004 * len(queries))
        texts = [q.messages[-1]["content"] for q in queries]
        self.asked += texts
        return [Answer(expected(t), len(t), 5, 0.004) for t in texts]


directory, out, task = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
n_keys, steps, cap = (int(x) for x in sys.argv[4:7])
rng = random.Random(task)
backend = Backend()
cached = CachedConsultant(
    backend, directory, max_entries=cap, publish_seconds=0.05, max_shards=16
)
served = set()
for _ in range(steps):
    # overlapping queries: every task draws from the same pool, with repeats inside a batch
    texts = [f"q{rng.randrange(n_keys)}" for _ in range(rng.randint(1, 6))]
    for text, answer in zip(texts, cached.answer([query(t) for t in texts])):
        assert answer.text == expected(text) and answer.complete, (text, answer)
        if answer.cached:
            served.add(text)
cached.close()
record = {
    "task": task,
    "array": [os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")],
    "host": socket.gethostname(),
    "pid": os.getpid(),
    "asked": sorted(set(backend.asked)),
    "served": sorted(served),
    "stats": cached.stats(),
}
(out / f"task-{task}.json").write_text(json.dumps(record))
"""


def expected(text: str) -> str:
    import hashlib

    return "answer:" + hashlib.sha256(text.encode()).hexdigest()[:24] + ":" + text


def query(text: str) -> Query:
    return Query(
        messages=[{"role": "user", "content": text}],
        actions=("FORWARD",),
        render_answer=lambda a, r: a,
        decoding=Decoding(),
    )


def worker_args(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(worker script, cache directory, directory of the tasks' records)."""
    script, cache, out = tmp_path / "worker.py", tmp_path / "cache" / "responses", tmp_path / "out"
    script.write_text(WORKER)
    out.mkdir()
    return script, cache, out


def check_shared_cache(cache: Path, out: Path) -> list[dict]:
    """What every sharing test asserts once all writers are done."""
    records = [json.loads((out / f"task-{t}.json").read_text()) for t in range(N_TASKS)]
    pool = {cache_key(IDENTITY, query(f"q{i}")): f"q{i}" for i in range(N_KEYS)}
    store = ResponseStore(cache, max_entries=CAP)  # compacts if the last writers left it over
    entries = store.items()
    assert 0 < len(entries) == len(store) <= CAP
    for key, row in entries.items():  # whole, and the answer without the cache
        text = pool[key]
        assert (row.identity, row.text, row.prompt_tokens, row.generated_tokens) == (
            IDENTITY,
            expected(text),
            len(text),
            5,
        )
    assert store.get_many(entries) == {k: r.answer() for k, r in entries.items()}
    assert not [p.name for p in cache.iterdir() if p.name.startswith(".tmp-")]
    assert not (cache / "compact.claim").exists()
    assert len(list(cache.glob("index-*.sqlite"))) <= 2  # older generations deleted
    stats = [r["stats"] for r in records]
    assert sum(s["deduplicated"] for s in stats) > 0  # in-batch dedup
    # the tasks found each other's answers: a hit on a query this task never asked its backend
    from_others = [set(r["served"]) - set(r["asked"]) for r in records]
    assert sum(map(len, from_others)) > 0, records
    asked = sum(len(r["asked"]) for r in records)
    print(
        f"{N_TASKS} writers: {sum(s['hits'] for s in stats)} hits, "
        f"{sum(s['misses'] for s in stats)} misses, {asked} distinct queries asked over all "
        f"backends, {sum(map(len, from_others))} served from another task; "
        f"{len(entries)} entries (cap {CAP})"
    )
    return records


@pytest.mark.timeout(300)
def test_concurrent_writer_processes_share_one_cache(tmp_path) -> None:
    """Six processes, one cache directory, overlapping queries, a cap far below the pool: they
    publish, compact and evict all the time while the others read."""
    script, cache, out = worker_args(tmp_path)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(cache), str(out), str(t)]
            + [str(N_KEYS), str(STEPS), str(CAP)],
            cwd=REPO,
            stderr=subprocess.PIPE,
            text=True,
        )
        for t in range(N_TASKS)
    ]
    errors = [p.communicate(timeout=240)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * N_TASKS, "\n".join(e[-2000:] for e in errors)
    check_shared_cache(cache, out)


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.timeout(1200)
def test_array_tasks_on_slurm_share_one_cache(slurm_env, tmp_path) -> None:  # noqa: F811
    """The same writers as one job array on the local SLURM cluster (tests/test_slurm.py)."""
    script, cache, out = worker_args(tmp_path)
    wrap = (
        f"cd {REPO} && {sys.executable} {script} {cache} {out} $SLURM_ARRAY_TASK_ID "
        f"{N_KEYS} {STEPS} {CAP}"
    )
    proc = subprocess.run(
        [
            "sbatch",
            "--wait",
            f"--array=0-{N_TASKS - 1}",
            "--mem=500",
            "--cpus-per-task=1",
            "--job-name=cache-writers",
            f"--output={tmp_path}/slurm-%A_%a.out",
            "--wrap",
            wrap,
        ],
        env=slurm_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    logs = "".join(p.read_text()[-1500:] for p in sorted(tmp_path.glob("slurm-*.out")))
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}{logs}"
    records = check_shared_cache(cache, out)
    jobs = {r["array"][0] for r in records}
    assert len(jobs) == 1 and None not in jobs  # one array ...
    assert sorted(int(r["array"][1]) for r in records) == list(range(N_TASKS))  # ... its tasks


# ---------------------------------------------------------------------- whole evaluations
SLM_ONLY = [
    "env=empty5x5_random",
    "env.task.max_steps=10",
    "gate=always",
    "slm=tiny",
    "prompt=basic",
    "eval.n_episodes=6",
]


def episodes_bytes(root: Path, *overrides: str) -> tuple[bytes, dict | None]:
    """episodes.jsonl of a lockstep evaluation in this process, and the cache's counts."""
    from benchmark import results
    from benchmark.build import build

    evaluation = build(compose_cfg(root, *SLM_ONLY, *overrides))
    try:
        rows = evaluation.run(evaluation.test_seeds(), mode="lockstep")
        stats = getattr(evaluation.consultant, "stats", lambda: None)()
    finally:
        evaluation.close()
    path = root / "episodes.jsonl"
    results.write_jsonl(path, results.split_runtime(rows)[0])
    return path.read_bytes(), stats


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_lockstep_episodes_identical_with_cache_off_on_and_shared(tmp_path) -> None:
    """The tiny model, SLM-only on Empty-Random-5x5: off, on (cold, then warm), shared by three
    concurrent jobs (`python -m benchmark`, one results root each, one cache), and served from
    that shared cache afterwards: six byte-identical episodes.jsonl."""
    models = tmp_path / "models"
    models_arg = f"paths.models={models}"
    off, none = episodes_bytes(tmp_path / "off", models_arg, "slm.cache=false")
    assert none is None and off.count(b"\n") == 6
    on = f"paths.cache={tmp_path / 'on' / 'cache'}"
    cold, cold_stats = episodes_bytes(tmp_path / "on", models_arg, on)
    warm, warm_stats = episodes_bytes(tmp_path / "on", models_arg, on)
    assert cold_stats["misses"] > 0 and warm_stats == dict(
        hits=cold_stats["hits"] + cold_stats["misses"], misses=0, deduplicated=0, bypassed=0
    )
    shared = tmp_path / "shared-cache"
    jobs = [
        start_cli(
            tmp_path / f"job{i}",
            *SLM_ONLY,
            models_arg,
            f"paths.cache={shared}",
            "tracking=none",
            f"hydra.run.dir={tmp_path / f'job{i}' / 'run'}",
            stderr=subprocess.PIPE,
        )
        for i in range(3)
    ]
    deadline = time.time() + 600
    for job in jobs:
        _, err = job.communicate(timeout=max(1, deadline - time.time()))
        assert job.returncode == 0, err.decode()[-3000:]
    runs = [(tmp_path / f"job{i}" / "run" / "episodes.jsonl").read_bytes() for i in range(3)]
    after, after_stats = episodes_bytes(tmp_path / "after", models_arg, f"paths.cache={shared}")
    assert after_stats["misses"] == 0  # every answer from what the three jobs shared
    assert not [p for p in shared.rglob("*") if p.name.startswith(".tmp-")]
    for name, data in [("on, cold", cold), ("on, warm", warm), ("after", after)] + [
        (f"shared job {i}", r) for i, r in enumerate(runs)
    ]:
        assert data == off, f"episodes.jsonl {name} differs from the one without the cache"
