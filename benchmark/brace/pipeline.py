"""Agent-BRACE's training pipeline, on TRAINING seeds only (the trainer job runs it,
benchmark.brace.train):

1. teacher trajectories: the ground-truth teacher plays training seeds through the Evaluator
   (prompt=brace: the update answered with the teacher's belief, the act round with the expert);
2. SFT of the roles `brace.sft_roles` from the same base (benchmark.finetune.train.fine_tune);
   a role without SFT starts from the base;
3. RL (benchmark.brace.rl.train_rl, `brace.algorithm`): ppo (policy PPO with a GAE critic, then
   joint PPO) or grpo; `brace.train_belief=false` freezes the belief model (the frozen-belief
   ablation); `brace.policy_input=history`: the policy alone on raw history (Direct-Action RL;
   `react`: on the ReAct prompt, ReAct-RL); `brace.policy_input=summary`: the belief model
   writes a free-text summary (prompt=mem1, the Summary-Belief ablation); `brace.reward`,
   `brace.labels` and `brace.belief_prompt`: the appendix ablations (R_belief's terms, the
   certainty scale, the belief prompt without its task-specific coverage);
4. measurement with 95% bootstrap CIs (benchmark.brace.measure), RL's gains paired: on a fixed
   set of training games (`brace.reward_episodes` training seeds) greedy R_env before and after
   RL, and the belief's R_belief on the teacher's states of those games; on held-out games
   and states the same comparisons, plus the belief's format pass.

Writes <out>/{sft,rl-always|rl-entropy}/<role> (plain model folders with completion records:
slm=brace_trained serves them), <out>/brace_train.json (the report, written last) and the RL
training curves <out>/rl-<gate>.png."""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.brace import curves, measure, rollout, shipped
from benchmark.brace.models import build_model, check_reusable, made_with, model_complete
from benchmark.store import Store

if TYPE_CHECKING:
    from benchmark.brace.checks import Settings

# where the RL models of each mode go: named by the gate a cell of that mode runs (the
# methods brace_agent / brace_frozen_belief / brace_direct_rl read <out>/rl-<gate>/<role>)
RL_DIR = {"slm": "rl-always", "ask": "rl-entropy"}
REPORT = "brace_train.json"
# brace.policy_input -> the conf/prompt option the models train on
PROMPT = {"belief": "brace", "summary": "mem1", "history": "history", "react": "react"}
# the trainer's own prompt class where the option's is not (the teacher as the oracle answer)
TEACHER_TARGET = {"summary": "benchmark.brace.prompt.BraceSummaryPrompt"}


def task_for(env: Any, max_steps: int | None = None, train_games: int = 0,
             root: str | Path | None = None) -> Any:  # fmt: skip
    """The env's task (a conf/env option's name or an env config), with its episodes capped at
    `max_steps` (RL rollouts; None: as is) and a TextWorld training pool of `train_games` games
    (0: the env's own); what it makes (TextWorld's games) under the results root `root` (None:
    the `paths.root` of the job config `env` is part of, else the default root)."""
    from omegaconf import OmegaConf

    from benchmark.envs import load_env_cfg, make_task, results_root_of

    root = root if root is not None else results_root_of(env)
    if isinstance(env, str):
        cfg = load_env_cfg(env)
    else:  # resolved first: a job's env node reads the protocol and its own name (brace_tw_*)
        resolvable = OmegaConf.is_config(env) and env._get_parent() is not None
        cfg = OmegaConf.create(OmegaConf.to_container(env, resolve=True) if resolvable else env)
    if max_steps is not None:
        cfg.task.max_steps = int(max_steps)
    if train_games:
        if "train_games" not in cfg.task:
            raise SystemExit(f"train_games={train_games}: env {cfg.name} has no training pool")
        cfg.task.train_games = int(train_games)
    return make_task(cfg, root)


def rl_seed_pool(env: dict[str, Any], rl: Any) -> list[int]:
    """The training seeds RL draws its batches from: an env with a training pool (TextWorld's
    `task.train_games`: training seeds fold onto that many games) gives one seed per game of
    the WHOLE pool (the paper: 1,000 training games); an env without one (every training seed
    a fresh level) gives a fresh seed for every episode the RL stage plays."""
    from benchmark.seeds import TRAIN_SEED_MIN

    pool = (env.get("task") or {}).get("train_games")
    if pool:
        return list(range(TRAIN_SEED_MIN, TRAIN_SEED_MIN + int(pool)))
    n = (rl.policy_iterations + rl.iterations) * rl.seeds_per_step
    return list(range(TRAIN_SEED_MIN + 1000, TRAIN_SEED_MIN + 1000 + max(n, rl.seeds_per_step)))


def prompt_of(policy_input: str = "belief", labels: str = "seven", belief_prompt: str = "task"
              ) -> Any:  # fmt: skip
    """The prompt the models train on: the brace belief prompt (on the certainty scale
    `labels`, with its coverage line unless `belief_prompt` is generic), the summary prompt
    with the teacher's summary as its oracle answer, or a raw-history one (history, react)."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from benchmark.config import option_file

    extra = {}
    if policy_input == "belief":
        extra = {"labels": labels, "coverage": belief_prompt != "generic"}
    cfg = OmegaConf.load(option_file("prompt", PROMPT[policy_input]))
    if policy_input in TEACHER_TARGET:
        cfg._target_ = TEACHER_TARGET[policy_input]
    return instantiate(cfg, sampling=None, **extra)


def brace_prompt(labels: str = "seven", belief_prompt: str = "task") -> Any:
    return prompt_of("belief", labels, belief_prompt)


def ask_job(s: Settings, overrides: Sequence[str]) -> list[str] | None:
    """Ask mode: the overrides of the job whose PPO and gate the RL rollouts use (the trainer's
    own, the entropy gate at brace.tau), validated now; slm mode: None."""
    if s.mode != "ask":
        return None
    from benchmark.build import prepare
    from benchmark.config import compose

    job = [o for o in overrides if not o.lstrip("+~").startswith(("brace.", "brace="))]
    job += ["gate=entropy", f"gate.tau={s.tau}", "slm=oracle", "prompt=brace", "tracking=none"]
    prepare(compose(job))  # a bad override or value fails here, before any work
    return job


def ask_setup(job: list[str]) -> tuple[Any, Any]:
    """The entropy gate and the env's PPO policy of the ask job (trained once, as a job does)."""
    from benchmark.build import build
    from benchmark.config import compose

    evaluation = build(compose(job))
    return evaluation.gate(), evaluation.policy


def finished(s: Settings, job: list[str] | None, digests: Path | None) -> dict[str, Any] | None:
    """The report of an earlier run with these settings whose models are all complete (the job
    is then done: nothing is trained or measured again); None otherwise."""
    from benchmark.store import read_json

    report = read_json(s.out / REPORT)
    if not isinstance(report, dict) or report.get("trained_with") != s.rl_identity(job):
        return None
    dirs = [s.out / "sft" / r for r in s.roles]
    if not s.skip_rl:
        dirs.append(s.out / RL_DIR[s.mode])
    return report if all(model_complete(d, digests) for d in dirs) else None


def check_models(s: Settings, job: list[str] | None, digests: Path | None) -> None:
    """Before any work: a complete model folder under brace.out made with other settings is
    refused (never reused, never overwritten)."""
    for role in s.roles:
        check_reusable(s.out / "sft" / role, s.sft_identity(), digests)
    check_reusable(s.out / RL_DIR[s.mode], s.rl_identity(job), digests)


def run(s: Settings, store: Store, job: list[str] | None = None, log: Any = print) -> dict:
    """The whole pipeline for the checked settings `s` (benchmark.brace.settings.check);
    `job`: ask mode's job overrides (`ask_job`)."""
    from benchmark.consultants.tiny import build_tiny
    from benchmark.finetune.train import TrainSettings, fine_tune
    from benchmark.seeds import DEFAULT_SPLITS, TRAIN_SEED_MIN, check_training_seeds

    digests = store.digests_dir()
    check_models(s, job, digests)
    import torch

    torch.set_num_threads(s.threads)
    # the checked settings' env is a plain dict: its games go under this job's results root
    task = task_for(s.env, root=store.root)
    rl_task = task_for(s.env, s.rl_max_steps or None, root=store.root)
    s.out.mkdir(parents=True, exist_ok=True)
    splits = DEFAULT_SPLITS
    report: dict[str, Any] = {"trained_with": s.rl_identity(job), "complete": False}
    prompt = prompt_of(s.policy_input, s.labels, s.belief_prompt)
    teacher_prompt = brace_prompt(s.labels, s.belief_prompt)
    weights = s.reward_weights()
    size = s.tiny_size
    if s.base == shipped.NAME:
        base = shipped.folder()
    else:
        base = (
            Path(s.base) if s.base else build_tiny(store.models / f"tiny-qwen3-{size}-s0", 0, size)
        )
    train_seeds = list(range(TRAIN_SEED_MIN, TRAIN_SEED_MIN + s.teacher_episodes))
    t0 = time.perf_counter()
    sft = {r: s.out / "sft" / r for r in s.roles}
    rl = {r: s.out / RL_DIR[s.mode] / r for r in s.roles}
    todo = [r for r in sft if not model_complete(sft[r], digests)]  # complete ones are reused
    earlier = _earlier(s.out)
    report["sft"] = {r: earlier.get("sft", {}).get(r, "reused") for r in sft if r not in todo}
    examples: dict[str, list] = {}
    if any(r in s.sft_roles for r in todo):
        check_training_seeds(train_seeds, splits)
        examples = rollout.teacher_examples(task, prompt, train_seeds, s.sft_random_trajectories)
        log(
            f"SFT examples: { ({r: len(v) for r, v in examples.items()}) } (gold + "
            f"{s.sft_random_trajectories} random trajectories per game for the belief)"
        )
    settings = TrainSettings(epochs=s.sft_epochs, learning_rate=s.sft_lr, batch_size=s.sft_batch)
    for role in todo:
        if role not in s.sft_roles:  # no SFT stage (the paper's policy): the base itself
            build_model(sft[role], lambda work: shutil.copytree(base, work, dirs_exist_ok=True),
                        s.sft_identity(), digests)  # fmt: skip
            continue
        if not examples.get(role):
            raise SystemExit(f"no SFT examples for the {role} role: the teacher's "
                             f"{s.teacher_episodes} episodes gave none (raise "
                             "brace.teacher_episodes)")  # fmt: skip
        ex = random.Random(s.seed).sample(examples[role], min(s.sft_examples, len(examples[role])))

        def make(work: Path, ex: list = ex, role: str = role) -> None:
            report["sft"][role] = fine_tune(base, ex, work, settings, seed=s.seed)

        if not build_model(sft[role], make, s.sft_identity(), digests):  # finished by another
            report["sft"][role] = _earlier(s.out).get("sft", {}).get(role, "reused")
        log(f"{role} SFT {report['sft'][role]}")
    held_states: list = []
    if s.policy_input == "belief":  # the belief model's held-out states (validation seeds)
        _, hlogs = rollout.run(task, teacher_prompt, rollout.TeacherConsultant(),
                               list(range(s.held_out_episodes)))  # fmt: skip
        held_states = rollout.belief_states(hlogs)
        report["held_out"] = {
            "base": measure.held_out(base, held_states, weights) if s.measure_base else None,
            "sft": measure.held_out(sft["belief"], held_states, weights),
        }
        log(f"held-out {json.dumps(report['held_out'], default=str)}")
    if s.skip_rl:
        return _finish(s, report, t0)
    gate = policy = None
    if job is not None:
        gate, policy = ask_setup(job)
    reward_seeds = list(range(TRAIN_SEED_MIN + 5000, TRAIN_SEED_MIN + 5000 + s.reward_episodes))
    report["train_reward"] = {"sft": measure.training_reward(
        rl_task, prompt, sft, reward_seeds, splits, gate, policy, weights)}  # fmt: skip
    log(f"train reward sft {report['train_reward']['sft']}")
    train_states: list = []
    if held_states:  # the belief's R_belief before and after RL, on the same training states
        train_states = measure.training_states(rl_task, teacher_prompt, reward_seeds, splits)
        report["train_states"] = {"sft": measure.held_out(sft["belief"], train_states, weights)}
    rl_seeds = rl_seed_pool(s.env, s.rl)
    if made_with(rl[s.roles[0]].parent, digests) is not None:  # made ones are reused, as SFT's
        report["rl"] = {**(earlier.get("rl") or {}), "reused": True}
        log(f"rl: reusing {rl[s.roles[0]].parent}")
    else:
        from benchmark.brace.rl import RLJob, train_rl

        def make_rl(work: Path) -> None:
            rl_job = RLJob(rl_task, prompt, sft, {r: work / r for r in rl}, train_seeds=rl_seeds,
                           splits=splits, gate=gate, policy=policy, seed=s.seed,
                           log=lambda row: log(f"rl {row}"), weights=weights)  # fmt: skip
            report["rl"] = train_rl(s.algorithm, rl_job, s.rl, train_belief=s.train_belief,
                                    raw_history=s.raw_history)  # fmt: skip

        if not build_model(rl[s.roles[0]].parent, make_rl, s.rl_identity(job), digests):
            # another job (a requeued copy beside this one) finished it while this one waited
            report["rl"] = {**(_earlier(s.out).get("rl") or {}), "reused": True}
            log(f"rl: reusing {rl[s.roles[0]].parent}, finished by another job")
    report["train_reward"]["rl"] = measure.training_reward(
        rl_task, prompt, rl, reward_seeds, splits, gate, policy, weights
    )
    if held_states:
        report["held_out"]["rl"] = measure.held_out(rl["belief"], held_states, weights)
        report["train_states"]["rl"] = measure.held_out(rl["belief"], train_states, weights)
    held_seeds = list(range(s.held_out_episodes))  # validation seeds, each pair on its own beliefs
    rows = [("sft", sft), ("rl", rl)]
    if s.measure_base:  # the untrained base in both roles, for scale
        rows.insert(0, ("base", dict.fromkeys(s.roles, base)))
    report["held_out_rollouts"] = {
        name: measure.rollout_reward(rl_task, prompt, dirs, held_seeds, gate, policy, weights)
        for name, dirs in rows
    }
    report["gains"] = measure.gains(report)
    log(f"RL - SFT (paired) {json.dumps(report['gains'])}")
    if not report["rl"].get("reused") and report["rl"].get("history"):
        title = f"{s.env['name']}, {s.name}, mode {s.mode}: sampled rollouts per RL iteration"
        curves.plot(report["rl"]["history"], s.out / f"{RL_DIR[s.mode]}.png", title=title)
    return _finish(s, report, t0)


def _earlier(out: Path) -> dict[str, Any]:
    from benchmark.store import read_json

    earlier = read_json(out / REPORT)
    return earlier if isinstance(earlier, dict) else {}


def _finish(s: Settings, report: dict[str, Any], t0: float) -> dict[str, Any]:
    report["seconds"] = round(time.perf_counter() - t0, 1)
    report["complete"] = True
    write_report(s.out, report)
    return report


def write_report(out: Path, report: dict[str, Any]) -> None:
    """<out>/brace_train.json, written atomically; an earlier one is kept beside it, named by
    when it was written (a rerun never erases what was measured)."""
    from benchmark.store import write_text_atomic

    path = out / REPORT
    if path.exists():
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(path.stat().st_mtime))
        path.rename(out / f"brace_train.{stamp}.json")
    write_text_atomic(path, json.dumps(report, indent=1, default=str))
