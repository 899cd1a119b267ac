"""Context length per step: the policy on raw history (prompt=history) against the belief
pipeline (prompt=brace: belief update, then the act round on the belief), the same models
playing the same seeds through the Evaluator (benchmark.brace.rollout), sampling at the RL
temperature. A step's context is the longest prompt of its rounds, in the model's tokens; each
step's mean is over the episodes still running at that step, and their count is reported beside
it (an average over survivors alone would hide that the easy episodes have ended).

    python -m benchmark.brace.context --env tw_quest --belief <dir> --policy <dir> \\
        --steps 100 --seeds 200 201 --train-games 4 [--games paper]"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np


def per_step(logs: Sequence[Any]) -> dict[int, float]:
    """Step -> mean over episodes of the longest prompt (tokens) of that step's rounds."""
    by_step: dict[int, list[int]] = defaultdict(list)
    for s in logs:
        sizes = [len(t.extra["prompt_ids"]) for t in s.turns if t.extra.get("prompt_ids")]
        if sizes:
            by_step[s.step].append(max(sizes))
    return {k: float(np.mean(v)) for k, v in sorted(by_step.items())}


def running(logs: Sequence[Any]) -> dict[int, int]:
    """Step -> the number of episodes still running at that step (those that logged it)."""
    seeds: dict[int, set] = defaultdict(set)
    for s in logs:
        seeds[s.step].add(s.seed)
    return {k: len(v) for k, v in sorted(seeds.items())}


def with_games(env: str, protocol: str) -> Any:
    """The env config `env` with the evaluation games and command slots of `protocol`'s
    Agent-BRACE games (conf/protocol/<protocol>.yaml brace_tw_*: paper, the released hard
    evaluation mixtures); the env's own games for `suite`."""
    from omegaconf import OmegaConf

    from benchmark.config import option_file
    from benchmark.envs import load_env_cfg

    cfg = load_env_cfg(env)
    if protocol == "suite":
        return cfg
    games = OmegaConf.load(option_file("protocol", protocol))
    known = games.get("brace_tw_evaluation_generation") or {}
    if env not in known:
        raise SystemExit(f"--games {protocol}: protocol {protocol} has no Agent-BRACE games for "
                         f"{env} (it has: {', '.join(known) or 'none'})")  # fmt: skip
    cfg.task.evaluation_generation = known[env]
    cfg.task.max_commands = games.brace_tw_max_commands[env]
    return cfg


def history_prompt() -> Any:
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from benchmark.config import option_file

    cfg = OmegaConf.load(option_file("prompt", "history"))
    cfg.planner_hint = "frontier"  # the job's protocol default, outside a composed job
    return instantiate(cfg, sampling=None)


def measure(task: Any, models: dict[str, Any], seeds: Sequence[int], temperature: float = 1.0
            ) -> dict[str, dict[str, dict[int, float]]]:  # fmt: skip
    """Context per step of both pipelines on `seeds` (models: role -> (model, tokenizer)) and
    the episodes still running at each step."""
    from benchmark.brace import rollout
    from benchmark.brace.joint import Sampler
    from benchmark.brace.train import brace_prompt

    sampler = Sampler(models, temperature)
    out = {}
    for name, prompt in (("belief", brace_prompt()), ("raw_history", history_prompt())):
        _, logs = rollout.run(task, prompt, sampler, list(seeds))
        out[name] = {"tokens": per_step(logs), "running": running(logs)}
    return out


def summary(curve: dict[int, float], alive: dict[int, int] | None = None) -> dict[str, float]:
    """First, last, largest and mean context of a curve; with `alive` (running()), how many
    episodes the first and last steps average over."""
    steps = sorted(curve)
    if not steps:
        return {"steps": 0}
    out = {"steps": len(steps), "first": round(curve[steps[0]], 1),
           "last": round(curve[steps[-1]], 1), "max": round(max(curve.values()), 1),
           "mean": round(float(np.mean(list(curve.values()))), 1)}  # fmt: skip
    if alive is not None:
        out |= {"running_first": alive.get(steps[0], 0), "running_last": alive.get(steps[-1], 0)}
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from benchmark.brace.train import task_for
    from benchmark.finetune import lm
    from benchmark.protocol import PROTOCOLS

    ap = argparse.ArgumentParser(
        prog="python -m benchmark.brace.context", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--env", default="tw_quest")
    ap.add_argument("--belief", required=True, help="the belief model's folder")
    ap.add_argument("--policy", required=True, help="the policy model's folder")
    ap.add_argument("--steps", type=int, default=100, help="episode length (the env's cap)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[200, 201])
    ap.add_argument("--train-games", type=int, default=0)
    ap.add_argument("--games", default="suite", choices=PROTOCOLS,
                    help="the games of validation and test seeds (0-199; training seeds play "
                    "the training games): the env's own (suite) or the protocol's Agent-BRACE "
                    "games (paper: the released hard evaluation mixtures)")  # fmt: skip
    ap.add_argument("--out", default=None, help="write the curves here (json)")
    a = ap.parse_args(argv)
    if a.steps < 1:
        raise SystemExit(f"--steps {a.steps}: must be >= 1")
    task = task_for(with_games(a.env, a.games), a.steps, a.train_games)
    models = {"belief": lm.load(a.belief), "policy": lm.load(a.policy)}
    curves = measure(task, models, a.seeds)
    result = {
        "curves": curves,
        "summary": {k: summary(v["tokens"], v["running"]) for k, v in curves.items()},
    }
    print(json.dumps(result["summary"]), flush=True)
    if a.out:
        from pathlib import Path

        from benchmark.store import write_text_atomic

        write_text_atomic(Path(a.out), json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
