"""Agent-BRACE's training pipeline (issue 29), on TRAINING seeds only:

1. teacher trajectories: the ground-truth teacher plays training seeds through the Evaluator
   (prompt=brace: the update answered with the teacher's belief, the act round with the expert);
2. SFT: the belief model on the updates, the policy model on the actions, both from the same
   base (benchmark.finetune.train.fine_tune, the suite's Trainer code);
3. joint RL (benchmark.brace.joint): GRPO of both models on their own rollouts, the policy on
   R_env, the belief model on R_belief; mode `slm` (every step) or `ask` (the entropy gate's
   states, PPO acting elsewhere);
4. measurement with 95% bootstrap CIs: held-out (validation-seed, teacher-forced) belief updates
   (format compliance, correctness, R_belief) of the SFT and SFT+RL models, the training
   reward (R_env per episode, R_belief per update, greedy, on a fixed set of training seeds)
   and the held-out rollouts (the same, on the validation seeds, each model on its own
   beliefs), before and after RL, RL's gains paired.

    python -m benchmark.brace.train --env empty5x5_random --out outputs/models/brace/e5

writes <out>/{sft,rl-always,rl-entropy}/{belief,policy} (plain model dirs: slm=brace_trained
serves them; SFT and RL models already there are reused and measured again) and
<out>/brace_train.json (an earlier one kept as brace_train.<its UTC time>.json), with the RL
training curves in <out>/rl-<gate>.png (benchmark.brace.curves)."""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.brace import curves, joint, rollout
from benchmark.brace.rl import train_rl
from benchmark.seeds import Splits
from benchmark.store import Store

# training-reward fields averaged per seed over its updates (name -> joint.samples' raw key)
PER_SEED = {"r_belief": "belief", "format": "gate", "correctness": "correctness"}
# where the RL models of each mode go: named by the gate a cell of that mode runs (the preset's
# method brace_sft_rl reads <paths.models>/brace/<env>/rl-<gate>/{belief,policy})
RL_DIR = {"slm": "rl-always", "ask": "rl-entropy"}


# the arguments that shape each stage's models: a model made with other values is never reused
SFT_ARGS = ("env", "base", "root", "teacher_episodes", "sft_examples", "sft_epochs", "sft_batch",
            "sft_lr", "sft_roles", "seed", "train_games")  # fmt: skip
RL_ARGS = ("mode", "tau", "override", "rl_iterations", "rl_seeds", "rl_group", "rl_lr",
           "rl_max_steps", "rl_belief_samples", "algorithm", "rl_policy_iterations",
           "frozen_belief", "train_games")  # fmt: skip
COMPLETE = "complete.json"  # a model folder's completion record, written last


def check_args(a: Any) -> None:
    """Every count and rate, before any work (a bad one used to fail after SFT, or inside
    torch)."""
    positive = ("teacher_episodes", "sft_examples", "sft_batch", "held_out_episodes",
                "rl_iterations", "rl_seeds", "rl_group", "reward_episodes", "threads")  # fmt: skip
    for name in positive:
        if getattr(a, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} {getattr(a, name)}: must be >= 1")
    for name in ("sft_epochs", "sft_lr", "rl_lr"):
        if not getattr(a, name) > 0:
            raise SystemExit(f"--{name.replace('_', '-')} {getattr(a, name)}: must be > 0")
    if a.rl_max_steps < 0:
        raise SystemExit(f"--rl-max-steps {a.rl_max_steps}: must be >= 0 (0: the env's length)")
    try:
        rl_settings(a)
    except ValueError as err:
        raise SystemExit(str(err)) from err
    if a.train_games < 0:
        raise SystemExit(f"--train-games {a.train_games}: must be >= 0 (0: the env's own pool)")
    roles = set(a.sft_roles.split(","))
    if not roles or not roles <= {"belief", "policy"}:
        raise SystemExit(f"--sft-roles {a.sft_roles!r}: allowed belief, policy or both")
    if a.mode == "ask":  # the job config its PPO and gate come from: composed and checked now
        from benchmark.build import prepare
        from benchmark.config import compose

        try:
            prepare(compose([f"env={a.env}", "gate=entropy", f"gate.tau={a.tau}", "slm=oracle",
                             "prompt=brace", "tracking=none", *a.override]))  # fmt: skip
        except Exception as err:  # noqa: BLE001 - Hydra's or validation's message, named
            raise SystemExit(f"--override {a.override}: {err}") from err


def rl_settings(a: Any) -> Any:
    """The RL stage's settings (benchmark.brace.rl.RLSettings), checked."""
    from benchmark.brace.rl import RLSettings

    return RLSettings(iterations=a.rl_iterations, policy_iterations=a.rl_policy_iterations,
                      seeds_per_step=a.rl_seeds, group=a.rl_group, learning_rate=a.rl_lr,
                      belief_samples=a.rl_belief_samples).check()  # fmt: skip


def stage_args(a: Any, names: Sequence[str]) -> dict[str, Any]:
    return {n: getattr(a, n) for n in names}


def model_complete(directory: Path) -> bool:
    """Whether a model folder is whole: its completion record lists every file with its
    SHA-256, and each one still has it (a folder a kill left half-saved has no record)."""
    from benchmark.store import cached_digest, read_json

    record = read_json(directory / COMPLETE)
    if not isinstance(record, dict) or not record.get("files"):
        return False
    digests = results_store(None).digests_dir()
    for name, sha in record["files"].items():
        path = directory / name
        if not path.is_file() or cached_digest(path, digests) != sha:
            return False
    return True


def check_reusable(directory: Path, args: dict[str, Any]) -> None:
    """Refuse, before any work, a complete model folder made with other arguments: it is kept
    (never overwritten) and never measured as if these arguments had made it."""
    from benchmark.store import read_json

    record = read_json(directory / COMPLETE) or {}
    made = record.get("trained_with")
    if made is not None and made != args and model_complete(directory):
        differ = sorted(k for k in set(made) | set(args) if made.get(k) != args.get(k))
        raise SystemExit(
            f"{directory} was trained with other arguments ({', '.join(differ)}: "
            f"{ {k: made.get(k) for k in differ} }); choose a new --out to train with these"
        )


def build_model(directory: Path, make: Any, args: dict[str, Any]) -> None:
    """Make a model folder once, whole: built in a private work folder, its completion record
    (every file's SHA-256 and the arguments) written last, then renamed into place
    (benchmark.store.build_once: a kill leaves no folder that looks complete)."""
    from benchmark.store import build_once, file_sha256, write_json_atomic

    def make_whole(work: Path) -> None:
        make(work)
        files = sorted(p for p in work.rglob("*") if p.is_file())
        record = {str(p.relative_to(work)): file_sha256(p) for p in files}
        write_json_atomic(work / COMPLETE, {"files": record, "trained_with": args})

    build_once(directory, make_whole, model_complete)


def task_for(env: str, max_steps: int | None = None, train_games: int = 0) -> Any:
    """The env's task, with its episodes capped at `max_steps` (RL rollouts; None: as is) and,
    for a TextWorld env, its training pool of `train_games` games (0: the env's own)."""
    from benchmark.envs import load_env_cfg, make_task

    cfg = load_env_cfg(env)
    if max_steps is not None:
        cfg.task.max_steps = int(max_steps)
    if train_games:
        if "train_games" not in cfg.task:
            raise SystemExit(f"--train-games {train_games}: env {env} has no training pool")
        cfg.task.train_games = int(train_games)
    return make_task(cfg)


def brace_prompt() -> Any:
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from benchmark.config import option_file

    return instantiate(OmegaConf.load(option_file("prompt", "brace")), sampling=None)


def held_out(model_dir: str | Path, states: Sequence[Any]) -> dict[str, Any]:
    """A belief model's greedy updates on teacher-forced held-out states: format compliance,
    correctness and R_belief, each with its CI over states."""
    from benchmark.brace.sft import rewards_at
    from benchmark.finetune.store import answer_all

    answers, seconds = answer_all(Path(model_dir), states)
    rewards = rewards_at([a.text for a in answers], states)
    return {
        "format": rollout.mean_ci([r.gate for r in rewards]),
        "correctness": rollout.mean_ci([r.correctness for r in rewards]),
        "r_belief": rollout.mean_ci([r.total for r in rewards]),
        "seconds": round(seconds, 1),
        "example": answers[0].text if answers else "",
        # per state, in the states' order: what the paired SFT vs RL comparison reads (`gains`)
        "per_state": {
            "correctness": [round(r.correctness, 4) for r in rewards],
            "r_belief": [round(r.total, 4) for r in rewards],
        },
    }


def training_reward(task: Any, prompt: Any, dirs: dict[str, Path], seeds: Sequence[int],
                    splits: Splits, gate: Any = None, policy: Any = None) -> dict[str, Any]:  # fmt: skip
    """The models' greedy rollouts on training seeds (refused otherwise): `rollout_reward`."""
    from benchmark.seeds import check_training_seeds

    check_training_seeds(seeds, splits)
    return rollout_reward(task, prompt, dirs, seeds, gate, policy)


def rollout_reward(task: Any, prompt: Any, dirs: dict[str, Path], seeds: Sequence[int],
                   gate: Any = None, policy: Any = None) -> dict[str, Any]:  # fmt: skip
    """The models' greedy rollouts on `seeds`, each update following the model's OWN previous
    belief (what RL trains on, unlike the teacher-forced `held_out`): R_env per episode,
    R_belief, format and correctness per update, with CIs, and per seed for pairing."""
    from benchmark.finetune import lm

    models = {role: lm.load(d) for role, d in dirs.items()}
    _, logs = rollout.run(task, prompt, joint.Sampler(models, 0.0), seeds, gate=gate, policy=policy)
    per_seed = [joint.samples({s: [[x for x in logs if x.seed == s]]})[1] for s in seeds]
    raw = {k: [v for r in per_seed for v in r[k]] for k in PER_SEED.values()}
    env = [next((x.success for x in logs if x.seed == s), 0.0) for s in seeds]
    return {"r_env": rollout.mean_ci(env), "r_belief": rollout.mean_ci(raw["belief"]),
            "format": rollout.mean_ci(raw["gate"]),
            "correctness": rollout.mean_ci(raw["correctness"]),
            # per seed, in `seeds` order (R_belief: the mean of its updates, None without one)
            "per_seed": {"r_env": env, **{key: [
                round(float(np.mean(r[raw_key])), 4) if r[raw_key] else None for r in per_seed]
                for key, raw_key in PER_SEED.items()}}}  # fmt: skip


def results_store(root: str | None) -> Store:
    """The results root the suite's jobs use (`--root` overrides paths.root)."""
    from benchmark.config import compose

    return Store.of(compose([f"paths.root={root}"] if root else []).paths)


def ask_setup(
    env: str, tau: float, root: str | None, overrides: Sequence[str] = ()
) -> tuple[Any, Any]:
    """The entropy gate at `tau` and the env's PPO policy (trained once, as a job does);
    `overrides`: more Hydra overrides of that job (e.g. the policy recipe)."""
    from benchmark.build import build
    from benchmark.config import compose

    cfg = compose([f"env={env}", "gate=entropy", f"gate.tau={tau}", "slm=oracle",
                   "prompt=brace", *([f"paths.root={root}"] if root else []), "tracking=none",
                   *overrides])  # fmt: skip
    evaluation = build(cfg)
    return evaluation.gate(), evaluation.policy


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from benchmark.consultants.tiny import build_tiny
    from benchmark.finetune.train import TrainSettings, fine_tune
    from benchmark.seeds import DEFAULT_SPLITS, TRAIN_SEED_MIN

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="empty5x5_random")
    ap.add_argument("--out", required=True)
    ap.add_argument("--base", default=None, help="base model dir (default: the tiny_small model)")
    ap.add_argument("--teacher-episodes", type=int, default=100)
    ap.add_argument("--sft-examples", type=int, default=128)
    ap.add_argument("--sft-epochs", type=float, default=10)
    ap.add_argument("--sft-batch", type=int, default=4)
    ap.add_argument("--sft-lr", type=float, default=3e-3)
    ap.add_argument("--held-out-episodes", type=int, default=10)
    ap.add_argument("--rl-iterations", type=int, default=4)
    ap.add_argument("--rl-seeds", type=int, default=4)
    ap.add_argument("--rl-group", type=int, default=4)
    ap.add_argument("--rl-lr", type=float, default=1e-4)
    ap.add_argument(
        "--rl-max-steps",
        type=int,
        default=12,
        help="RL and training-reward episodes capped at this many steps (0: the env's own "
        "length; HigherLower always plays its 51 decisions)",
    )
    ap.add_argument(
        "--rl-belief-samples",
        type=int,
        default=1,
        help="updates sampled per belief state, one GRPO group each (1: the group is every "
        "update of a seed's rollouts)",
    )
    ap.add_argument("--reward-episodes", type=int, default=16)
    ap.add_argument("--algorithm", choices=("ppo", "grpo"), default="ppo",
                    help="RL algorithm: ppo (the paper's: a GAE critic, policy then joint PPO) "
                    "or grpo (group-relative, no critic)")  # fmt: skip
    ap.add_argument("--rl-policy-iterations", type=int, default=2,
                    help="ppo: iterations of the policy alone before the joint ones")  # fmt: skip
    ap.add_argument("--frozen-belief", action="store_true",
                    help="the belief model frozen, the policy trained (the ablation)")  # fmt: skip
    ap.add_argument("--train-games", type=int, default=0,
                    help="TextWorld: games in the training pool (0: the env's own)")  # fmt: skip
    ap.add_argument("--mode", choices=("slm", "ask"), default="slm")
    ap.add_argument("--tau", type=float, default=0.5)
    ap.add_argument(
        "--root",
        default=None,
        help="results root (ask mode: its PPO cache; the tiny base model); default: the suite's "
        "(paths.root: BENCHMARK_ROOT, else ./outputs)",
    )
    ap.add_argument(
        "--override",
        action="append",
        default=[],
        help="ask mode: a Hydra override of the job whose PPO and gate it uses "
        "(repeatable, e.g. policy.total_timesteps=20000)",
    )
    ap.add_argument("--skip-rl", action="store_true", help="SFT and its measurement only")
    ap.add_argument("--measure-base", action="store_true", help="also the base on held-out states")
    ap.add_argument(
        "--sft-roles",
        default="belief",
        help="roles SFT trains (the paper: belief; the policy starts from the base)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (one is fastest on a small shared CPU)",
    )
    a = ap.parse_args(argv)
    check_args(a)  # every number, before any work
    import torch

    torch.set_num_threads(a.threads)

    task = task_for(a.env, None, a.train_games)  # an unknown env fails here, with its message
    try:  # before any work: a cap the env refuses fails here, not after SFT
        rl_task = task_for(a.env, a.rl_max_steps or None, a.train_games)
    except Exception as err:  # hydra wraps the task's ValueError
        raise SystemExit(f"--rl-max-steps {a.rl_max_steps}: {err.__cause__ or err}; "
                         "0 plays the env's own episode length") from err  # fmt: skip
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    splits = DEFAULT_SPLITS
    report: dict[str, Any] = {"args": vars(a)}
    prompt = brace_prompt()
    base = (
        Path(a.base)
        if a.base
        else build_tiny(results_store(a.root).models / "tiny-qwen3-small-s0", 0, "small")
    )
    train_seeds = list(range(TRAIN_SEED_MIN, TRAIN_SEED_MIN + a.teacher_episodes))
    t0 = time.perf_counter()
    _, hlogs = rollout.run(
        task, prompt, rollout.TeacherConsultant(), list(range(a.held_out_episodes))
    )
    held_states = rollout.belief_states(hlogs)  # validation seeds: measurement only
    sft = {r: out / "sft" / r for r in ("belief", "policy")}
    rl = {r: out / RL_DIR[a.mode] / r for r in ("belief", "policy")}
    sft_args, rl_args = stage_args(a, SFT_ARGS), stage_args(a, SFT_ARGS + RL_ARGS)
    for directory, args in [*((d, sft_args) for d in sft.values()), (rl["belief"].parent, rl_args)]:
        check_reusable(directory, args)  # before any work: never reuse other arguments' models
    sft_roles = set(a.sft_roles.split(","))
    todo = [r for r in sft if not model_complete(sft[r])]  # complete ones are reused
    # a reused model keeps what its training reported (the earlier brace_train.json's entry)
    earlier_file = out / "brace_train.json"
    earlier = json.loads(earlier_file.read_text()) if earlier_file.exists() else {}
    report["sft"] = {r: earlier.get("sft", {}).get(r, "reused") for r in sft if r not in todo}
    if any(r in sft_roles for r in todo):
        from benchmark.seeds import check_training_seeds

        check_training_seeds(train_seeds, splits)
        _, logs = rollout.run(task, prompt, rollout.TeacherConsultant(), train_seeds)
        examples = rollout.sft_examples(logs)
    settings = TrainSettings(epochs=a.sft_epochs, learning_rate=a.sft_lr, batch_size=a.sft_batch)
    for role in todo:
        if role not in sft_roles:  # no SFT stage (the paper's policy): the base itself
            build_model(sft[role], lambda work: shutil.copytree(base, work, dirs_exist_ok=True),
                        sft_args)  # fmt: skip
            continue
        if not examples[role]:
            raise SystemExit(f"no SFT examples for the {role} role: the teacher's "
                             f"{a.teacher_episodes} episodes gave none (raise --teacher-episodes)")  # fmt: skip
        ex = random.Random(a.seed).sample(examples[role], min(a.sft_examples, len(examples[role])))

        def make(work: Path, ex: list = ex, role: str = role) -> None:
            report["sft"][role] = fine_tune(base, ex, work, settings, seed=a.seed)

        build_model(sft[role], make, sft_args)
        print(role, "SFT", report["sft"][role], flush=True)
    report["held_out"] = {
        "base": held_out(base, held_states) if a.measure_base else None,
        "sft": held_out(sft["belief"], held_states),
    }
    print("held-out", json.dumps(report["held_out"], default=str), flush=True)
    if a.skip_rl:
        write_report(out, report)
        return report
    gate = policy = None
    if a.mode == "ask":
        gate, policy = ask_setup(a.env, a.tau, a.root, a.override)
    reward_seeds = list(range(TRAIN_SEED_MIN + 5000, TRAIN_SEED_MIN + 5000 + a.reward_episodes))
    report["train_reward"] = {
        "sft": training_reward(rl_task, prompt, sft, reward_seeds, splits, gate, policy)
    }
    print("train reward sft", report["train_reward"]["sft"], flush=True)
    rl_seeds = list(range(TRAIN_SEED_MIN + 1000, TRAIN_SEED_MIN + 1000 + 10 * a.rl_seeds))
    if model_complete(rl["belief"].parent):  # made ones are reused, as SFT's
        report["rl"] = {**(earlier.get("rl") or {}), "reused": True}
        print("rl: reusing", rl["belief"].parent, "(a new --out trains again)", flush=True)
    else:

        def make_rl(work: Path) -> None:
            report["rl"] = train_rl(
                a.algorithm, rl_task, prompt, sft, {r: work / r for r in rl},
                train_seeds=rl_seeds, splits=splits, settings=rl_settings(a),
                train_belief=not a.frozen_belief, gate=gate, policy=policy, seed=a.seed,
                log=lambda row: print("rl", row, flush=True),
            )  # fmt: skip

        build_model(rl["belief"].parent, make_rl, rl_args)
    report["train_reward"]["rl"] = training_reward(
        rl_task, prompt, rl, reward_seeds, splits, gate, policy
    )
    report["held_out"]["rl"] = held_out(rl["belief"], held_states)
    # held-out rollouts: validation seeds played by each model pair on its own beliefs
    held_seeds = list(range(a.held_out_episodes))
    report["held_out_rollouts"] = {
        name: rollout_reward(rl_task, prompt, dirs, held_seeds, gate, policy)
        for name, dirs in (("sft", sft), ("rl", rl))
    }
    report["seconds"] = round(time.perf_counter() - t0, 1)
    report["gains"] = gains(report)
    print("train reward rl", report["train_reward"]["rl"], flush=True)
    print("held-out rl", report["held_out"]["rl"], flush=True)
    print("held-out rollouts", json.dumps(report["held_out_rollouts"]), flush=True)
    print("RL - SFT (paired)", json.dumps(report["gains"]), flush=True)
    if not report["rl"].get("reused"):
        title = f"{a.env}, mode {a.mode}: sampled rollouts per RL iteration"
        curves.plot(report["rl"]["history"], out / f"{RL_DIR[a.mode]}.png", title=title)
    write_report(out, report)
    return report


def write_report(out: Path, report: dict[str, Any]) -> None:
    """<out>/brace_train.json; an earlier one is kept beside it, named by when it was written
    (a rerun that reuses the models measures them again, it never erases what was measured)."""
    from benchmark.store import write_text_atomic

    path = out / "brace_train.json"
    if path.exists():
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(path.stat().st_mtime))
        path.rename(out / f"brace_train.{stamp}.json")
    write_text_atomic(path, json.dumps(report, indent=1, default=str))


def gains(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    """RL's gains (SFT+RL minus SFT), paired: on the same held-out states (correctness,
    R_belief) and the same training seeds (R_env; R_belief, format and correctness averaged
    over a seed's updates, seeds where either model made no update left out), the same for the
    held-out rollouts (validation seeds on the models' own beliefs), each with its 95% bootstrap CI
    (benchmark.metrics.paired_difference): a CI above 0 is a gain."""
    from benchmark.metrics import paired_difference

    ho, tr = report["held_out"], report["train_reward"]
    out = {
        f"held_out_{k}": paired_difference(ho["rl"]["per_state"][k], ho["sft"]["per_state"][k])
        for k in ("correctness", "r_belief")
    }
    rollouts = {"train": tr, "held_out_rollout": report.get("held_out_rollouts")}
    for prefix, side in rollouts.items():
        for k in ("r_env", *PER_SEED) if side else ():
            if k not in side["rl"]["per_seed"]:  # a report written before the field existed
                continue
            pairs = [
                (a, b)
                for a, b in zip(side["rl"]["per_seed"][k], side["sft"]["per_seed"][k], strict=True)
                if a is not None and b is not None
            ]
            if pairs:
                diff = paired_difference(*zip(*pairs, strict=True))
                out[f"{prefix}_{k}"] = {**diff, "n": len(pairs)}
    return out


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
