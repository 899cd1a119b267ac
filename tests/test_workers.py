"""eval.workers: a cell's test episodes sharded over forked worker processes give exactly the
rows and step records of one process."""

from __future__ import annotations

import pytest

from benchmark import results, workers
from benchmark.analysis import StepRecorder
from benchmark.build import build
from benchmark.progress import EvaluationProgress
from tests.conftest import SMALL_POLICY, compose_cfg

SMALL = ["env=empty5x5_random", *SMALL_POLICY]


@pytest.mark.parametrize(
    "method",
    [
        ("gate=never",),
        ("gate=entropy", "gate.tau=0.3", "gate.mc_samples=10", "slm=oracle", "prompt=basic"),
        ("gate=random", "gate.p=0.3", "slm=random", "prompt=basic"),
        ("gate=always", "slm=random", "prompt=stateful"),
    ],
    ids=["ppo", "ask-oracle", "random-gate-dice", "slm-only-dice"],
)
def test_two_workers_give_the_rows_and_records_of_one(trained_root, method):
    cfg = compose_cfg(trained_root, *SMALL, *method)
    evaluator = build(cfg).evaluator()
    seeds = list(range(100, 116))
    assert workers.can_shard(evaluator) and len(workers.shards(seeds, 2)) == 2
    runs, heard = {}, {}
    for n in (1, 2):
        recorder = StepRecorder()
        progress = EvaluationProgress(len(seeds), enabled=False)
        rows = workers.run(evaluator, seeds, n, progress=progress, recorder=recorder)
        runs[n] = (results.split_runtime(rows)[0], recorder.records)
        heard[n] = (progress.finished, progress.decisions, progress.queries)
    # the progress line counts every decision and query, sharded or not
    assert (
        heard[2]
        == heard[1]
        == (
            len(seeds),
            sum(r["length"] for r in runs[1][0]),
            sum(r["queries"] for r in runs[1][0]),
        )
    )
    assert [r["seed"] for r in runs[2][0]] == seeds
    assert runs[2][0] == runs[1][0]  # episodes.jsonl rows: identical
    one, two = runs[1][1], runs[2][1]
    assert len(one) == len(two) == sum(r["length"] for r in runs[1][0])
    for a, b in zip(one, two, strict=True):  # the same steps and decisions; the entropies and
        # probabilities of a smaller batch may differ in the last float32 digit (as lockstep
        # and sequential evaluation's do)
        floats = {k for k, v in a.items() if isinstance(v, float) or k == "policy_probs"}
        assert {k: v for k, v in a.items() if k not in floats} == {
            k: v for k, v in b.items() if k not in floats
        }
        for k in floats:
            assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6), k


def test_shards_keep_enough_episodes_per_worker_and_every_seed_once():
    seeds = list(range(100, 110))
    parts = workers.shards(seeds, 8)
    assert len(parts) == 10 // workers.MIN_EPISODES_PER_WORKER == 2
    assert sorted(s for p in parts for s in p) == seeds
    assert workers.shards(seeds[:3], 2) == [seeds[:3]]  # too few to split


def test_workers_setting_is_checked_and_auto_follows_the_cores_and_launcher():
    assert workers.resolve("auto") == workers.usable_cores()
    assert workers.resolve("auto", launcher_parallel=True) == 1
    assert workers.resolve(3) == 3
    for bad in (0, -1, "two", 1.5, True):
        with pytest.raises(ValueError, match="eval.workers"):
            workers.resolve(bad)


def test_a_model_consultant_or_episode_feedback_keeps_one_process(trained_root):
    from benchmark.consultants.hf import HFConsultant
    from benchmark.consultants.openai_compat import OpenAIConsultant

    assert not HFConsultant.shards_episodes and not OpenAIConsultant.shards_episodes
    cfg = compose_cfg(
        trained_root, *SMALL, "gate=always", "slm=oracle", "prompt=pf_across_episodes"
    )
    evaluator = build(cfg).evaluator()
    assert evaluator.prompt.sequential_episodes and not workers.can_shard(evaluator)
