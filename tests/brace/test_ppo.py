"""Agent-BRACE's PPO (benchmark.brace.ppo, tokens, rl): GAE against a hand-computed example,
completion-only log-probs equal to the full log-softmax, the clipped update moving an advantaged
completion up and a disadvantaged one down, the critic learning a fixed batch, the frozen
belief staying byte-identical while the policy trains, and the LoRA + gradient checkpointing +
bf16 path as a CPU dry run of the tiny model."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from benchmark.brace import ppo, rl, rollout, tokens
from benchmark.brace.rl import RLJob, RLSettings
from benchmark.finetune import lm
from benchmark.seeds import DEFAULT_SPLITS
from tests.brace import episodes


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return tiny_model("small")


def test_gae_equals_the_hand_computed_example():
    # deltas: 1 - .4 = .6; .9 x .4 - .2 = .16; .9 x .2 - .5 = -.32; gamma lam = .72
    adv, ret = ppo.gae([0, 0, 1], [0.5, 0.2, 0.4], gamma=0.9, lam=0.8)
    assert adv == pytest.approx([-0.32 + 0.72 * 0.592, 0.16 + 0.72 * 0.6, 0.6])
    assert ret == pytest.approx(adv + np.array([0.5, 0.2, 0.4]))
    # gamma = lambda = 1: the advantage is the return less the value (Monte Carlo)
    adv, _ = ppo.gae([0, 0, 1], [0.5, 0.2, 0.4], gamma=1, lam=1)
    assert adv == pytest.approx([0.5, 0.8, 0.6])
    with pytest.raises(ValueError, match="3 rewards but 2 values"):
        ppo.gae([0, 0, 1], [0.1, 0.2], 1, 1)


def test_completion_log_probs_equal_the_full_log_softmax(tiny):
    model, tok = lm.load(tiny)
    pairs = [([5, 6, 7, 8], [9, 10, 11]), ([3, 4], [5, 6, 7, 8, 9])]  # padded to one width
    got, _ = tokens.completion_forward(model, pairs, lm.pad_id(tok))
    for (p, c), logp in zip(pairs, got, strict=True):
        assert logp.shape == (len(c),)
        assert logp.detach().numpy() == pytest.approx(
            tokens.full_logprobs(model, p, c).detach().numpy(), abs=1e-5
        )
    with pytest.raises(ValueError, match="pair 0: a prompt and a completion"):
        tokens.completion_forward(model, [([1], [])], 0)


def _learner(tiny, **kw):
    model, tok = lm.load(tiny)
    settings = RLSettings(**{"learning_rate": 1e-2, "ppo_epochs": 1, "minibatch": 8, **kw})
    return ppo.Learner(model, tok, settings.check())


def _items(learner, pairs, advantages, returns):
    import torch

    logp, _ = learner.forward(pairs)
    return [(pair, lp.detach(), torch.full_like(lp, a), torch.full_like(lp, r))
            for pair, lp, a, r in zip(pairs, logp, advantages, returns, strict=True)]  # fmt: skip


def test_the_update_raises_an_advantaged_completion_and_lowers_a_disadvantaged_one(tiny):
    learner = _learner(tiny, value_coef=0.0)
    pairs = [([5, 6, 7], [20, 21, 22]), ([5, 6, 7], [30, 31, 32])]
    items = _items(learner, pairs, [1.0, -1.0], [0.0, 0.0])
    old = [float(x[1].sum()) for x in items]
    stats = ppo.ppo_update(learner, items)
    new = [float(x.detach().sum()) for x in learner.forward(pairs)[0]]
    assert new[0] > old[0] + 1e-3 and new[1] < old[1] - 1e-3, (old, new)
    assert set(stats) == {"policy_loss", "value_loss", "clip_frac", "approx_kl"}
    assert stats["policy_loss"] == pytest.approx(0.0, abs=1e-6)  # ratio 1: -(mean A) = 0


def test_first_iteration_advantages_carry_the_sign_of_the_episode_outcome(tiny, tmp_path):
    """The trainer's own settings (conf/brace, checked), the critic's zero-initialised head:
    every act token of a won episode gets a positive advantage and every one of a lost
    episode a negative one, whatever the episode's length (GAE lambda < 1 plus the batch
    whitening pushed a long won episode's first tokens below 0)."""
    import torch

    from benchmark.brace import checks
    from tests.conftest import compose_cfg

    s = checks.check(compose_cfg(tmp_path, "env=empty5x5_random")).rl
    learner = ppo.Learner(*lm.load(tiny), s)
    rng = np.random.default_rng(0)

    def episode(turns, won):  # `turns` act completions of 12 tokens after 20-token prompts
        pairs = [([int(t) for t in rng.integers(3, 500, 20)],
                  [int(t) for t in rng.integers(3, 500, 12)]) for _ in range(turns)]  # fmt: skip
        return ppo.Trajectory("policy", pairs, float(won))

    batch = [episode(8, True), episode(8, False), episode(12, True), episode(3, False),
             episode(2, True)]  # fmt: skip
    learner.score(batch)
    for traj in batch:
        adv = torch.cat(traj.advantages)
        assert adv.numel() == 12 * len(traj.pairs)
        if traj.reward:
            assert float(adv.min()) > 0, (traj.reward, adv[:5])
        else:
            assert float(adv.max()) < 0, (traj.reward, adv[:5])
    same = [episode(4, True), episode(6, True)]  # nothing to tell apart: no push either way
    learner.score(same)
    assert all(float(a.abs().max()) == 0 for t in same for a in t.advantages)


@pytest.fixture(scope="module")
def teacher_episode():
    return episodes.teacher_episode()


def test_one_policy_update_raises_the_probability_of_a_winning_episodes_commands(
    tiny, teacher_episode
):
    """The policy stage's update (trajectories, Learner.score, Learner.update) on a fixed batch
    of two episodes through the same states: the won one's commands (the expert's) become
    likelier and the lost one's (other allowed commands) less likely."""
    import torch

    torch.manual_seed(0)
    model, tok = lm.load(tiny)
    won = episodes.with_ids(teacher_episode, tok, 1.0)
    lost = episodes.with_ids(teacher_episode, tok, 0.0, episodes.other_command)
    trajs, raw = ppo.trajectories({episodes.SEED: [won, lost]}, ["policy"])
    assert raw["env"] == [1.0, 0.0] and [t.reward for t in trajs] == [1.0, 0.0]
    assert len(trajs[0].pairs) >= 3
    learner = ppo.Learner(model, tok, RLSettings(learning_rate=1e-3, ppo_epochs=1).check())
    before = [sum(episodes.log_probs(model, tok, t.pairs)) for t in trajs]
    learner.score(trajs)
    learner.update(trajs)
    after = [sum(episodes.log_probs(model, tok, t.pairs)) for t in trajs]
    assert after[0] > before[0] + 0.05 and after[1] < before[1] - 0.05, (before, after)


def test_one_belief_update_raises_the_batchs_r_belief(tiny, teacher_episode):
    """The joint stage's belief update (trajectories scoring each update by R_belief,
    Learner.score, Learner.update) on a fixed batch: at each of the teacher's states, its
    update and copies with one digit of a claim changed (a false claim: a lower R_belief), all as many
    tokens long, so the untrained model's probabilities of a state's completions are
    comparable instead of one dwarfing the rest by tens of nats. The measure is R_belief's
    expectation under the model restricted to each state's completions: one update moves
    probability toward the state's better updates, so it rises (and falls with the update's
    sign flipped)."""
    import torch

    torch.manual_seed(0)
    model, tok = lm.load(tiny)
    variants = episodes.misstated(teacher_episode, tok)
    turns = [t for s in teacher_episode for t in s.turns if t.role == "belief"]
    index = {id(t): j for j, t in enumerate(turns)}

    def variant(k):  # episode k: each state's k-th completion (the teacher's when fewer)
        def text(s, t):
            mine = variants[index[id(t)]] if t.role == "belief" else [t.text]
            return mine[k] if k < len(mine) else mine[0]

        return text

    group = max(map(len, variants))
    logs = [episodes.with_ids(teacher_episode, tok, 1.0, variant(k)) for k in range(group)]
    trajs, raw = ppo.trajectories({episodes.SEED: logs}, ["belief"])
    assert len(trajs) == group * len(turns) and [t.reward for t in trajs] == raw["belief"]
    states = []
    for j in range(len(turns)):
        mine = {tuple(t.pairs[0][1]): t for t in trajs[j :: len(turns)]}
        if len(mine) > 1:
            states.append([(t.pairs[0], t.reward) for t in mine.values()])
    assert len(states) >= 3, variants
    assert all(len({r for _, r in c}) == len(c) for c in states)
    learner = ppo.Learner(model, tok, RLSettings(learning_rate=1e-3, ppo_epochs=1).check(),
                          role="belief")  # fmt: skip
    before = episodes.expected_reward(model, tok, states)
    learner.score(trajs)
    learner.update(trajs)
    after = episodes.expected_reward(model, tok, states)
    assert after > before + 1e-3, (before, after)


def test_the_critic_learns_a_fixed_batch(tiny):
    learner = _learner(tiny, value_learning_rate=1e-2, learning_rate=1e-6)
    pairs = [([5, 6, 7], [20, 21, 22]), ([8, 9], [30, 31])]
    items = _items(learner, pairs, [0.0, 0.0], [1.0, 0.5])
    losses = [ppo.ppo_update(learner, items)["value_loss"] for _ in range(30)]
    assert losses[0] == pytest.approx(0.5 * (3 * 1.0 + 2 * 0.25) / 5)  # zero head at start
    assert losses[-1] < 0.5 * losses[0]


def _drifted(tiny, scale=0.05):
    """The tiny model with every weight moved by Gaussian noise (seeded): a policy that has
    drifted from the reference it started as."""
    import torch

    model, tok = lm.load(tiny)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    return model, tok


def _frozen(tiny):
    model, _ = lm.load(tiny)
    return model.requires_grad_(False)


def test_the_kl_penalty_enters_each_tokens_reward(tiny):
    """kl_coef > 0: each completion token's reward is less kl_coef x (old - reference log-prob),
    so with no env reward and the critic's zero head the returns are -kl_coef x the KL to come
    (gamma = lambda = 1); kl_ref is the batch's mean difference. Off, no penalty."""
    import torch

    pairs = [([5, 6, 7], [20, 21, 22]), ([8, 9], [30, 31])]
    reference = _frozen(tiny)
    learner = ppo.Learner(*_drifted(tiny), RLSettings(kl_coef=0.5).check(), reference=reference)
    traj = ppo.Trajectory("policy", pairs, 0.0)
    stats = learner.score([traj])
    old = torch.cat(learner.forward(pairs)[0]).detach()
    ref = torch.cat(tokens.completion_forward(reference, pairs, lm.pad_id(learner.tok))[0])
    kl = (old - ref).numpy()
    assert np.abs(kl).max() > 0.05  # the drift is there to penalise
    returns = torch.cat(traj.returns).numpy()
    assert returns == pytest.approx(-0.5 * np.cumsum(kl[::-1])[::-1], abs=1e-5)
    assert stats == {"kl_ref": pytest.approx(float(kl.mean()), abs=1e-5)}
    plain = ppo.Learner(*_drifted(tiny), RLSettings().check())
    off = ppo.Trajectory("policy", pairs, 0.0)
    assert plain.score([off]) == {} and float(torch.cat(off.returns).abs().max()) == 0
    with pytest.raises(ValueError, match=r"rl kl_coef=0.5: the policy needs its reference"):
        ppo.Learner(*_drifted(tiny), RLSettings(kl_coef=0.5).check())


def test_the_kl_penalty_pulls_a_drifted_policy_back_to_its_reference(tiny):
    """No env reward at all: with kl_coef > 0 the PPO updates on completions sampled from the
    drifted policy bring its next-token distributions closer to the reference's (the exact KL
    over the vocabulary at the prompts falls); with kl_coef = 0 nothing moves. The critic's
    loss is off (value_coef 0) so that only the penalty acts on the model."""
    import torch

    prompts = [[5, 6, 7], [8, 9, 10, 11]]
    reference = _frozen(tiny)

    def next_token(model):
        with torch.no_grad():
            return [torch.log_softmax(model(input_ids=torch.tensor([p])).logits[0, -1].float(),
                                      -1) for p in prompts]  # fmt: skip

    def kl(model):
        pairs = zip(next_token(model), next_token(reference), strict=True)
        return float(np.mean([float((a.exp() * (a - b)).sum()) for a, b in pairs]))

    def train(kl_coef):
        model, tok = _drifted(tiny)
        settings = RLSettings(learning_rate=1e-3, ppo_epochs=1, minibatch=64, value_coef=0.0,
                              kl_coef=kl_coef).check()  # fmt: skip
        learner = ppo.Learner(model, tok, settings, reference=reference if kl_coef else None)
        gen = torch.Generator().manual_seed(1)
        curve = [kl(model)]
        for it in range(3):  # one-token completions: their KL is the prompt's next-token KL
            pairs = [
                (p, [int(t)])
                for p, lp in zip(prompts, next_token(model), strict=True)
                for t in torch.multinomial(lp.exp(), 64, replacement=True, generator=gen)
            ]
            batch = [ppo.Trajectory("policy", [pair], 0.0) for pair in pairs]
            learner.score(batch)
            learner.update(batch, seed=it)
            curve.append(kl(model))
        return curve

    pulled, unpenalised = train(0.1), train(0.0)
    assert pulled[0] > 0.3, pulled  # the drift: far from the reference to begin with
    assert all(b < a for a, b in zip(pulled, pulled[1:], strict=False)), pulled
    assert pulled[-1] < 0.6 * pulled[0], pulled
    assert unpenalised == pytest.approx([unpenalised[0]] * 4, abs=1e-9), unpenalised


def test_the_belief_trains_at_its_own_rate_when_set(tiny):
    settings = RLSettings(learning_rate=1e-6, belief_learning_rate=1e-5).check()
    rates = {role: ppo.Learner(*lm.load(tiny), settings, role=role).optimizer.param_groups[0]["lr"]
             for role in ("belief", "policy")}  # fmt: skip
    assert rates == {"belief": 1e-5, "policy": 1e-6}
    same = RLSettings(learning_rate=1e-6).check()
    assert same.role_learning_rate("belief") == same.role_learning_rate("policy") == 1e-6


def test_settings_added_later_stay_out_of_a_trained_models_identity_while_off():
    """kl_coef and belief_learning_rate at their off values leave the identity models were
    trained under unchanged (their folders stay reusable); switched on, they name the model."""
    plain = RLSettings().identity()
    assert "kl_coef" not in plain and "belief_learning_rate" not in plain
    assert plain == {k: v for k, v in RLSettings().as_dict().items()
                     if k not in ("kl_coef", "belief_learning_rate")}  # fmt: skip
    on = RLSettings(kl_coef=0.01, belief_learning_rate=1e-5).identity()
    assert on["kl_coef"] == 0.01 and on["belief_learning_rate"] == 1e-5


def test_direct_action_rl_models_name_the_history_prompts_view(tmp_path):
    """A raw-history policy's identity names the history prompt's view (the basic view since
    it lost the stateful extras): one trained on the earlier prompt is refused, not reused; the
    belief rows' identities do not carry it."""
    from benchmark.brace.checks import check
    from tests.conftest import compose_cfg

    direct = check(compose_cfg(tmp_path, "env=empty5x5_random", "brace=direct_rl"))
    assert direct.rl_identity()["rules"]["history_prompt"] == "basic-view"
    agent = check(compose_cfg(tmp_path, "env=empty5x5_random"))
    assert "history_prompt" not in agent.rl_identity()["rules"]


def test_a_models_identity_holds_the_prompt_it_trains_on(tmp_path):
    """The trainer's prompt (conf/prompt/brace.yaml, history.yaml) is part of the SFT and RL
    identities, so a model trained under another claim cap or view is never reused; the held
    belief keeps as many claims as the teacher writes (no SFT target longer than its prompt's
    "At most N claims")."""
    from benchmark.brace.checks import check
    from benchmark.vocabulary import BELIEF_MAX_BULLETS
    from tests.conftest import compose_cfg

    agent = check(compose_cfg(tmp_path, "env=empty5x5_random"))
    for identity in (agent.sft_identity(), agent.rl_identity()):
        assert identity["prompt"]["name"] == "brace"
        assert identity["prompt"]["max_claims"] == BELIEF_MAX_BULLETS
    direct = check(compose_cfg(tmp_path, "env=empty5x5_random", "brace=direct_rl"))
    assert direct.rl_identity()["prompt"]["level"] == "basic"


def test_settings_are_refused_with_the_bad_value_named():
    with pytest.raises(ValueError, match=r"rl iterations=-1: must be >= 1"):
        RLSettings(iterations=-1).check()
    with pytest.raises(ValueError, match=r"rl kl_coef=-0.01: must be >= 0 \(0: no KL penalty\)"):
        RLSettings(kl_coef=-0.01).check()
    with pytest.raises(ValueError, match=r"rl kl_coef=nan: must be >= 0"):
        RLSettings(kl_coef=float("nan")).check()
    with pytest.raises(ValueError, match=r"rl belief_learning_rate=0.0: must be > 0, or null"):
        RLSettings(belief_learning_rate=0.0).check()
    with pytest.raises(ValueError, match=r"rl kl_coef=0.01: read by the PPO trainer only"):
        rl.train_rl("grpo", RLJob(None, None, {}, {}, [200], DEFAULT_SPLITS),
                    RLSettings(kl_coef=0.01))  # fmt: skip
    with pytest.raises(ValueError, match=r"rl lam=1.5: must be in \[0, 1\]"):
        RLSettings(lam=1.5).check()
    with pytest.raises(ValueError, match=r"rl dtype='fp8': allowed float32, bfloat16"):
        RLSettings(dtype="fp8").check()
    with pytest.raises(ValueError, match=r"rl settings \['critic'\]: unknown"):
        RLSettings.of({"critic": 1})
    with pytest.raises(ValueError, match=r"brace algorithm 'dqn': allowed ppo, grpo"):
        rl.train_rl("dqn", RLJob(None, None, {}, {}, [200], DEFAULT_SPLITS), RLSettings())
    with pytest.raises(ValueError, match="seed 5 is in the validation split"):
        ppo.train(RLJob(None, None, {}, {}, [200, 5], DEFAULT_SPLITS), RLSettings())


def _alternating_outcomes(monkeypatch):
    """Episodes alternately won and lost (the untrained tiny model never wins): the rewards
    by hand, the rollouts, models and updates real."""
    outcome = itertools.cycle([1.0, 0.0])
    real = rollout.run

    def run(*a, **kw):
        rows, logs = real(*a, **kw)
        by_seed = {s: next(outcome) for s in sorted({x.seed for x in logs})}
        for x in logs:
            x.success = by_seed[x.seed]
        return rows, logs

    monkeypatch.setattr(rollout, "run", run)


@pytest.mark.parametrize("train_belief", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_frozen_belief_stays_byte_identical_while_the_policy_trains(
    tiny, tmp_path, monkeypatch, train_belief
):
    from benchmark.brace.train import brace_prompt, task_for

    _alternating_outcomes(monkeypatch)
    monkeypatch.setattr(ppo, "belief_reward", _length_reward)
    prompt = brace_prompt()
    prompt.update_decoding = type(prompt.update_decoding)(max_new_tokens=8)
    out = {"belief": tmp_path / "b", "policy": tmp_path / "p"}
    settings = RLSettings(iterations=1, policy_iterations=1, seeds_per_step=2, group=1,
                          learning_rate=1e-2, kl_coef=0.01)  # fmt: skip
    job = RLJob(task_for("empty5x5_random", 2), prompt, {"belief": tiny, "policy": tiny}, out,
                [300, 301], DEFAULT_SPLITS, log=lambda r: None)  # fmt: skip
    result = rl.train_rl("ppo", job, settings, train_belief=train_belief)
    weights = "model.safetensors"
    same_policy = (out["policy"] / weights).read_bytes() == (tiny / weights).read_bytes()
    same_belief = (out["belief"] / weights).read_bytes() == (tiny / weights).read_bytes()
    assert not same_policy  # the policy trained
    assert same_belief is not train_belief  # frozen: byte for byte the model it started from
    assert [r["stage"] for r in result["history"]] == ["policy", "joint"]
    assert len(result["value_loss"]["policy"]) == 2
    assert all(v is not None and v >= 0 for v in result["value_loss"]["policy"])
    if train_belief:  # updated after the joint stage's batch only
        assert result["value_loss"]["belief"][0] is None
        assert result["value_loss"]["belief"][1] is not None
        assert (out["belief"] / ppo.VALUE_HEAD).exists()
    else:
        assert (
            "belief" not in result["value_loss"] and not (out["belief"] / ppo.VALUE_HEAD).exists()
        )
    assert result["history"][0]["context_tokens"] > 0
    # the policy's KL to the model it started from: 0 on the first batch (not yet moved)
    kl = [row["loss"]["policy"]["kl_ref"] for row in result["history"]]
    assert kl[0] == pytest.approx(0.0, abs=1e-5) and kl[1] != 0.0, kl
    assert all("kl_ref" not in row["loss"].get("belief", {}) for row in result["history"])


def _length_reward(text, previous, truth, teacher, success, weights=None):
    from benchmark.brace.rewards import BeliefReward

    r = float(len(text or "") % 3)  # differs between updates: a gradient for the belief
    return BeliefReward(r, 1.0, 0.0, 0.0, 0.0, 0.0)


def test_lora_checkpointing_bf16_dry_run_trains_and_saves_a_plain_model(tiny, tmp_path):
    """The GPU recipe's switches on the CPU with the tiny model: LoRA adapters only are
    trained, gradient checkpointing and bf16 autocast on; the saved folder is a plain model
    (adapters merged) that loads and differs from the base. The KL reference is the model with
    its adapters off (no second copy): after the update it still scores as the base."""
    settings = RLSettings(lora_rank=4, gradient_checkpointing=True, bf16_autocast=True,
                          learning_rate=5e-2, ppo_epochs=2, kl_coef=0.01).check()  # fmt: skip
    model, tok = tokens.load_for_rl(tiny, lora_rank=4, gradient_checkpointing=True)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert model.get_base_model().is_activation_checkpointing
    assert ppo.reference_for(settings, tiny) == ppo.ADAPTERS
    learner = ppo.Learner(model, tok, settings, reference=ppo.reference_for(settings, tiny))
    pairs = [([5, 6, 7], [20, 21, 22]), ([5, 6, 7], [30, 31, 32])]
    items = _items(learner, pairs, [1.0, -1.0], [1.0, 0.0])
    stats = ppo.ppo_update(learner, items)
    assert stats["value_loss"] > 0
    base_logp, _ = tokens.completion_forward(_frozen(tiny), pairs, lm.pad_id(tok), bf16=True)
    for got, want in zip(learner.reference_logp(pairs), base_logp, strict=True):
        assert got.float().numpy() == pytest.approx(want.float().numpy(), abs=1e-4)
    assert not all(  # while the trained model moved away from it
        np.allclose(a.detach().float().numpy(), b.float().numpy(), atol=1e-3)
        for a, b in zip(learner.forward(pairs)[0], base_logp, strict=True)
    )
    ppo.save_role("policy", (model, tok), learner, tiny, tmp_path / "p")
    saved, _ = lm.load(tmp_path / "p")
    assert not any("lora" in k for k in saved.state_dict())
    base, _ = lm.load(tiny)
    assert any(
        not (a == b).all()
        for a, b in zip(saved.state_dict().values(), base.state_dict().values(), strict=True)
    )


def test_a_bad_rl_setting_of_the_cli_is_refused_before_any_work(tmp_path):
    """The trainer job's up-front check (benchmark.brace.checks) applies RLSettings' rules,
    naming the key as the command line spells it."""
    from benchmark.brace.checks import SettingsError, check
    from tests.conftest import compose_cfg

    with pytest.raises(SettingsError, match=r"brace.rl.policy_iterations=-1: must be >= 0"):
        check(compose_cfg(tmp_path, "env=empty5x5_random", "brace.rl.policy_iterations=-1"))
    with pytest.raises(SettingsError, match=r"brace.rl.kl_coef=-1.0: must be >= 0"):
        check(compose_cfg(tmp_path, "env=empty5x5_random", "brace.rl.kl_coef=-1.0"))
    with pytest.raises(
        SettingsError,
        match=r"brace.rl.belief_learning_rate=1e-05: read by the "
        r"PPO trainer only \(algorithm ppo\); with grpo",
    ):
        check(compose_cfg(tmp_path, "env=empty5x5_random", "brace.algorithm=grpo",
                          "brace.rl.belief_learning_rate=1e-5"))  # fmt: skip
    assert not (tmp_path / "models").exists()


def test_context_per_step_is_the_longest_prompt_of_a_step():
    from benchmark.brace import context
    from benchmark.brace.rollout import StepLog, Turn

    def turn(n):
        return Turn("", [], None, (), "", extra={"prompt_ids": [0] * n})

    logs = [StepLog(200, 0, None, [], [], [], [turn(5), turn(9)]),
            StepLog(201, 0, None, [], [], [], [turn(7)]),
            StepLog(200, 1, None, [], [], [], [turn(12)])]  # fmt: skip
    assert context.per_step(logs) == {0: 8.0, 1: 12.0}
    assert context.running(logs) == {0: 2, 1: 1}  # seed 201 ended after step 0
    assert context.summary({0: 8.0, 1: 12.0}) == {"steps": 2, "first": 8.0, "last": 12.0,
                                                  "max": 12.0, "mean": 10.0}  # fmt: skip
    assert context.summary({0: 8.0, 1: 12.0}, {0: 2, 1: 1})["running_last"] == 1


def test_context_games_paper_takes_the_released_hard_evaluation_games():
    from benchmark.brace.context import with_games

    cfg = with_games("tw_quest", "paper")
    assert cfg.task.evaluation_generation[-1] == {"nb_rooms": 8, "nb_objects": 12,
                                                  "quest_length": 13}  # fmt: skip
    assert cfg.task.max_commands == 128
    assert with_games("tw_quest", "suite").task.evaluation_generation.nb_rooms == 4
    with pytest.raises(SystemExit, match="no Agent-BRACE games for empty5x5_random"):
        with_games("empty5x5_random", "paper")


@pytest.mark.slow
def test_direct_action_rl_trains_the_policy_alone_on_raw_history(tiny, tmp_path, monkeypatch):
    """raw_history: the policy on a prompt without a belief round (prompt=history), no belief
    model; its act rounds are logged and trained."""
    from benchmark.brace.context import history_prompt
    from benchmark.brace.train import task_for

    _alternating_outcomes(monkeypatch)
    out = {"policy": tmp_path / "p"}
    settings = RLSettings(iterations=1, policy_iterations=0, seeds_per_step=2, group=1,
                          learning_rate=1e-2)  # fmt: skip
    job = RLJob(task_for("empty5x5_random", 2), history_prompt(), {"policy": tiny}, out,
                [300, 301], DEFAULT_SPLITS, log=lambda r: None)  # fmt: skip
    result = rl.train_rl("ppo", job, settings, raw_history=True)
    (row,) = result["history"]
    assert result["trained_roles"] == ["policy"] and row["updates"] == 0  # no belief round
    assert row["context_tokens"] > 0 and row["value_loss"]["policy"] is not None
    weights = "model.safetensors"
    assert (out["policy"] / weights).read_bytes() != (tiny / weights).read_bytes()
