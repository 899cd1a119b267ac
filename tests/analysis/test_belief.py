"""Per-step context length and belief quality (benchmark.analysis.belief): the step
records of hand-built consultations (a correct, a partly wrong and a kept belief), the cell's
summary fields (belief correctness, calibration per label, context first -> last), the episodes
still running per step, and the report's table and plots on hand-built records; a belief cell
with the oracle end to end."""

from __future__ import annotations

import pytest

from benchmark.analysis.belief import (
    belief_metrics,
    brier_by_step,
    calibration,
    context_by_step,
    running_by_step,
)
from benchmark.analysis.steps import step_record
from benchmark.brace.teacher import teacher_claims
from benchmark.consultants.base import Answer
from benchmark.envs import make_task
from benchmark.envs.truth import snapshot, truth_probability
from benchmark.evaluate import StepEvent
from benchmark.prompts.base import Decision


def event(ep, belief, updated=True, tokens=(300, 120)):
    decision = Decision(
        0, [Answer("x", prompt_tokens=t) for t in tokens], belief=belief, belief_updated=updated
    )
    return StepEvent(ep, None, None, decision, 0)


@pytest.fixture()
def cards():
    ep = make_task("higherlower").episode(300)
    ep.step(0)
    return ep


def test_truth_probability_is_the_fact_whatever_its_label(cards):
    truth = snapshot(cards)
    view = truth.view
    card = f"- the current card is {view.card_name} [possible]"
    assert truth_probability(card, truth) == 1.0  # true fact, however hedged
    wrong = (
        "- the current card is K [confirmed]"
        if view.card_name != "K"
        else ("- the current card is 2 [confirmed]")
    )
    assert truth_probability(wrong, truth) == 0.0
    nxt = [c for c in teacher_claims(truth) if "next card" in c][0]
    p = view.higher / sum(view.remaining) if "higher" in nxt else view.lower / sum(view.remaining)
    assert truth_probability(nxt, truth) == pytest.approx(
        {
            "confirmed": 1.0,
            "almost certain": 0.9,
            "probable": 0.7,
            "possible": 0.5,
            "unlikely": 0.3,
            "doubtful": 0.1,
        }[nxt.split("[")[1][:-1]]  # fmt: skip
    )
    assert abs(truth_probability(nxt, truth) - p) <= 0.1 + 1e-9
    assert truth_probability("- the table is green [probable]", truth) is None


def test_step_records_score_the_held_belief_and_the_context(cards):
    truth = snapshot(cards)
    teacher = teacher_claims(truth)
    rec = step_record(event(cards, teacher))
    assert rec["context_tokens"] == 300  # the longest round (the update)
    assert rec["belief_updated"] is True and rec["belief_score"] == 1.0
    assert [lb for lb, _ in rec["belief_claims"]][0] == "confirmed"
    wrong = [teacher[0].replace(truth.view.card_name, "K" if truth.view.card_name != "K" else "2")]
    rec = step_record(event(cards, [*wrong, "- the table is green [probable]"], updated=False))
    assert rec["belief_score"] == 0.0 and rec["belief_updated"] is False
    assert rec["belief_claims"] == [["confirmed", 0.0], ["probable", None]]
    # a prompt without a belief (stateful): the context only; an uncounted backend: neither
    plain = step_record(StepEvent(cards, None, None, Decision(0, [Answer("x", 50)]), 0))
    assert plain["context_tokens"] == 50 and "belief_score" not in plain
    oracle = step_record(StepEvent(cards, None, None, Decision(0, [Answer("x")]), 0))
    assert "context_tokens" not in oracle


def test_summary_fields_and_calibration_per_label():
    rows = [  # two episodes: seed 1 with a constant context, seed 2 growing
        {"seed": 1, "step": 0, "context_tokens": 100, "belief_updated": True, "belief_score": 1.0,
         "belief_claims": [["confirmed", 1.0], ["probable", 1.0], ["probable", 0.0]]},
        {"seed": 1, "step": 1, "context_tokens": 100, "belief_updated": False, "belief_score": 0.5,
         "belief_claims": [["confirmed", 0.0], ["unknown", 1.0], ["possible", None]]},
        {"seed": 2, "step": 0, "context_tokens": 100, "belief_updated": True, "belief_score": None,
         "belief_claims": [["doubtful", 0.0]]},
        {"seed": 2, "step": 3, "context_tokens": 300, "belief_updated": True, "belief_score": 0.0,
         "belief_claims": []},
    ]  # fmt: skip
    m = belief_metrics(rows)
    assert m["context_tokens_mean"] == pytest.approx((100 + 200) / 2)
    assert (m["context_tokens_first_mean"], m["context_tokens_last_mean"]) == (100, 200)
    assert m["belief_correctness_mean"] == pytest.approx((0.75 + 0.0) / 2)
    assert m["belief_update_failure_rate"] == 0.25
    cal = calibration(rows)
    assert cal["confirmed"] == {"n": 2, "share_true": 0.5, "nominal": 1.0}
    assert cal["probable"]["share_true"] == 0.5 and cal["unknown"]["nominal"] is None
    assert "possible" not in cal  # unverifiable claims are left out
    # ECE over named labels: confirmed |0.5-1|*2, probable |0.5-0.7|*2, doubtful |0-0.1|*1
    assert m["belief_ece"] == pytest.approx((1.0 + 0.4 + 0.1) / 5)
    assert context_by_step(rows) == ([0, 1, 3], [100.0, 100.0, 300.0])
    # Brier: (label probability - truth)^2 per verifiable claim, 'unknown' at 0: seed 1 step 0
    # 0, 0.09, 0.49; step 1 1, 1; seed 2 step 0 0.01 (step 3 holds no claim)
    assert m["belief_brier"] == pytest.approx((0 + 0.09 + 0.49 + 1 + 1 + 0.01) / 6)
    assert m["belief_brier_first_mean"] == pytest.approx((0.58 / 3 + 0.01) / 2)
    assert m["belief_brier_last_mean"] == pytest.approx((1.0 + 0.01) / 2)
    steps, brier = brier_by_step(rows)
    assert steps == [0, 1] and brier == pytest.approx([(0.58 / 3 + 0.01) / 2, 1.0])
    assert belief_metrics([{"seed": 1, "step": 0}]) == {}  # no fields: nothing added


def test_report_shows_the_belief_table_and_the_context_plot(tmp_path):
    from benchmark.report import belief as rb
    from benchmark.report.model import Cell, Sweep

    grow = [{"seed": 1, "step": s, "context_tokens": 100 + 20 * s} for s in range(5)]
    flat = [
        {"seed": 1, "step": s, "context_tokens": 150, "belief_updated": True, "belief_score": 1.0,
         "belief_claims": [["confirmed", 1.0]]}
        for s in range(5)
    ]  # fmt: skip
    cells = [
        Cell("a", "ok", env="higherlower", gate="always", slm="tiny", prompt="stateful"),
        Cell("b", "ok", env="higherlower", gate="always", slm="tiny", prompt="belief"),
    ]
    sweep = Sweep(root=tmp_path, cells=cells, config=None, experiment="brace")
    steps = {"a": grow, "b": flat}
    table = rb.belief_table(sweep, steps)
    assert [r[0][0] for r in table.rows] == ["a", "b"]
    assert table.rows[0][1][1] == "100 -> 180" and table.rows[1][1][1] == "150 -> 150"
    assert table.rows[0][1][2:4] == ["4", "1/1 at 4"]  # one episode, running to its end
    assert table.rows[1][1][4].startswith("1.000") and table.rows[1][1][9] == "1.00 (5)"
    assert table.rows[1][1][7] == "0.000" and table.rows[1][1][8] == "0.000 -> 0.000"
    assert table.rows[0][1][7] == rb.DASH  # no claims: no Brier
    path = rb.context_plot(sweep, steps, tmp_path)
    assert path is not None and path.stat().st_size > 1000
    brier = rb.brier_plot(sweep, steps, tmp_path)
    assert brier is not None and brier.name == "belief_brier.png"
    assert rb.brier_plot(Sweep(root=tmp_path, cells=cells[:1], config=None, experiment="b"),
                         steps, tmp_path) is None  # raw history: no claims, no plot  # fmt: skip


def _ending(ends: dict[int, int]) -> list[dict]:
    """Step records of episodes (seed -> its last step) whose context is 100 x seed + step, the
    step before each episode's last one not queried (no context_tokens), as a gate skips it."""
    return [
        {"seed": seed, "step": t, **({} if t == last - 1 else {"context_tokens": 100 * seed + t})}
        for seed, last in ends.items()
        for t in range(last + 1)
    ]


def test_the_per_step_mean_rests_on_the_episodes_still_running():
    """Five episodes ending at steps 2, 2, 5, 9, 9: the running count falls 5 -> 3 -> 2, and a
    late step's mean averages only the episodes still going (no ended episode counts as 0)."""
    rows = _ending({1: 2, 2: 2, 3: 5, 4: 9, 5: 9})
    steps, running, n = running_by_step(rows)
    assert n == 5 and steps == list(range(10))
    assert running == [5, 5, 5, 3, 3, 3, 2, 2, 2, 2]
    mean = dict(zip(*context_by_step(rows), strict=True))
    assert sorted(mean) == [0, 1, 2, 3, 4, 5, 6, 7, 9]  # step 8: neither long episode queried
    assert mean[0] == pytest.approx((100 + 200 + 300 + 400 + 500) / 5)
    assert mean[1] == pytest.approx((301 + 401 + 501) / 3)  # seeds 1, 2 not queried at 1
    assert mean[4] == pytest.approx((404 + 504) / 2)  # seed 3 not queried; 1 and 2 ended
    assert mean[7] == pytest.approx((407 + 507) / 2)  # only the two episodes still running
    assert mean[9] == pytest.approx((409 + 509) / 2)
    # records in any order, and an episode of one step, count the same
    steps, running, n = running_by_step([*reversed(rows), {"seed": 9, "step": 0}])
    assert (running[:4], running[-1], n) == ([6, 5, 5, 3], 2, 6)
    assert running_by_step([]) == ([], [], 0)
    with pytest.raises(ValueError, match="seed 4 has step -1"):
        running_by_step([{"seed": 4, "step": -1}])


def test_the_report_says_how_many_episodes_a_per_step_mean_rests_on(tmp_path):
    """The table's survivor columns (the last step at least half the episodes run, the count at
    the last step) and the per-step plots' lower panel of running episodes; a cell known from
    its summary alone (no step records) gets dashes."""
    import matplotlib.image as mpimg

    from benchmark.report import belief as rb
    from benchmark.report.model import Cell, Sweep

    cells = [
        Cell("a", "ok", env="higherlower", gate="always", slm="tiny", prompt="stateful"),
        Cell("b", "ok", env="higherlower", gate="always", slm="tiny", prompt="belief",
             summary={"context_tokens_mean": 120.0, "context_tokens_ci95_low": 110.0,
                      "context_tokens_ci95_high": 130.0}),
    ]  # fmt: skip
    sweep = Sweep(root=tmp_path, cells=cells, config=None, experiment="brace_tw_long")
    steps = {"a": _ending({1: 2, 2: 2, 3: 5, 4: 9, 5: 9})}
    table = rb.belief_table(sweep, steps)
    rows = {r[table.index[0]]: r for r in table.records()}
    a, b = rows["a"], rows["b"]
    assert (a["half running to step"], a["running at last step"]) == ("5", "2/5 at 9")
    assert (b["half running to step"], b["running at last step"]) == (rb.DASH, rb.DASH)
    assert b["context tokens"] == "120 [110, 130]"  # its summary's numbers, as before
    path = rb.context_plot(sweep, steps, tmp_path)
    height, width = mpimg.imread(path).shape[:2]
    assert (height, width) == (648, 600)  # 5.4 x 5 inches at 120 dpi: the mean over the count
    assert rb.brier_plot(sweep, steps, tmp_path) is None  # no claims held: no Brier plot


def test_the_runs_table_gives_mean_and_std_over_distinct_cells(tmp_path):
    """Three trained runs (three cells) give a mean and a std; an untrained row swept over the
    three runs is one cell, counted once."""
    from benchmark.report.model import Cell, Sweep
    from benchmark.report.runs import runs_table

    def cell(job, h, slm, success, brier=None):
        s = {"cell_hash": h, "success_mean": success, "context_tokens_mean": 500.0}
        if brier is not None:
            s["belief_brier"] = brier
        return Cell(job, "ok", env="tw_quest", metric="success", gate="always", slm=slm,
                    prompt="brace", summary=s)  # fmt: skip

    cells = [cell("0", "a", "roles-agent_brace-agent_brace", 0.6, 0.3),
             cell("1", "b", "roles-agent_brace-agent_brace", 0.8, 0.2),
             cell("2", "c", "roles-agent_brace-agent_brace", 0.7, 0.1),
             *(cell(str(j), "u", "tiny_small", 0.2) for j in (3, 4, 5))]  # fmt: skip
    table = runs_table(Sweep(root=tmp_path, cells=cells, config=None, experiment="brace_tw"))
    rows = {labels[1]: values for labels, values in table.rows}
    trained = next(v for k, v in rows.items() if "agent_brace" in k)
    assert trained[:2] == ["3", "0.700 ± 0.100"] and trained[3] == "0.200 ± 0.100"
    untrained = next(v for k, v in rows.items() if "agent_brace" not in k)
    assert untrained[:2] == ["1", "0.200 ± 0.000"]
    assert table.notes[-1].startswith("decoding temperature: not recorded")
    for c in cells:
        c.temperature = 0.0
    greedy = runs_table(Sweep(root=tmp_path, cells=cells, config=None, experiment="brace_tw"))
    assert greedy.notes[-1].startswith("decoding: greedy; the std is over the training seeds")
    for c in cells:
        c.temperature = 0.4
    sampled = runs_table(Sweep(root=tmp_path, cells=cells, config=None, experiment="brace_tw"))
    assert sampled.notes[-1] == (
        "the std includes sampling at temperature 0.4: each run its own draws."
    )


def test_a_cells_decoding_temperature_is_read_from_its_config(tmp_path):
    """The report reads a cell's sampling temperature from its job config (the runs table's
    note): paper's Agent-BRACE TextWorld cells sample at 0.4, suite's decode greedily."""
    from benchmark.report.loading import _label_from_config
    from benchmark.report.model import Cell
    from tests.conftest import compose_cfg

    for protocol, want in (("paper", 0.4), ("suite", 0.0)):
        cell = Cell("0", "ok")
        cfg = compose_cfg(tmp_path, "+experiment=brace_tw", "method=brace_base",
                          f"protocol={protocol}")  # fmt: skip
        _label_from_config(cell, cfg)
        assert cell.temperature == want, protocol


def test_a_belief_cell_records_belief_quality_end_to_end(tmp_path):
    """The oracle's belief (observed claims) on HigherLower: correct at every step."""
    from benchmark.job import run_job
    from tests.conftest import compose_cfg

    over = ["env=higherlower", "gate=always", "slm=oracle", "prompt=belief",
            "eval.n_episodes=2", "eval.step_records=true", "quiet=true"]  # fmt: skip
    summary = run_job(compose_cfg(tmp_path, *over), tmp_path / "job", multirun=False)
    assert summary["belief_steps"] > 10 and summary["belief_correctness_mean"] >= 0.9
    assert summary["belief_calibration"]["confirmed"]["share_true"] >= 0.9


# ----------------------------------------------------------------------------- two models
def _perturbed_copy(src, dst):
    """dst: the model at src with one weight changed (a 'trained' model)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(src)
    with torch.no_grad():
        next(model.parameters()).add_(0.01)
    model.save_pretrained(dst, safe_serialization=True)
    AutoTokenizer.from_pretrained(src).save_pretrained(dst)


def test_two_models_route_by_role_and_are_named_by_both_weights(tmp_path, tiny_model):
    import shutil

    from benchmark.brace.roles import RolesConsultant
    from benchmark.build import locate_inputs, prepare
    from benchmark.consultants.base import Query
    from tests.conftest import compose_cfg

    base = tiny_model("small")
    belief_dir, policy_dir = tmp_path / "belief", tmp_path / "policy"
    shutil.copytree(base, belief_dir)
    shutil.copytree(base, policy_dir)
    over = ["env=higherlower", "gate=always", "prompt=brace", "slm=brace_trained",
            f"slm.backend.path.belief={belief_dir}", f"slm.backend.path.policy={policy_dir}"]  # fmt: skip

    def spec():
        cfg = compose_cfg(tmp_path, *over)
        return cfg, locate_inputs(prepare(cfg)[2], cfg, None)

    cfg, before = spec()
    model = before.inputs["model"]
    assert model.startswith("roles(belief=hf-local:") and ",policy=hf-local:" in model
    assert str(belief_dir) not in str(before.identity)  # where the weights lie is no identity
    _perturbed_copy(base, belief_dir)  # the belief model is trained: its weights change
    _, after = spec()
    assert after.inputs["model"] != model and after.hash != before.hash
    assert after.inputs["model"].split(",policy=")[1] == model.split(",policy=")[1]
    # routing: the update round to the belief model, the act round to the policy model
    from hydra.utils import instantiate

    roles = instantiate(cfg.slm.backend)
    assert isinstance(roles, RolesConsultant)
    assert roles.identity == after.inputs["model"]
    asked = {}
    for role, c in roles.roles.items():
        c.answer = lambda qs, role=role: [asked.setdefault(q.messages[0]["content"], role)
                                          and Answer(role) for q in qs]  # fmt: skip
    qs = [Query([{"role": "user", "content": "u"}], ("a",), str, role="belief"),
          Query([{"role": "user", "content": "a"}], ("a",), str)]  # fmt: skip
    assert [a.text for a in roles.answer(qs)] == ["belief", "policy"]
    assert asked == {"u": "belief", "a": "policy"}
