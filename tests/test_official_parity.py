"""protocol=official against the authors' released code (github jrzmnt/ask-pomdp), run side by
side on the same states: the prompts it sends, the actions it parses from the same answers, the
MC-dropout entropy and gate decision with the same weights and dropout masks, the tau search
space and trial count of its Optuna objective, its SLM settings, whole SLM-only and ASK+ episodes
of its eval loops, and its answers from the same (tiny, local) model. A differential test: the
released code is imported from a checkout and run here, never copied into the suite.

ASK_POMDP_SRC=<checkout> pytest -m slow tests/test_official_parity.py  (docs/protocol.md)"""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from benchmark.config import compose
from benchmark.consultants.base import Answer, Consultant
from benchmark.envs import make_task
from benchmark.evaluate import Evaluator
from benchmark.gates import GateSettings
from benchmark.uncertainty import mc_dropout

pytestmark = pytest.mark.slow
SRC = os.environ.get("ASK_POMDP_SRC")
if not SRC:
    pytest.skip(
        "ASK_POMDP_SRC is not set: point it at a checkout of the released code "
        "(github jrzmnt/ask-pomdp) to compare protocol=official with it",
        allow_module_level=True,
    )

ENVS = ("fourrooms", "doorkey8", "higherlower")
MIN_STATES = 20
MC_SAMPLES = 30
# answers every parser sees: valid, invalid and edge cases (case, order, rationale lines)
ANSWERS = {
    "fourrooms": [
        "FORWARD", "TURN_LEFT", "TURN_RIGHT", "turn_right", " forward ", "LEFT", "RIGHT", "UP",
        "Go left", "right then forward", "TURN_RIGHT or TURN_LEFT", "LEFTRIGHT", "stay", "",
        "Reason: the wall is ahead, go LEFT\nAction: TURN_RIGHT", "Action: FORWARD",
        "Reason: go forward\nAction: nowhere", "Reason: blocked\naction: turn_left",
        "Action: TURN_LEFT\nAction: FORWARD", "Reason: x\nAction: up", "TURN LEFT",
    ],
    "doorkey8": [
        "PICKUP", "PICK_UP", "pick up the key", "PICK", "TOGGLE", "toggle", "DONE", "DROP",
        "FWD", "FORWARD", "TURN_RIGHT", "TURN_LEFT", "LEFT", "RIGHT", "DONE then DROP",
        "drop and pickup", "Reason: TOGGLE the door\nAction: PICKUP", "Action: turn_right",
        "Reason: unlock\nAction: open it", "nothing", "", "Reason: go\nAction: FWD",
    ],
    "higherlower": [
        "HIGHER", "LOWER", "higher", "lower", "HIGH", "LOW", "lower or higher", "Lower!",
        "neither", "", "Reason: higher odds\nAction: LOWER", "Reason: low card\nAction: HIGHER",
        "Action: high", "Reason: x\nAction: maybe", "SLOWER", "HIGHLOW",
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """The released code's modules, imported from ASK_POMDP_SRC (they create results folders in
    the working directory at import: a temporary one)."""
    src = Path(SRC).resolve()
    for path in (src / "src", src):
        if str(path) not in sys.path:
            sys.path.append(str(path))
    cwd = Path.cwd()
    os.chdir(tmp_path_factory.mktemp("released"))
    try:
        mods = {
            name: importlib.import_module(name)
            for name in (
                "eval_ppo_slm",
                "door_key.eval",
                "door_key.env",
                "higher_lower.eval",
                "higher_lower.env",
                "ask.envs.fourrooms",
                "ask.uncertainty.entropy",
                "ask.utils.ppo",
            )
        }
    finally:
        os.chdir(cwd)
    return SimpleNamespace(src=src, **{k.replace(".", "_"): v for k, v in mods.items()})


def official_cfg(env: str, *overrides: str):
    return compose(["protocol=official", f"env={env}", "slm=tiny", *overrides])


def levels(released, env: str) -> list[str]:
    """The prompt styles the released code has for `env` (its --prompt-style choices)."""
    if env == "higherlower":
        return ["basic", "enriched", "stateful"]
    mod = released.eval_ppo_slm if env == "fourrooms" else released.door_key_eval
    if env == "doorkey8":
        return list(mod._PROMPT_STYLES)
    return ["basic", "enriched", "stateful_min", "stateful"]


class Pair:
    """One seed played by our episode and the released env with the same actions, with our prompt
    sessions and the released episode state (updated on every step, as its eval loops do)."""

    def __init__(self, released, env: str, seed: int, task, variants: dict):
        self.env, self.r, self.task = env, released, task
        self.ours = task.episode(seed)
        self.sessions = {k: v.session(self.ours, False) for k, v in variants.items()}
        if env == "fourrooms":
            self.theirs = released.ask_envs_fourrooms.FourRoomsEnv(max_steps=500)
            self.state = released.eval_ppo_slm.new_episode_state()
        elif env == "doorkey8":
            self.theirs = released.door_key_env.DoorKeyEnv(size=8)
            self.state = released.door_key_eval.new_episode_state()
        else:
            self.theirs = released.higher_lower_env.HigherLowerEnv()
            self.state = None
        self.obs, _ = self.theirs.reset(seed=seed)
        self._update(None)

    def _update(self, action):
        if self.env == "fourrooms":
            self.r.eval_ppo_slm.update_episode_state(self.state, self.theirs, action)
        elif self.env == "doorkey8":
            self.r.door_key_eval.update_episode_state(self.state, self.theirs, action)

    def their_obs(self) -> np.ndarray:
        """What their network is fed (HigherLower: the rank as a float, one-hot inside SB3)."""
        if self.env == "higherlower":
            return np.array([self.obs], dtype=np.float32)
        return self.obs

    def their_prompt(self, level: str, rationale: bool, ppo: int | None) -> str:
        if self.env == "higherlower":
            return self.theirs.build_prompt(ppo, prompt_style=level, rationale=rationale)
        mod = self.r.eval_ppo_slm if self.env == "fourrooms" else self.r.door_key_eval
        state = self.state if (self.env == "doorkey8" or level.startswith("stateful")) else None
        return mod.build_prompt(self.theirs, state, ppo, prompt_style=level, rationale=rationale)

    def step(self, action: int) -> bool:
        self.ours.step(action)
        self.obs, _, term, trunc, _ = self.theirs.step(action)
        self._update(action)
        assert self.ours.done == bool(term or trunc)
        return self.ours.done


def variants_for(released, env: str) -> tuple[dict, object]:
    """Our official prompt variant of every (level, rationale), built from the composed config
    as a job builds it, and the task."""
    out, task = {}, None
    for level in levels(released, env):
        for rationale in (False, True):
            cfg = official_cfg(env, f"prompt={level}", f"prompt.rationale={str(rationale).lower()}")
            task = make_task(cfg.env)
            variant = instantiate(cfg.prompt)
            variant.check(task)
            out[(level, rationale)] = variant
    return out, task


def their_parse(released, env: str, text: str, rationale: bool):
    mod = {
        "fourrooms": released.eval_ppo_slm,
        "doorkey8": released.door_key_eval,
        "higherlower": released.higher_lower_eval,
    }[env]
    return mod.parse_action(text, rationale=rationale)


def their_decoding(released, env: str, rationale: bool) -> dict:
    mod = {
        "fourrooms": released.eval_ppo_slm,
        "doorkey8": released.door_key_eval,
        "higherlower": released.higher_lower_eval,
    }[env]
    return mod.decoding_for(rationale)


def consult(session, ppo: int | None, text: str | None = None):
    """One consultation of our session: its query, and the decision for answer `text`."""
    gen = session.consult(ppo)
    (query,) = next(gen)
    if text is None:
        gen.close()
        return query, None
    try:
        gen.send([Answer(text)])
    except StopIteration as stop:
        return query, stop.value
    raise AssertionError("the session asked a second round")


# text only some states show: each must appear in the compared prompts (the states cover them)
COVERAGE = {
    "fourrooms": (
        "Goal cached at world",
        "Goal not yet seen",
        "Planner hint (known cells)",
        "LOOP_HINT: Many consecutive turns",
        "visible (",
        "FORWARD    → blocked",
    ),
    "doorkey8": (
        "Has key: YES",
        "Door: OPEN",
        "Door: LOCKED",
        "Planner hint (known cells, current subtask)",
        "would pick up the KEY",
        "would UNLOCK the door",
        "Goal cached at",
        "LOOP_HINT",
    ),
    "higherlower": (
        "Win streak: 2",
        "Loss streak: 1",
        "→ PUSH",
        "Recommended action from counts: EITHER",
    ),
}


def play_action(pair: Pair, rng: np.random.Generator) -> int:
    """Mostly the expert's action (so goals are seen, keys picked up, doors opened), else a
    random one (turns in place, loops); HigherLower: random."""
    n = len(pair.task.action_names)
    if pair.env != "higherlower" and rng.random() < 0.6:
        return pair.ours.expert_action()
    return int(rng.integers(n))


@pytest.mark.parametrize("env", ENVS)
def test_prompts_and_parsing_match(released, env):
    """(1) the prompt string of every level, rationale or not, with and without the autopilot,
    and the decoding limits; (2) the action parsed from the same answers, the SLM-only fallback."""
    variants, task = variants_for(released, env)
    rng = np.random.default_rng(0)
    states, mismatches, seed = 0, [], 100
    steps_per_seed = {"fourrooms": 40, "doorkey8": 40, "higherlower": 51}[env]
    shown = []
    n_actions = None
    while states < 4 * MIN_STATES:
        pair = Pair(released, env, seed, task, variants)
        n_actions = len(pair.task.action_names)
        for _ in range(steps_per_seed):
            ppo = int(rng.integers(n_actions))
            for level, rationale in variants:
                session = pair.sessions[(level, rationale)]
                for autopilot in (None, ppo):
                    query, _ = consult(session, autopilot)
                    want = pair.their_prompt(level, rationale, autopilot)
                    shown.append(want)
                    got = query.messages
                    if got != [{"role": "user", "content": want}]:
                        mismatches.append((seed, pair.ours.steps, level, rationale, autopilot))
                        if len(mismatches) == 1:
                            have = got[-1]["content"] if got else ""
                            assert have == want, f"first mismatch {mismatches[0]}"
            states += 1
            if pair.step(play_action(pair, rng)):
                break
        seed += 1
    print(f"\n{env}: {states} states compared")
    assert not mismatches, f"{len(mismatches)} prompt mismatches, first {mismatches[:3]}"
    assert states >= MIN_STATES
    text = "\n".join(shown)
    assert not [c for c in COVERAGE[env] if c not in text], "states too alike: add steps or seeds"

    # (2) parsing, decoding limits, the SLM-only fallback
    pair = Pair(released, env, 100, task, variants)
    for level, rationale in variants:
        session = pair.sessions[(level, rationale)]
        query, _ = consult(session, None)
        want = their_decoding(released, env, rationale)
        assert query.decoding.max_new_tokens == want["max_tokens"], (level, rationale)
        assert not query.decoding.enable_thinking  # thinking=False in their load_slm
        assert query.decoding.repetition_penalty == 1.1  # their generate()'s default
        for text in ANSWERS[env]:
            for ppo in (None, 0):
                _, decision = consult(session, ppo, text)
                theirs = their_parse(released, env, text, rationale)
                assert decision.action == theirs, (text, level, rationale)
                if theirs is None and ppo is None:  # SLM-only: their loops' fallback
                    assert decision.fallback == (0 if env == "higherlower" else 2), text


def their_model(released, env: str, task, ours_policy):
    """The released PPO with its DropoutActorCriticPolicy and net_arch on its env."""
    from stable_baselines3 import PPO

    if env == "fourrooms":
        cfg = OmegaConf.load(released.src / "configs" / "rl" / "ppo.yaml")
        net_arch = OmegaConf.to_container(cfg.policy.net_arch)
        rate = float(cfg.policy.dropout_rate)
        gym_env = released.ask_envs_fourrooms.FourRoomsEnv(max_steps=500)
    else:
        folder = "door_key" if env == "doorkey8" else "higher_lower"
        text = (released.src / folder / "train.py").read_text()
        kwargs = re.search(
            r'policy_kwargs=\{"net_arch": \[(\d+), (\d+)\], "dropout_rate": ([\d.]+)', text
        )
        net_arch, rate = [int(kwargs[1]), int(kwargs[2])], float(kwargs[3])
        gym_env = (
            released.door_key_env.DoorKeyEnv(size=8)
            if env == "doorkey8"
            else released.higher_lower_env.HigherLowerEnv()
        )
    model = PPO(
        released.ask_utils_ppo.DropoutActorCriticPolicy,
        gym_env,
        policy_kwargs={"net_arch": net_arch, "dropout_rate": rate},
        device="cpu",
        seed=0,
    )
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # spread the weights so the distributions are far from uniform
        for p in model.policy.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.6)
    ours_policy.load_state_dict(model.policy.state_dict())  # strict: same modules, same shapes
    return model, rate


def our_policy(cfg, task):
    from benchmark.policy.train import as_dict, build_model

    policy_cfg = as_dict(cfg.policy)
    policy_cfg["n_envs"] = 1
    return build_model(task, policy_cfg).policy


def their_env(released, env: str):
    if env == "fourrooms":
        return released.ask_envs_fourrooms.FourRoomsEnv(max_steps=500)
    if env == "doorkey8":
        return released.door_key_env.DoorKeyEnv(size=8)
    return released.higher_lower_env.HigherLowerEnv()


def their_entropy(released, model, obs, masks) -> float:
    """Their compute_mc_uncertainties, each of its N passes with the pass's mask at each dropout
    layer (forward hooks: what nn.Dropout's output would be with that mask)."""
    drops = [m for m in model.policy.mlp_extractor.policy_net if isinstance(m, torch.nn.Dropout)]
    calls = [0] * len(drops)

    def hook(k):
        def apply(_module, inp, _out):
            i = calls[k]
            calls[k] += 1
            return inp[0] * masks[k][i]

        return apply

    hooks = [d.register_forward_hook(hook(k)) for k, d in enumerate(drops)]
    try:
        total, _, _, _ = released.ask_uncertainty_entropy.compute_mc_uncertainties(
            model, obs, n_samples=MC_SAMPLES
        )
    finally:
        for h in hooks:
            h.remove()
    assert calls == [MC_SAMPLES] * len(drops)
    return float(total)


@pytest.mark.parametrize("env", ENVS)
def test_entropy_and_gate_match(released, env):
    """(3) the same weights in both networks and the same dropout masks: the observation fed to
    the network, the greedy action, the MC total entropy within 1e-6 and the gate decision."""
    cfg = official_cfg(env, "gate=entropy", "gate.tau=0.5")
    task = make_task(cfg.env)
    policy = our_policy(cfg, task)
    model, rate = their_model(released, env, task, policy)
    widths = [
        m.out_features for m in policy.mlp_extractor.policy_net if isinstance(m, torch.nn.Linear)
    ]
    assert int(cfg.gate.mc_samples) == released.eval_ppo_slm.N_MC_SAMPLES == MC_SAMPLES
    assert released.door_key_eval.N_MC_SAMPLES == released.higher_lower_eval.N_MC_SAMPLES
    gate = GateSettings.from_config(cfg.gate).build()
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(2)
    states, seed = 0, 100
    while states < MIN_STATES:
        ours, theirs = task.episode(seed), their_env(released, env)
        obs, _ = theirs.reset(seed=seed)
        for _ in range(15):
            fed = np.array([obs], dtype=np.float32) if env == "higherlower" else obs
            with torch.no_grad():  # what each network computes from its env's observation
                want = model.policy.extract_features(model.policy.obs_to_tensor(fed)[0])
                got = policy.extract_features(policy.obs_to_tensor(ours.obs[None])[0])
            assert torch.equal(got, want), (seed, ours.steps)
            masks = [
                (torch.rand((MC_SAMPLES, w), generator=gen) >= rate).float() / (1 - rate)
                for w in widths
            ]
            total = their_entropy(released, model, fed, masks)
            their_action = int(np.asarray(model.predict(fed, deterministic=True)[0]).flat[0])
            unc = mc_dropout(policy, ours.obs[None], MC_SAMPLES, masks=[m[None] for m in masks])
            assert int(unc.action[0]) == their_action, (seed, ours.steps)
            assert abs(float(unc.total[0]) - total) < 1e-6, (seed, ours.steps)
            # their loops ask when total_unc >= threshold
            for tau in (0.05, 0.3, 0.8, 1.2, 1.6, float(unc.total[0])):
                if abs(total - tau) < 1e-5 and tau != float(unc.total[0]):
                    continue
                gate.tau = tau
                theirs_asks = total >= tau or tau == float(unc.total[0])
                assert bool(gate.mask(unc, [seed], [ours.steps])[0]) == theirs_asks, (tau, total)
            states += 1
            action = int(rng.integers(len(task.action_names)))
            ours.step(action)
            obs, _, term, trunc, _ = theirs.step(action)
            assert ours.done == bool(term or trunc)
            if ours.done:
                break
        seed += 1
    print(f"\n{env}: {states} states compared (observation, action, entropy, gate)")


class _Stop(Exception):
    pass


class _Trial:
    """Records what the released objective asks Optuna for, then stops it."""

    def suggest_float(self, name, low, high, **kw):
        self.space = (name, low, high)
        raise _Stop


@pytest.mark.parametrize("env", ENVS)
def test_tau_search_space_and_trials_match(released, env, monkeypatch):
    """(4) the tau range of the released objective and its default trial count."""
    trial = _Trial()
    mod = {
        "fourrooms": released.eval_ppo_slm,
        "doorkey8": released.door_key_eval,
        "higherlower": released.higher_lower_eval,
    }[env]
    args = (None, None, 8, 100, 30) if env == "doorkey8" else (None, None, 100, 30)
    kwargs = {"prompt_style": "basic", "prompt_rationale": False, "prompt_history": 8}
    if env != "higherlower":
        kwargs["prompt_map_radius"] = 5
    with pytest.raises(_Stop):
        mod.objective(trial, *args, **kwargs)
    monkeypatch.setattr(sys, "argv", ["eval"])
    n_trials = mod.parse_args().n_optuna_trials
    cfg = official_cfg(env, "gate=entropy", "gate.tau=auto")
    low, high = (float(v) for v in cfg.gate.tau_range)
    assert not cfg.tuning.clip_tau  # searched as written
    assert (low, high) == (trial.space[1], trial.space[2])
    assert int(cfg.tuning.n_trials) == n_trials


@pytest.mark.parametrize("slm", ["qwen3.5-2b", "qwen3.5-4b", "qwen2.5-1.5b"])
def test_consultant_settings_match(released, slm):
    """The model each SLM tag names, the dtype its slm_cfg_for loads it in, greedy decoding and
    their generate()'s repetition penalty (1.1 where no config sets one)."""
    tag = {"qwen2.5-1.5b": "1.5b"}.get(slm, slm)
    for mod in (released.eval_ppo_slm, released.door_key_eval, released.higher_lower_eval):
        cfg = official_cfg("fourrooms", f"slm={slm}")
        model = mod.QWEN_MODELS[tag]
        theirs = mod.slm_cfg_for(model)
        assert cfg.slm.backend.model == model
        assert cfg.slm.backend.dtype == theirs["dtype"]
        assert cfg.slm.decoding.temperature == 0  # generate(do_sample=False)
        assert "repetition_penalty" not in theirs and cfg.slm.decoding.repetition_penalty == 1.1


class Scripted:
    """The answer texts of both loops' consultant, in call order: the SLM is not what is compared
    here, the loop around it is (parsing, the fallback, the env steps)."""

    def __init__(self, texts: list[str]):
        self.texts, self.calls = texts, 0

    def next(self) -> str:
        text = self.texts[self.calls % len(self.texts)]
        self.calls += 1
        return text


class OurScripted(Consultant):
    def __init__(self, texts: list[str]):
        self.script = Scripted(texts)

    def identity(self) -> str:
        return "scripted"

    def answer(self, queries):
        return [Answer(self.script.next()) for _ in queries]


def _record_their_env(released, env: str, taken: list, monkeypatch):
    """Their eval module for `env`, its env class swapped for one that appends every action
    taken to `taken`."""
    mod, env_cls, name = {
        "fourrooms": (
            released.eval_ppo_slm,
            released.ask_envs_fourrooms.FourRoomsEnv,
            "FourRoomsEnv",
        ),
        "doorkey8": (released.door_key_eval, released.door_key_env.DoorKeyEnv, "DoorKeyEnv"),
        "higherlower": (
            released.higher_lower_eval,
            released.higher_lower_env.HigherLowerEnv,
            "HigherLowerEnv",
        ),
    }[env]

    class Recording(env_cls):
        def step(self, action):
            taken.append(int(action))
            return super().step(action)

    monkeypatch.setattr(mod, name, Recording)
    return mod


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("rationale", [False, True])
def test_slm_only_loop_matches(released, env, rationale, monkeypatch):
    """SLM-only, one test episode, both loops answered by the same script of valid and invalid
    texts: the same actions, reward, length and invalid count (their eval_slm_only runs with
    its SLM and env classes swapped for the script and a recording env)."""
    texts = ANSWERS[env]
    theirs_script, taken = Scripted(texts), []
    mod = _record_their_env(released, env, taken, monkeypatch)

    def load_slm(_cfg):
        return SimpleNamespace(
            generate=lambda prompt, decoding: SimpleNamespace(text=theirs_script.next())
        )

    monkeypatch.setattr(mod, "load_slm", load_slm)
    slm_cfg = {"provider": "hf", "model": "scripted"}
    style = {"prompt_style": "stateful", "prompt_rationale": rationale}
    args = (slm_cfg, 8, 1, 100) if env == "doorkey8" else (slm_cfg, 1, 100)
    _, (log,) = mod.eval_slm_only(*args, **style)

    cfg = official_cfg(env, "method=slm_only", "prompt=stateful", f"prompt.rationale={rationale}")
    task = make_task(cfg.env)
    ours_taken = []
    evaluator = Evaluator(
        task=task,
        gate=GateSettings.from_config(cfg.gate).build(),
        consultant=OurScripted(texts),
        prompt=instantiate(cfg.prompt),
    )
    (row,) = evaluator.run([100], mode="sequential", on_step=lambda e: ours_taken.append(e.action))
    assert ours_taken == taken
    assert row["length"] == len(taken) and row["reward"] == pytest.approx(log["reward"])
    assert row["invalid"] / row["queries"] == pytest.approx(log["invalid_action_rate"])
    print(f"\n{env}: {len(taken)} SLM-only steps compared")


@pytest.mark.parametrize("env", ENVS)
def test_ask_loop_matches(released, env, monkeypatch):
    """ASK+, one test episode in both loops: the same PPO weights, the same dropout masks (ours
    drawn by the evaluator's mask stream, replayed into their dropout layers), the same scripted
    answers at the gated steps: the same actions, queries, overwrites and reward."""
    from benchmark.evaluate import MaskStream

    tau = {"fourrooms": 0.9, "doorkey8": 1.8, "higherlower": 0.9}[env]  # both ask and skip
    cfg = official_cfg(env, "method=ask_plus", f"gate.tau={tau}")
    task = make_task(cfg.env)
    policy = our_policy(cfg, task)
    model, _ = their_model(released, env, task, policy)
    stream, current, calls = MaskStream(100), {}, [0]

    def hook(k):
        def apply(module, inp, _out):
            if not module.training:  # predict(): dropout off, as nn.Dropout in eval mode
                return None
            if k == 0 and calls[0] % MC_SAMPLES == 0:  # a new step: its masks
                current["masks"] = stream.next(policy, MC_SAMPLES)
            i = calls[0] % MC_SAMPLES
            if k == len(drops) - 1:
                calls[0] += 1
            return inp[0] * current["masks"][k][0, i]

        return apply

    drops = [m for m in model.policy.mlp_extractor.policy_net if isinstance(m, torch.nn.Dropout)]
    for k, d in enumerate(drops):
        d.register_forward_hook(hook(k))
    texts, taken = ANSWERS[env], []
    script = Scripted(texts)
    mod = _record_their_env(released, env, taken, monkeypatch)
    slm = SimpleNamespace(generate=lambda prompt, decoding: SimpleNamespace(text=script.next()))
    style = {"prompt_style": "stateful", "prompt_rationale": True}
    n = (1, 100, MC_SAMPLES)
    args = (model, slm, 8, tau, *n) if env == "doorkey8" else (model, slm, tau, *n)
    _, (log,) = mod.eval_ask(*args, **style)

    ours_taken = []
    evaluator = Evaluator(
        task=task,
        gate=GateSettings.from_config(cfg.gate).build(),
        policy=policy,
        consultant=OurScripted(texts),
        prompt=instantiate(cfg.prompt),
        mc_samples=MC_SAMPLES,
    )
    (row,) = evaluator.run([100], mode="sequential", on_step=lambda e: ours_taken.append(e.action))
    assert ours_taken == taken
    assert 0 < row["queries"] < row["length"]  # the gate both asked and let PPO act
    assert row["queries"] / row["length"] == pytest.approx(log["IR"])
    assert row["overwrites"] / row["length"] == pytest.approx(log["OR"])
    assert row["reward"] == pytest.approx(log["reward"])
    print(f"\n{env}: {len(taken)} ASK steps compared, {row['queries']} queries")


@pytest.mark.parametrize("env", ENVS)
def test_generation_matches(released, env, tmp_path, monkeypatch):
    """The same prompts answered by the released HuggingFaceSLM and by the suite's hf backend,
    both loading the suite's tiny Qwen3-architecture model from its local folder (float32 on
    CPU; their torch.compile left out): chat template, thinking off, greedy decoding with the
    repetition penalty, answer length, decoding of the answer: the texts must be identical."""
    from benchmark.consultants import make_consultant

    cfg = official_cfg(
        env, "method=slm_only", "prompt=stateful", "slm.cache=false", f"paths.root={tmp_path}"
    )
    consultant = make_consultant(cfg.slm, cfg.paths)
    model_dir = str(cfg.slm.backend.path)
    assert "qwen3" in Path(model_dir).name  # their _is_qwen3x: thinking off through the template
    monkeypatch.setattr(torch, "compile", lambda model, **kw: model)
    from ask.slm.model import HuggingFaceSLM

    theirs = HuggingFaceSLM(model_dir, device="cpu", dtype="float32", thinking=False)
    variants, task = variants_for(released, env)
    pair = Pair(released, env, 100, task, variants)
    compared = 0
    for step in range(6):
        for (level, rationale), session in pair.sessions.items():
            query, _ = consult(session, step % len(task.action_names))
            want = theirs.generate(
                pair.their_prompt(level, rationale, step % len(task.action_names)),
                their_decoding(released, env, rationale),
            ).text
            assert consultant.answer([query])[0].text == want, (level, rationale, step)
            compared += 1
        pair.step(play_action(pair, np.random.default_rng(step)))
    print(f"\n{env}: {compared} answers compared")
