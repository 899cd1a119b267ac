"""Agent-BRACE's training side (benchmark.brace): the rewards computed by program
against the true state on hand-built beliefs (correct, partly correct, wrong, malformed), the
teacher's beliefs score fully and spread their labels, and the SFT data comes from training
seeds only."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from benchmark.brace.rewards import belief_reward, diversity, env_reward, format_score, tracking
from benchmark.brace.teacher import teacher_claims
from benchmark.envs import make_task
from benchmark.envs.truth import correctness, snapshot, verify
from benchmark.vocabulary import label_for


def block(*lines: str) -> str:
    return "<belief_state>\n" + "\n".join(lines) + "\n</belief_state>"


@pytest.fixture(scope="module")
def doorkey():
    """DoorKey 8x8, seed 300, after two expert steps: a key and a locked door in view."""
    ep = make_task("doorkey8").episode(300)
    ep.step(ep.expert_action())
    ep.step(ep.expert_action())
    return ep


def test_correct_belief_scores_one_and_the_teacher_is_correct(doorkey):
    truth = snapshot(doorkey)
    view = truth.view
    teacher = teacher_claims(truth)
    assert all(verify(c, truth).verdict == "correct" for c in teacher), teacher
    hand = [
        f"- I am at ({view.pos[0]}, {view.pos[1]}) facing {view.facing} [confirmed]",
        "- I carry nothing [confirmed]",
        "- the door is locked [almost certain]",
        "- the goal location [unknown]",
    ]
    assert correctness(hand, truth) == 1.0
    r = belief_reward(block(*hand), [], truth, teacher, success=1.0)
    assert r.gate == pytest.approx(4 / 8) and r.correctness == 1.0  # 4 bullets of the 8
    assert r.total == pytest.approx(
        0.5 * (r.correctness + r.tracking + r.diversity + 0.99**truth.step)
    )


def test_partly_correct_and_wrong_beliefs_score_less(doorkey):
    truth = snapshot(doorkey)
    x, y = truth.view.pos
    right = f"- I am at ({x}, {y}) facing {truth.view.facing} [confirmed]"
    hedged = f"- I am at ({x}, {y}) facing {truth.view.facing} [possible]"  # right, miscalibrated
    wrong_pos = f"- I am at ({x + 1}, {y}) facing {truth.view.facing} [confirmed]"
    assert verify(hedged, truth).verdict == "partial"
    assert verify(wrong_pos, truth).verdict == "incorrect"
    assert verify("- I carry key [confirmed]", truth).verdict == "incorrect"
    assert verify("- I carry key [doubtful]", truth).verdict == "correct"  # calibrated doubt
    assert verify("- the walls are grey [probable]", truth).verdict == "unverifiable"
    partly = [right, hedged, "- the door is open [confirmed]", "- the walls are grey [probable]"]
    assert correctness(partly, truth) == pytest.approx((1 + 0.5 + 0) / 3)
    wrong = [wrong_pos, "- I carry key [confirmed]", "- the door is open [almost certain]"]
    assert correctness(wrong, truth) == 0.0
    teacher = teacher_claims(truth)
    scores = [
        belief_reward(block(*b), [], truth, teacher, success=0.0).total
        for b in (teacher, partly, wrong)
    ]
    assert scores[0] > scores[1] > scores[2] >= 0.0


def test_the_format_score_is_the_authors_continuous_one(doorkey):
    """bullets / 8 (capped) x labelled share x de-duplication x length penalty above 20; no
    closed block, no bullet: 0 (R_belief 0)."""
    truth = snapshot(doorkey)
    teacher = teacher_claims(truth)
    eight = [f"- claim {i} [possible]" for i in range(8)]
    assert format_score(block(*eight)) == 1.0
    assert format_score(block(*eight[:4])) == pytest.approx(0.5)
    assert format_score(block(*eight, "- I should go to the key [probable]")) == pytest.approx(
        8 / 9
    )  # a plan is not a claim
    assert format_score(block(*eight, "- the key is near")) == pytest.approx(8 / 9)  # no label
    assert format_score(block(*eight, "- I am at (1, 1) [confirmed] [unknown]")) == (
        pytest.approx(8 / 9)
    )  # two labels
    assert format_score(block(*eight, *eight[:2])) == pytest.approx(8 / 10)  # duplicates
    assert format_score(block(*eight, "prose that is no bullet")) == 1.0  # not a bullet: ignored
    many = [f"- claim {i} [possible]" for i in range(25)]
    assert format_score(block(*many[:20])) == 1.0
    assert format_score(block(*many)) == pytest.approx(20 / 25)
    assert format_score(block(*teacher)) == pytest.approx(min(1.0, len(teacher) / 8))
    for text in (None, "", "\n".join(teacher), block(*teacher).replace("</belief_state>", ""),
                 '<belief_state>{"pos": [1, 5]}</belief_state>'):  # fmt: skip
        assert format_score(text) == 0.0, text
        assert belief_reward(text, [], truth, teacher, success=1.0).total == 0.0


def test_tracking_rewards_new_facts_and_penalises_stale_claims():
    ep = make_task("higherlower").episode(300)
    before = snapshot(ep)
    old = teacher_claims(before)
    ep.step(0)
    truth = snapshot(ep)
    new = teacher_claims(truth)
    assert tracking(old, new, truth, new) == 1.0
    assert tracking(old, old, truth, new) == 0.0  # nothing new taken in, all stale
    half = new[:2]  # the new card and deck size taken in, the rest missing
    assert 0.0 < tracking(old, half, truth, new) < 1.0
    stale = [c for c in old if "streak" in c]  # the old streaks, false after the loss
    assert tracking(old, new + stale, truth, new) < 1.0


def test_card_predictions_are_verified_by_calibration():
    ep = make_task("higherlower").episode(301)
    truth = snapshot(ep)
    v = truth.view
    p = v.higher / sum(v.remaining)
    calibrated = f"- the next card ranks higher [{label_for(p)}]"
    assert verify(calibrated, truth).verdict == "correct"
    opposite = "doubtful" if p > 0.5 else "confirmed"
    assert verify(f"- the next card ranks higher [{opposite}]", truth).verdict == "incorrect"
    teacher = teacher_claims(truth)
    assert correctness(teacher, truth) == 1.0 and diversity(teacher) > 0.2


def test_families_own_the_brace_parts_and_a_family_without_them_is_named(monkeypatch):
    from benchmark.envs import truth as rewards
    from benchmark.envs.family import Family, get_family

    assert all(get_family(f).supports("brace") for f in ("grid", "cards", "memory"))
    memory = snapshot(make_task("memory_s11").episode(300))
    assert memory.family == "memory" and correctness(teacher_claims(memory), memory) == 1.0

    class Bare(Family):
        name = "bare"

    monkeypatch.setattr(rewards, "get_family", lambda name: Bare())
    truth = rewards.Truth(memory.view, memory.memory, memory.action_names, 0, "bare")
    with pytest.raises(NotImplementedError, match="'bare' has no Agent-BRACE support"):
        teacher_claims(truth)
    with pytest.raises(NotImplementedError, match="'bare'"):
        verify("- I am at (1, 1) facing east [confirmed]", truth)


def test_diversity_and_env_reward():
    assert diversity(["- a claim [confirmed]", "- b claim [confirmed]"]) == 0.0
    seven = [f"- claim {i} [{lb}]" for i, lb in enumerate(
        ["confirmed", "almost certain", "probable", "possible", "unlikely", "doubtful", "unknown"]
    )]  # fmt: skip
    assert diversity(seven) == pytest.approx(1.0)
    assert env_reward({"success": 1.0}) == 1.0 and env_reward({"success": 0.0}) == 0.0
    with pytest.raises(ValueError, match="success"):
        env_reward({"reward": 1.0})


# ----------------------------------------------------------------------------- SFT data, roles
def brace_prompt():
    from pathlib import Path

    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(Path(__file__).parents[2] / "conf" / "prompt" / "brace.yaml")
    cfg.sampling = None
    return instantiate(cfg)


def test_teacher_states_come_from_training_seeds_only():
    from benchmark.brace.sft import collect_states, score
    from benchmark.seeds import TRAIN_SEED_MIN, Splits, dataset_seeds
    from tests.finetune.test_finetune import untrained_policy

    task, splits = make_task("higherlower"), Splits()
    policy = untrained_policy(task)
    for bad in ([0], [150], [TRAIN_SEED_MIN - 1]):  # validation, test, below the training range
        with pytest.raises(ValueError, match="training seeds only"):
            collect_states(task, brace_prompt(), policy, bad, splits=splits)
    seeds = dataset_seeds(1, 0, splits)
    states = collect_states(task, brace_prompt(), policy, seeds, splits=splits)
    assert len(states) == 51 and {s.seed for s in states} == set(seeds)
    assert min(seeds) >= TRAIN_SEED_MIN
    # teacher-forced: each update's b(t-1) is the teacher's previous belief, shown in the prompt
    assert states[1].previous == states[0].teacher
    assert "\n".join(states[0].teacher) in states[1].messages[1]["content"]
    teacher = score([s.answer for s in states], states)
    # the authors' count term: HigherLower's teacher states 7 claims, 7 / 8 of full credit
    counts = [min(1.0, len(s.teacher) / 8) for s in states]
    assert teacher["format_compliance"] == pytest.approx(sum(counts) / len(counts), abs=1e-4)
    assert teacher["reward"]["correctness"] == 1.0
    assert score(["no belief here"] * len(states), states)["reward"]["total"] == 0.0


def test_brace_prompt_is_its_own_finetuned_consultant(tmp_path):
    """One model, two prompts (belief update, then act): slm=finetuned prompt=brace trains on
    the teacher's beliefs; its cache key and its cells differ from prompt=belief's."""
    from benchmark.build import prepare
    from benchmark.finetune.store import Recipe
    from tests.finetune.test_finetune import finetuned_cfg

    def recipe_and_cell(prompt):
        cfg = finetuned_cfg(tmp_path, f"prompt={prompt}")
        backend = OmegaConf.to_container(cfg.slm.backend, resolve=True)
        keep = ("base", "path", "env", "prompt", "splits", "data", "train", "held_out", "seed")
        recipe = Recipe.from_backend(**{k: backend[k] for k in keep})
        _, _, spec = prepare(cfg)
        return recipe, spec

    (rb, sb), (rl, sl) = recipe_and_cell("brace"), recipe_and_cell("belief")
    assert rb.dir_name(rb.key("w", "sha")).startswith("empty5x5_random-brace-tiny_small-")
    assert rb.key("w", "sha") != rl.key("w", "sha")
    cell = sb.with_inputs(model="hf-local:0123")
    assert cell.hash != sl.with_inputs(model="hf-local:0123").hash
    assert cell.hash != sb.with_inputs(model="hf-local:4567").hash  # other weights, other cell


def test_finetune_held_out_says_a_two_round_prompt_is_not_scored_by_one_answer(tiny_model):
    """slm=finetuned's held-out measure parses one answer per state; prompt=brace's first answer
    is the belief update, after which the session asks the act round: the measure says so
    (not_measured), never an invalid rate of 1.0 for answers nobody scored."""
    from benchmark.brace.pipeline import brace_prompt, task_for
    from benchmark.finetune.dataset import MultiRoundConsultation, _label, parse
    from benchmark.finetune.store import measure

    task, prompt = task_for("empty5x5_random"), brace_prompt()

    def held_out_example():
        ep = task.episode(0)  # a validation seed: measurement only
        (example,) = _label(prompt.session(ep, True).consult(None), ep, (), None, keep=True)
        return example

    with pytest.raises(MultiRoundConsultation, match="seed 0 step 0: .*second round"):
        parse(held_out_example(), block("- the goal is at (1, 1) [confirmed]"))
    result = measure(tiny_model("small"), [held_out_example()])
    assert result["states"] == 1 and "invalid_rate" not in result
    assert "benchmark.brace.train" in result["not_measured"]


# every certainty label against a true and a false fact, by hand from the rule "a true fact is
# correct when held as near-sure (p >= 0.9), partial as a coin toss or better (p >= 0.5),
# incorrect when doubted; mirrored for a false fact (correct at p <= 0.3, partial at 0.5)"
FACT_VERDICTS = {
    # label:           (true fact, false fact)
    "confirmed": ("correct", "incorrect"),
    "almost certain": ("correct", "incorrect"),
    "probable": ("partial", "incorrect"),
    "possible": ("partial", "partial"),
    "unlikely": ("incorrect", "correct"),
    "doubtful": ("incorrect", "correct"),
}


def test_every_label_gets_its_verdict_on_a_fact():
    from benchmark.vocabulary import fact_verdict

    for label, (if_true, if_false) in FACT_VERDICTS.items():
        assert fact_verdict(True, label) == if_true, label
        assert fact_verdict(False, label) == if_false, label
        assert fact_verdict(True, label, observable=False) == if_true, label
    # "unknown": partial where the fact could be seen; unseen, right only about a false fact
    assert fact_verdict(True, "unknown") == fact_verdict(False, "unknown") == "partial"
    assert fact_verdict(True, "unknown", observable=False) == "partial"
    assert fact_verdict(False, "unknown", observable=False) == "correct"


def test_every_label_gets_its_verdict_on_a_probability():
    """A probabilistic claim is correct at its calibrated label, partial one level away,
    incorrect further away; labels are the nearest level (0.6 lies as near to probable as to
    possible, in floating point too: a tie goes to the surer label)."""
    from benchmark.vocabulary import prob_verdict

    assert [label_for(p) for p in (1.0, 0.97, 0.85, 0.6, 0.55, 0.45, 0.25, 0.15, 0.0)] == [
        "confirmed",
        "confirmed",
        "almost certain",
        "probable",
        "possible",
        "possible",
        "unlikely",
        "doubtful",
        "doubtful",
    ]
    at_07 = {lb: prob_verdict(0.7, lb) for lb in (*FACT_VERDICTS, "unknown")}
    assert at_07 == {
        "confirmed": "incorrect",
        "almost certain": "partial",
        "probable": "correct",
        "possible": "partial",
        "unlikely": "incorrect",
        "doubtful": "incorrect",
        "unknown": "partial",
    }
    assert prob_verdict(0.0, "doubtful") == "correct"
    assert prob_verdict(0.0, "unlikely") == "partial"
    assert prob_verdict(0.0, "possible") == "incorrect"


def test_reward_terms_at_their_boundaries(doorkey):
    """20 claims score 1 and 21 get the length penalty; the success term is 0.99^t."""
    truth = snapshot(doorkey)
    twenty = [f"- claim {i} [possible]" for i in range(20)]
    assert format_score(block(*twenty)) == 1.0
    assert format_score(block(*twenty, "- claim 20 [possible]")) == pytest.approx(20 / 21)
    x, y = truth.view.pos
    right = f"- I am at ({x}, {y}) facing {truth.view.facing} [confirmed]"
    r = belief_reward(block(right), [], truth, [right], success=1.0)
    # one correct claim (correctness 1), the only new fact taken in (tracking 1), one label
    # (diversity 0), success discounted by the step of the update
    assert (r.correctness, r.tracking, r.diversity) == (1.0, 1.0, 0.0)
    assert truth.step == 2 and r.success == pytest.approx(0.99**2)
    assert r.gate == pytest.approx(1 / 8)  # one bullet of the 8 for full count credit
    assert r.total == pytest.approx((2.0 + 0.9801) / 8)
    assert belief_reward(block(right), [], truth, [right], success=0.0).total == 2.0 / 8
