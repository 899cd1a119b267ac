"""Prompt variants on real MiniGrid / POPGym episodes: oracle round trips, content checked against
the simulator, state carried across queries and episodes, golden prompts, prompt-length budgets."""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest
from omegaconf import OmegaConf

from benchmark.config import CONF
from benchmark.consultants.base import Answer
from benchmark.envs import navfeatures as nf
from benchmark.prompts import showcase
from benchmark.prompts.belief import INITIAL_BELIEF, parse_belief
from benchmark.vocabulary import LABELS
from tests import golden_prompts

CASES = showcase.golden_cases()
# ASK+ (stateful + rationale) prompt budget on FourRooms, real Qwen3.5 tokens per query
ASK_PLUS_BUDGET = 1000


def _ids(case):
    env, prompt, rationale = case
    return f"{env}-{prompt}{'-R' if rationale else ''}"


def _consult(session, ppo=None, answer=None):
    """One consultation; `answer(query) -> text` (default: the expert via render_answer)."""
    from benchmark.prompts.base import consult_all

    queries_seen = []

    def answer_all(queries):
        queries_seen.extend(queries)
        return [
            Answer(answer(q) if answer else q.render_answer(" ".join(q.expert), "x"))
            for q in queries
        ]

    return consult_all([session.consult(ppo)], answer_all)[0], queries_seen


def test_every_family_is_covered():
    envs = {env for env, _, _ in CASES}
    assert {"fourrooms", "doorkey8", "higherlower"} <= envs
    assert len(CASES) >= 2 * (4 * 6 + 10 * 5 + 6)  # ASK x 6 envs, feedback x 5 grid, belief x 6


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_oracle_round_trip(case):
    """Every consultation parses the oracle's rendered answer back to exactly the expert action
    (zero invalids); the plan variant returns the expert plan step by step."""
    env, prompt, rationale = case
    variant, task = showcase.variant_for(env, prompt, rationale)
    episode = task.episode(101)
    session = variant.session(episode, with_expert=True)
    plan = (
        [episode.action_names[i] for i in episode.expert_plan()] if prompt == "complete" else None
    )
    for t in range(6):
        expert = episode.action_names[episode.expert_action()]
        decision, queries = _consult(session)
        assert decision.action is not None, f"invalid at step {t}: {decision}"
        got = episode.action_names[decision.action]
        if plan is not None:
            if t < len(plan):
                assert got == plan[t]
            assert decision.queried == (t == 0)
        else:
            assert got == expert
            assert queries and all(q.actions == tuple(episode.action_names) for q in queries)
            assert all(q.decoding.enable_thinking == rationale for q in queries[-1:])
            if rationale:
                assert queries[-1].decoding.thinking_budget == 10
        episode.step(decision.action)
        if episode.done:
            break


@pytest.mark.parametrize("prompt", ["stateful", "hwbp_pf", "belief", "complete"])
def test_random_answers_round_trip(prompt):
    """Any valid action written through render_answer parses back to itself."""
    env = "empty16x16"
    variant, task = showcase.variant_for(env, prompt)
    episode = task.episode(105)
    session = variant.session(episode, with_expert=True)
    rng = random.Random(0)
    chosen: list[str] = []

    def answer(q):
        chosen.append(rng.choice(q.actions))
        return q.render_answer(chosen[-1], "random pick")

    for _ in range(8):
        decision, queries = _consult(session, answer=answer)
        assert decision.action is not None
        if queries:
            assert episode.action_names[decision.action] == chosen[-1]
        episode.step(decision.action)
        if episode.done:
            break


def test_composed_prompt_equals_yaml():
    """The fast path (conf/prompt/*.yaml) and hydra's compose API give the same prompt node."""
    for prompt in ("stateful", "complete", "belief"):
        for rationale in (False, True):
            a = OmegaConf.to_container(showcase.prompt_cfg(prompt, rationale, composed=True))
            b = OmegaConf.to_container(showcase.prompt_cfg(prompt, rationale))
            assert a == b


@pytest.mark.parametrize("env", ["fourrooms", "doorkey8"])
def test_forward_preview_matches_simulator(env):
    """FORWARD preview says blocked exactly when the simulator's cell ahead cannot be entered
    (a wall, a closed/locked door, a key), and never for floor, open doors or the goal."""
    variant, task = showcase.variant_for(env, "enriched")
    seen_blocked = seen_free = seen_door = 0
    for seed in (100, 101, 102):
        episode = task.episode(seed)
        session = variant.session(episode, with_expert=True)
        rng = random.Random(seed)
        for _ in range(60):
            _, queries = _consult(session)
            text = queries[0].messages[1]["content"]
            obj = episode.sim.grid.get(*episode.sim.front_pos)
            blocked = obj is not None and not obj.can_overlap()
            if obj is not None and (obj.type == "wall" or (obj.type == "door" and not obj.is_open)):
                assert blocked
                seen_door += obj.type == "door"
            assert ("FORWARD->blocked" in text) == blocked, text
            assert ("PathAhead=BLOCKED" in text) == blocked, text
            seen_blocked += blocked
            seen_free += not blocked
            # mostly expert moves, some random ones so walls and doors get faced
            a = episode.expert_action() if rng.random() < 0.6 else rng.randrange(3)
            episode.step(a)
            if episode.done:
                break
    assert seen_blocked and seen_free
    if env == "doorkey8":
        assert seen_door


def test_map_window_equals_known_map():
    variant, task = showcase.variant_for("fourrooms", "stateful")
    r = variant.map_radius
    assert r == 5
    episode = task.episode(103)
    session = variant.session(episode, with_expert=False)
    rng = random.Random(3)
    for _ in range(40):
        _, queries = _consult(session, answer=lambda q: q.render_answer("FORWARD", "x"))
        text = queries[0].messages[1]["content"]
        lines = text.split("KNOWN MAP", 1)[1].splitlines()[1 : 2 * r + 2]
        rows = [ln.strip() for ln in lines]
        assert len(rows) == 2 * r + 1 and all(len(row) == 2 * r + 1 for row in rows)
        px, py = episode.sim.agent_pos
        for j, row in enumerate(rows):
            for i, ch in enumerate(row):
                x, y = px - r + i, py - r + j
                if (x, y) == (px, py):
                    assert ch == ">v<^"[episode.sim.agent_dir]
                else:
                    assert ch == episode.memory.known_map.get((x, y), "?")
        episode.step(rng.randrange(3))
        if episode.done:
            break


@pytest.mark.parametrize("prompt", ["enriched", "stateful"])
def test_higherlower_counts_match_a_recount(prompt):
    """The prompt's counts equal a recount of a full deck minus the cards dealt so far."""
    variant, task = showcase.variant_for("higherlower", prompt)
    episode = task.episode(104)
    session = variant.session(episode, with_expert=True)
    names = ["A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K"]
    for _ in range(51):
        _, queries = _consult(session)
        text = queries[0].messages[1]["content"]
        seen = episode.seen()
        card = seen[-1]
        left = [4 - seen.count(r) for r in range(13)]
        m = re.search(
            r"Card=(\S+) .*Cards left in deck=(\d+)\n"
            r"Remaining cards: higher=(\d+)  lower=(\d+)  equal=(\d+)",
            text,
        )
        assert m, text
        assert m.group(1) == names[card]
        assert [int(g) for g in m.groups()[1:]] == [
            sum(left),
            sum(left[card + 1 :]),
            sum(left[:card]),
            left[card],
        ]
        _, done = episode.step(episode.expert_action())
        if done:
            break
    assert episode.done


ASK_LEVELS = showcase.ASK_VARIANTS  # basic, enriched, stateful_min, stateful
ASK_ENVS = sorted({env for env, prompt, _ in CASES if prompt == "basic"})
PPO_ACTION = golden_prompts.PPO_ACTION  # the suggestion shown in the autopilot checks


def _ask_messages(env, level, rationale, autopilot=True, ppo="TURN_LEFT", seed=100, step=5):
    """The ASK messages at `step` of the expert-driven episode `seed`, with `ppo` (an action
    name, or None for SLM-only) as the PPO suggestion and prompt.autopilot=`autopilot`."""
    from hydra.utils import instantiate

    cfg = showcase.prompt_cfg(level, rationale)
    cfg.autopilot = autopilot
    variant = instantiate(cfg, _convert_="all")
    _, task = showcase.variant_for(env, level, rationale)
    if ppo is not None:
        ppo = PPO_ACTION.get(env, ppo)
    *_, last = showcase.drive(variant, task, seed, step, autopilot=ppo)
    assert len(last.queries) == 1
    return last.queries[0].messages


def _blocks(messages):
    """(system = blocks i-iii, state = block iv, the rest = blocks v-vi)."""
    system, user = messages[0]["content"], messages[1]["content"]
    state, sep, rest = user.partition("\n\nEXAMPLES:\n")
    assert sep, user
    return system, state, sep + rest


def _rules(system):
    return system.split("\nRULES:\n", 1)[1].splitlines()


def _output_shape_rule(line):
    """The rationale instruction and the output-shape line it comes with."""
    return line.startswith(("- Line 1: Reason:", "- Output only"))


@pytest.mark.parametrize("env", ASK_ENVS)
@pytest.mark.parametrize("autopilot", [True, False])
def test_only_the_state_block_varies_across_levels(env, autopilot):
    """ASK+ paper, appendix 9: role, valid actions, rules, examples and output format are
    byte-identical across basic/enriched/stateful_min/stateful; the levels differ in the state
    block only, and each level's state extends the previous one. Rationale changes only the
    output-shape rule lines (and the output format), the same way at every level."""
    static = {}
    for rationale in (False, True):
        got = {lvl: _blocks(_ask_messages(env, lvl, rationale, autopilot)) for lvl in ASK_LEVELS}
        systems = {lvl: g[0] for lvl, g in got.items()}
        tails = {lvl: g[2] for lvl, g in got.items()}
        assert len(set(systems.values())) == 1, systems
        assert len(set(tails.values())) == 1, tails
        states = [got[lvl][1] for lvl in ASK_LEVELS]
        for lower, higher in zip(states, states[1:], strict=False):
            assert higher.startswith(lower)
        assert len(set(states)) >= (3 if env == "higherlower" else 4)
        static[rationale] = (systems["basic"], tails["basic"].split("\n\nOUTPUT FORMAT")[0])
    plain, reasoned = static[False], static[True]
    assert plain[1] == reasoned[1]  # the examples
    assert [ln for ln in _rules(plain[0]) if not _output_shape_rule(ln)] == [
        ln for ln in _rules(reasoned[0]) if not _output_shape_rule(ln)
    ]
    assert plain[0].split("\nRULES:\n")[0] == reasoned[0].split("\nRULES:\n")[0]
    assert any(ln.startswith("- Line 1: Reason:") for ln in _rules(reasoned[0]))
    assert not any(ln.startswith("- Line 1: Reason:") for ln in _rules(plain[0]))


def test_higherlower_states_follow_the_paper():
    """Appendix 9.2: basic = card, decision index, cards left (no remaining-card counts: those
    are the enriched layer's); enriched adds the counts and count-derived probabilities;
    stateful adds the decision index, win/loss streaks and the last three decisions."""
    variant, task = showcase.variant_for("higherlower", "basic")
    for seed in (100, 104):
        episode = task.episode(seed)
        session = variant.session(episode, with_expert=True)
        while not episode.done:
            _, queries = _consult(session)
            text = "\n".join(m["content"] for m in queries[0].messages)
            state = _blocks(queries[0].messages)[1]
            assert re.fullmatch(r"STATE: Card=\S+  Decision \d+/\d+  Cards left in deck=\d+", state)
            for word in ("higher=", "lower=", "equal=", "P(higher)", "Count says", "per rank"):
                assert word not in text
            episode.step(episode.expert_action())
    for level in ("stateful_min", "stateful"):
        state = _blocks(_ask_messages("higherlower", level, True, ppo=None, step=8))[1]
        lines = state.splitlines()
        assert lines[0].startswith("STATE: Card=") and lines[1].startswith("Remaining cards:")
        assert lines[2].startswith("P(higher)=")
        assert re.fullmatch(r"Decision idx: 8    Win streak: \d+    Loss streak: \d+", lines[3])
        assert lines[4].startswith("Recent: ") and lines[4].count("|") == 2
        assert len(lines) == 5  # no richer deck memory (per-rank counts, cards seen)


@pytest.mark.parametrize("env", ["fourrooms", "doorkey8", "higherlower", "empty16x16"])
@pytest.mark.parametrize("level", ["basic", "stateful"])
def test_autopilot_false_drops_the_hint_and_its_rule(env, level):
    """prompt.autopilot=false: no Autopilot line and no rule that mentions it, whatever the PPO
    suggests; the prompt is then exactly the SLM-only one (no PPO action at all)."""
    shown = _ask_messages(env, level, True, autopilot=True)
    hidden = _ask_messages(env, level, True, autopilot=False)
    slm_only = _ask_messages(env, level, True, autopilot=True, ppo=None)
    text_shown = "\n".join(m["content"] for m in shown)
    text_hidden = "\n".join(m["content"] for m in hidden)
    assert f"Autopilot: {PPO_ACTION.get(env, 'TURN_LEFT')}" in text_shown
    assert any("autopilot" in ln for ln in _rules(shown[0]["content"]))
    assert "autopilot" not in text_hidden.lower()
    assert hidden == slm_only
    # only the hint differs: the Autopilot line and the rule text that refers to it
    diff = set(text_shown.splitlines()) ^ set(text_hidden.splitlines())
    assert all("utopilot" in ln or "planner hint" in ln or "If counts tie" in ln for ln in diff)


def test_autopilot_must_be_a_boolean():
    from benchmark.prompts.ask import AskPrompt

    with pytest.raises(ValueError, match="autopilot must be true or false, got 'no'"):
        AskPrompt("stateful", "stateful", rationale=True, autopilot="no")


def test_hint_ablation_preset_runs_ask_plus_with_and_without_the_hint(tmp_path):
    """+experiment=hint_ablation: ASK+ (stateful + rationale) with the autopilot shown and
    hidden, on the three ASK+ envs; the two arms carry different prompt names in the report."""
    import itertools

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from benchmark.validate import validate

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", ["+experiment=hint_ablation"], return_hydra_config=True)
        params = {k: str(v).split(",") for k, v in cfg.hydra.sweeper.params.items()}
        assert sorted(params["env"]) == ["doorkey8", "fourrooms", "higherlower"]
        seen = {}
        for method, env in itertools.product(params["method"], params["env"]):
            cell = compose(
                "config",
                ["+experiment=hint_ablation", f"method={method}", f"env={env}", "slm=tiny",
                 f"paths.root={tmp_path}"],
            )  # fmt: skip
            validate(cell)
            p = cell.prompt
            assert (cell.gate.name, p.level, p.rationale) == ("entropy", "stateful", True)
            seen[p.autopilot] = p.name
    GlobalHydra.instance().clear()
    assert seen == {True: "stateful", False: "stateful_nohint"}


@pytest.mark.parametrize(("env", "autopilot"), golden_prompts.AUTOPILOT_CASES)
def test_golden_autopilot_prompt(env, autopilot):
    """tests/golden pins ASK+ (stateful + rationale) with a PPO suggestion, shown
    (prompt.autopilot=true) and hidden (false); `make golden` records the files."""
    golden_prompts.refuse_update_env()
    text = golden_prompts.autopilot_text(env, autopilot)
    path = golden_prompts.autopilot_path(env, autopilot)
    assert text == golden_prompts.expected(path)


@pytest.mark.parametrize(
    ("env", "prompt"),
    [
        (e, p)
        for e in ("fourrooms", "doorkey8", "higherlower")
        for p in ("basic", "stateful", "belief")
    ],
)
def test_autopilot_line_iff_ppo_action(env, prompt):
    variant, task = showcase.variant_for(env, prompt, rationale=True)
    episode = task.episode(100)
    session = variant.session(episode, with_expert=True)
    _, without = _consult(session, ppo=None)
    _, with_ppo = _consult(session, ppo=1)
    text_without = "\n".join(m["content"] for q in without for m in q.messages)
    text_with = "\n".join(m["content"] for m in with_ppo[-1].messages)
    assert "Autopilot" not in text_without and "autopilot" not in text_without
    assert f"Autopilot: {episode.action_names[1]}" in text_with


def test_feedback_prompts_never_show_an_autopilot():
    variant, task = showcase.variant_for("empty16x16", "hwbp_cot_df_rf_crf_pf")
    session = variant.session(task.episode(100), with_expert=True)
    _, queries = _consult(session, ppo=2)
    assert "utopilot" not in queries[0].messages[1]["content"]


def _pf_answer(tag):
    return lambda q: json.dumps({"action": "Move Forward", "reason": "r", "policy": tag})


def test_pf_carries_the_summary_across_queries_not_episodes():
    variant, task = showcase.variant_for("empty16x16", "hwbp_pf")
    episode = task.episode(100)
    session = variant.session(episode, with_expert=False)
    _, q0 = _consult(session, answer=_pf_answer("POLICY-ONE"))
    assert "no summary yet" in q0[0].messages[1]["content"]
    episode.step(2)
    _, q1 = _consult(session, answer=_pf_answer("POLICY-TWO"))
    assert "POLICY-ONE" in q1[0].messages[1]["content"]
    episode.step(2)
    _, q2 = _consult(session, answer=lambda q: '{"action": "Move Forward"}')  # no policy field
    assert "POLICY-TWO" in q2[0].messages[1]["content"]
    _, q3 = _consult(session, answer=lambda q: "Move Forward")
    assert "POLICY-TWO" in q3[0].messages[1]["content"]  # kept when an answer lacks one
    fresh = variant.session(task.episode(101), with_expert=False)
    _, q4 = _consult(fresh, answer=_pf_answer("X"))
    assert "POLICY-TWO" not in q4[0].messages[1]["content"]
    assert not variant.sequential_episodes


def test_pf_across_episodes_carries_the_summary_to_the_next_episode():
    variant, task = showcase.variant_for("empty16x16", "pf_across_episodes")
    assert variant.sequential_episodes
    first = variant.session(task.episode(100), with_expert=False)
    _consult(first, answer=_pf_answer("EPISODE-100-POLICY"))
    second = variant.session(task.episode(101), with_expert=False)
    _, queries = _consult(second, answer=_pf_answer("EPISODE-101-POLICY"))
    assert "EPISODE-100-POLICY" in queries[0].messages[1]["content"]
    third = variant.session(task.episode(102), with_expert=False)
    _, queries = _consult(third, answer=_pf_answer("Z"))
    assert "EPISODE-101-POLICY" in queries[0].messages[1]["content"]


def test_df_shows_previous_action_and_states():
    variant, task = showcase.variant_for("empty16x16", "hwbp_cot_df")
    episode = task.episode(100)
    session = variant.session(episode, with_expert=False)
    _, q0 = _consult(session, answer=lambda q: '{"action": "Turn Right"}')
    assert "first step" in q0[0].messages[1]["content"]
    before = "\n".join(r.replace("#", "W") for r in episode.view().full_grid)
    episode.step(1)  # TURN_RIGHT
    after = "\n".join(r.replace("#", "W") for r in episode.view().full_grid)
    _, q1 = _consult(session, answer=lambda q: '{"action": "Move Forward"}')
    text = q1[0].messages[1]["content"]
    assert (
        f"The last action you took was Turn Right, which changed the environment state from\n{before}\nto\n{after}"
        in text
    )


@pytest.mark.parametrize("env", ["empty5x5_random", "empty16x16", "simplecrossing9", "fourrooms"])
def test_complete_executes_the_plan_open_loop(env):
    """One call at the first consultation, then the plan without calls; the oracle's plan
    reaches the goal; an exhausted plan repeats a no-move action."""
    variant, task = showcase.variant_for(env, "complete")
    episode = task.episode(100)
    session = variant.session(episode, with_expert=True)
    plan = [episode.action_names[i] for i in episode.expert_plan()]
    calls = 0
    for t in range(len(plan)):
        decision, queries = _consult(session)
        calls += len(queries)
        assert episode.action_names[decision.action] == plan[t]
        assert decision.queried == (t == 0)
        episode.step(decision.action)
    assert calls == 1 and episode.done and episode.outcome()["success"] == 1.0
    short = variant.session(task.episode(100), with_expert=False)
    decision, _ = _consult(short, answer=lambda q: '{"actions": ["Turn Left"]}')
    decision, queries = _consult(short)
    idle = "DONE" if "DONE" in task.action_names else "TURN_LEFT"
    assert not queries and task.action_names[decision.action] == idle
    assert decision.reason == "plan exhausted" and decision.queried is False


def test_complete_retries_after_an_unparseable_plan():
    variant, task = showcase.variant_for("empty5x5_random", "complete")
    session = variant.session(task.episode(100), with_expert=False)
    decision, queries = _consult(session, answer=lambda q: "I cannot plan this.")
    assert decision.action is None and len(queries) == 1
    decision, queries = _consult(session, answer=lambda q: '{"actions": ["Move Forward"]}')
    assert len(queries) == 1 and task.action_names[decision.action] == "FORWARD"


def test_parse_belief_keeps_labelled_claims_only():
    text = """<think>ok</think><belief_state>
- I am at (3, 4) facing EAST [confirmed]
* the goal is behind the east wall (probable)
- 12 cells of the map have been seen [confirmed]
- the door might be possible or unknown
- I should turn left next [confirmed]
- unlikely: a key lies in the north room
- no label on this line
- [unknown]
</belief_state>"""
    claims = parse_belief(text)
    assert claims == [
        "- I am at (3, 4) facing EAST [confirmed]",
        "- the goal is behind the east wall [probable]",
        "- 12 cells of the map have been seen [confirmed]",
        "- a key lies in the north room [unlikely]",
    ]
    assert parse_belief("nothing useful here") == []
    assert len(LABELS) == 7


def test_belief_update_falls_back_to_the_previous_belief():
    variant, task = showcase.variant_for("fourrooms", "belief")
    session = variant.session(task.episode(100), with_expert=True)
    decision, queries = _consult(session, answer=lambda q: q.render_answer("FORWARD", "x"))
    assert len(queries) == 2 and decision.action is not None
    good = list(session.belief)
    assert good != INITIAL_BELIEF and all(c.endswith("]") for c in good)
    decision, queries = _consult(session, answer=lambda q: "FORWARD")  # garbage belief update
    assert session.belief == good and session.update_failures == 1
    assert decision.action == task.action_names.index("FORWARD")
    # the act round sees the belief and the current view, not the raw history
    act = queries[1].messages[1]["content"]
    assert "BELIEF:" in act and good[0] in act and "NEW OBSERVATIONS" not in act


def test_unsupported_env_is_named():
    variant, task = showcase.variant_for("higherlower", "hwbp")
    with pytest.raises(ValueError, match="hwbp.*higherlower.*grid"):
        variant.check(task)


def test_belief_stays_near_constant_and_ask_plus_within_budget():
    """Real Qwen3.5 tokens per consultation over a 100-step FourRooms random walk: the belief
    prompt (both rounds) stays within 15% of its size at step 25; stateful does not shrink;
    ASK+ (stateful + rationale) stays under ASK_PLUS_BUDGET at every step."""
    belief = showcase.growth("belief")
    stateful = showcase.growth("stateful")
    print("belief", belief, "stateful", stateful)
    steady = [belief[s] for s in (25, 50, 100)]
    assert max(steady) <= 1.15 * min(steady)
    assert stateful[100] >= stateful[0]
    counter = showcase.qwen_counter()
    variant, task = showcase.variant_for("fourrooms", "stateful", rationale=True)
    worst = 0
    for record in showcase.drive(variant, task, 100, 100, policy="random"):
        worst = max(worst, showcase.consult_tokens(record, counter))
    print("ASK+ max tokens", worst)
    assert 300 < worst <= ASK_PLUS_BUDGET


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_golden_prompt(case):
    """tests/golden pins every prompt (seed 100, step 5, expert-driven); `make golden` records
    the files."""
    golden_prompts.refuse_update_env()
    text = golden_prompts.prompt_text(*case)
    path = showcase.golden_path(*case)
    assert text == golden_prompts.expected(path)


def test_navfeatures_relative_offsets():
    assert nf.turn("NORTH", "left") == "WEST" and nf.turn("WEST", "right") == "NORTH"
    assert nf.relative("EAST")["left"] == (0, -1) and nf.relative("EAST")["back"] == (-1, 0)


@pytest.mark.parametrize("env", ["fourrooms", "higherlower", "tw_quest"])
def test_the_raw_history_prompt_grows_one_line_per_step(env):
    """prompt=history (Agent-BRACE's raw-history baselines): the basic prompt plus one line per
    step since the episode began, never summarised, so the history grows with the episode; the
    rest of the message is the basic prompt's, word for word: no derived state (no map, recent
    commands or rooms entered), the view Agent-BRACE's act round sees. prompt=react is the same
    with the rationale answer."""
    from hydra.utils import instantiate

    _, task = showcase.variant_for(env, "basic", False)
    variant = instantiate(OmegaConf.load(CONF / "prompt" / "history.yaml"), _convert_="all")
    basic = instantiate(showcase.prompt_cfg("basic"), _convert_="all")
    lengths = []
    plain = list(showcase.drive(basic, task, 101, 6, policy="random"))
    for record, same in zip(showcase.drive(variant, task, 101, 6, policy="random"), plain,
                            strict=True):  # fmt: skip
        system, user = (m["content"] for m in record.queries[0].messages)
        head, rest = user.split("\n\nHISTORY", 1)
        history, tail = rest.split("\n\nEXAMPLES:", 1)
        lines = [x for x in history.splitlines()[1:] if x]
        assert [x.split(":", 1)[0] for x in lines] == [str(t) for t in range(record.step)]
        assert [system, head + "\n\nEXAMPLES:" + tail] == [
            m["content"] for m in same.queries[0].messages
        ]
        for derived in ("KNOWN MAP", "RECENT COMMANDS", "Rooms entered", "Known map"):
            assert derived not in head
        lengths.append(len(history))  # (the view itself varies: TextWorld's first is long)
    assert len(lengths) >= 4 and all(b > a for a, b in itertools.pairwise(lengths))
    assert "HISTORY" not in plain[-1].queries[0].messages[1]["content"]
    react = OmegaConf.load(CONF / "prompt" / "react.yaml")
    assert (react.level, react.history, react.rationale) == ("basic", True, True)


def test_show_takes_help_and_any_hydra_override(capsys):
    """`show --help` prints the usage; protocol=... (any Hydra override) changes the composed
    prompt and is named in the header; a misspelt key still fails, naming it."""
    from benchmark.prompts.__main__ import main

    main(["show", "--help"])
    assert "python -m benchmark.prompts show" in capsys.readouterr().out
    shown = {}
    for protocol in ("paper", "suite"):  # the planner hint searches for seen targets / frontiers
        main(["show", "env=fourrooms", "step=5", f"protocol={protocol}"])
        shown[protocol] = capsys.readouterr().out
        assert shown[protocol].splitlines()[0].endswith(f" protocol={protocol}")
    assert "\nPlanner hint: " in shown["suite"] and "\nPlanner hint: " not in shown["paper"]
    with pytest.raises(SystemExit, match="Could not override 'stepp'"):
        main(["show", "env=fourrooms", "stepp=5"])


def test_stats_reads_the_tiny_tokenizer_of_the_results_root(tmp_path, monkeypatch, tiny_model):
    """BENCHMARK_ROOT (paths.root) says where the tiny model is, not ./outputs."""
    import shutil

    shutil.copytree(tiny_model(), tmp_path / "root" / "models" / "tiny-qwen3-s0")
    monkeypatch.setenv("BENCHMARK_ROOT", str(tmp_path / "root"))
    assert showcase.models_dir() == tmp_path / "root" / "models"
    count = showcase.tiny_counter(showcase.models_dir())
    assert count is not None and count([{"role": "user", "content": "FORWARD"}]) > 0
    monkeypatch.setenv("BENCHMARK_ROOT", str(tmp_path / "empty"))
    assert showcase.tiny_counter(showcase.models_dir()) is None
