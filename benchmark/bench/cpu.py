"""CPU benchmark sections, each timing two ways of doing the same work side by side in this process:

gate        batched MC dropout vs the N-pass reference (and the evaluator's per-episode masks)
training    PPO steps/s: the default DummyVecEnv with 4 envs vs a single env
evaluation  ASK with the tiny model: lockstep vs sequential, identical per-episode results
ir1         ASK at IR 1 (every step asks), stateful prompt: the suite's default path (lockstep,
            batched, prefix reuse) and choice scoring vs the naive batch-1 loop (sequential, no
            prefix reuse) and the authors' loop (benchmark.bench.authors); the floor (one
            suffix's prefill) and the best ratio it allows
tuning      a tau study with and without the response cache (both from an empty cache)
threads     tiny-model generation with 1 torch thread vs the default thread count
memory      peak RSS, RSS during the lockstep evaluation, the response cache's cap and size

The policies are built here, untrained (gate) or short-trained by the training section itself
(evaluation, tuning): speed hardly depends on policy quality, and a 2M-step run does not fit."""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.bench.authors import AuthorsConsultant, n_pass_gate
from benchmark.bench.common import GIB, Check, RssSampler, compose, peak_rss_bytes, time_interleaved
from benchmark.consultants.cache_store import cache_cap
from benchmark.store import Store

SECTIONS = ("gate", "training", "evaluation", "ir1", "tuning", "threads", "memory")
TARGETS = {
    "gate": 5.0,
    "evaluation": 2.0,
    "ir1": 3.0,
    "tuning": 3.0,
    "training": 1.0,
    "memory_gib": 2.0,
}
IR1_PAPER_MAX_STEPS = 500  # the fourrooms step cap of the paper setting (issue 14: 4 x 500)


@dataclass(frozen=True)
class Sizes:
    """How much work each section does. FULL: `make bench` took about 8 minutes on 2 loaded cores
    with four IR-1 paths; the IR-1 section (now five paths x 4 episodes x 500 steps, and the
    interleaved per-query costs) is most of it."""

    gate_batch: int = 100
    gate_repeats: int = 25
    train_steps: int = 8192
    train_n_steps: int | None = None  # PPO n_steps override (None: SB3's 2048)
    train_repeats: int = 2
    eval_episodes: int = 100
    eval_max_steps: int = 20  # fourrooms step cap (500 in the paper setting)
    eval_repeats: int = 2
    target_ir: float = 0.3
    tune_trials: int = 15
    tune_episodes: int = 10
    thread_repeats: int = 3
    ir1_episodes: int = 4
    ir1_max_steps: int = IR1_PAPER_MAX_STEPS


FULL = Sizes()
QUICK = Sizes(
    gate_batch=100,
    gate_repeats=3,
    train_steps=1024,
    train_n_steps=256,
    train_repeats=1,
    eval_episodes=12,
    eval_max_steps=8,
    eval_repeats=1,
    tune_trials=3,
    tune_episodes=3,
    thread_repeats=1,
    ir1_episodes=2,
    ir1_max_steps=6,
)


class CpuBench:
    """Runs the sections in order; later sections reuse what earlier ones built (the
    short-trained fourrooms policy, the tiny model)."""

    def __init__(self, root: Path, work: Path, sizes: Sizes, default_threads: int) -> None:
        self.root, self.work, self.sizes = Path(root), Path(work), sizes
        self.default_threads = default_threads
        self.checks: list[Check] = []
        self.sections: dict[str, dict[str, Any]] = {}
        self.policy = None  # short-trained fourrooms policy (training section)
        self.eval_rss: int | None = None
        self.within: Any = lambda fraction, text: None  # progress inside the running section

    # -------------------------------------------------------------------------------- helpers
    def check(
        self,
        section: str,
        name: str,
        value: float,
        unit: str = "x",
        target: float | None = None,
        cmp: str = ">=",
    ) -> Check:
        c = Check(section, name, float(value), unit, target, cmp)
        self.checks.append(c)
        return c

    def cfg(self, *overrides: str) -> Any:
        return compose(self.root, *overrides)

    def run(
        self, sections: tuple[str, ...] = SECTIONS, expected_s: dict[str, float] | None = None
    ) -> dict[str, Any]:
        """`expected_s`: each section's seconds in an earlier run (the time-left estimate weighs
        sections by them; without them every section counts the same)."""
        from benchmark.progress import Progress

        for name in sections:
            if name not in SECTIONS:
                raise ValueError(f"unknown bench section {name!r}; allowed: {list(SECTIONS)}")
        todo = [n for n in SECTIONS if n in sections]  # fixed order: later ones use earlier ones'
        known = expected_s or {}
        timed = bool(todo) and all(known.get(n) for n in todo)
        weight = {n: max(1.0, float(known[n])) if timed else 1.0 for n in todo}
        unit = "s as last timed" if timed else "sections"
        done = 0.0
        with Progress("bench", round(sum(weight.values())), unit, interval_s=0.0) as progress:
            for k, name in enumerate(todo, 1):
                label = f"running {name} ({k}/{len(todo)})"
                progress.update(round(done), label)

                def within(fraction: float, text: str, start=done, share=weight[name], label=label):
                    # floor: the count reaches the section's end only when the section is done
                    done_now = math.floor(start + min(fraction, 1.0) * share)
                    progress.update(min(done_now, round(start + share) - 1), f"{label}: {text}")

                self.within = within  # a long section reports how far it is (a few lines)
                t0 = time.perf_counter()
                data = getattr(self, f"section_{name}")()
                data["seconds"] = time.perf_counter() - t0
                data["checks"] = [c.to_dict() for c in self.checks if c.section == name]
                self.sections[name] = data
                done += weight[name]
            progress.update(progress.total, "all sections done")
        return self.sections

    # -------------------------------------------------------------------------------- 1. gate
    def section_gate(self) -> dict[str, Any]:
        from benchmark.envs import make_task
        from benchmark.evaluate import MaskStream, episode_masks
        from benchmark.uncertainty import draw_masks, mc_dropout, mc_dropout_sequential

        cfg = self.cfg("env=fourrooms", "gate=entropy")
        task = make_task(cfg.env)
        pol = new_ppo(task, cfg.policy, n_envs=1).policy  # untrained, fourrooms-shaped
        n, b = int(cfg.gate.mc_samples), self.sizes.gate_batch
        obs = sample_observations(task, b, steps=5)
        gens = [MaskStream(s) for s in range(b)]  # the evaluator's per-episode mask streams
        one = obs[:1]
        timings = time_interleaved(
            {
                "batched": lambda: mc_dropout(pol, obs, n, torch.Generator().manual_seed(0)),
                "sequential": lambda: mc_dropout_sequential(
                    pol, obs, n, torch.Generator().manual_seed(0)
                ),
                "evaluator_path": lambda: mc_dropout(
                    pol, obs, n, masks=episode_masks(pol, gens, n)
                ),
                "masks_one_generator": lambda: draw_masks(
                    pol, b, n, torch.Generator().manual_seed(0)
                ),
                "masks_per_episode": lambda: episode_masks(pol, gens, n),
                "batched_b1": lambda: mc_dropout(pol, one, n, torch.Generator().manual_seed(0)),
                "sequential_b1": lambda: mc_dropout_sequential(
                    pol, one, n, torch.Generator().manual_seed(0)
                ),
            },
            repeats=self.sizes.gate_repeats,
        )
        us = {k: v["median_s"] * 1e6 / (1 if k.endswith("_b1") else b) for k, v in timings.items()}
        fast = mc_dropout(pol, obs, n, torch.Generator().manual_seed(0))
        ref = mc_dropout_sequential(pol, obs, n, torch.Generator().manual_seed(0))
        agree = {
            "max_abs_diff_total_bits": float(np.abs(fast.total - ref.total).max()),
            "actions_equal": bool((fast.action == ref.action).all()),
        }
        s = "gate"
        # the reference the target is set against: the official ASK+ code's way, one episode at
        # a time with N sequential dropout passes per decision
        self.check(
            s,
            f"evaluator path (B={b}, N={n}) vs per-episode N-pass loop",
            us["sequential_b1"] / us["evaluator_path"],
            target=TARGETS["gate"],
        )
        self.check(
            s, f"batched vs N-pass over the same B={b} rows", us["sequential"] / us["batched"]
        )
        self.check(
            s,
            "evaluator path (per-episode masks) vs N-pass",
            us["sequential"] / us["evaluator_path"],
        )
        self.check(s, "batched vs N-pass at B=1", us["sequential_b1"] / us["batched_b1"])
        self.check(s, "batched", us["batched"], "us/decision")
        self.check(s, "N-pass sequential", us["sequential"], "us/decision")
        self.check(s, "evaluator path", us["evaluator_path"], "us/decision")
        self.check(s, "mask draws share of batched", us["masks_one_generator"] / us["batched"], "")
        return {
            "params": {
                "batch": b,
                "mc_samples": n,
                "net_arch": list(cfg.env.net_arch),
                "obs_dim": int(obs.shape[1]),
                "actions": len(task.action_names),
                "repeats": self.sizes.gate_repeats,
                "policy": "untrained (PPO init)",
            },
            "us_per_decision": us,
            "timings": timings,
            "agreement": agree,
        }

    # -------------------------------------------------------------------------------- 4. training
    def section_training(self) -> dict[str, Any]:
        from benchmark.envs import make_task

        cfg = self.cfg("env=fourrooms")
        task = make_task(cfg.env)
        steps = self.sizes.train_steps
        default_envs = int(cfg.policy.n_envs)
        threads = int(cfg.policy.torch_threads)
        times: dict[str, list[float]] = {f"{default_envs}_envs": [], "1_env": []}
        old = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            for rep in range(self.sizes.train_repeats):
                for n_envs, key in ((default_envs, f"{default_envs}_envs"), (1, "1_env")):
                    model = new_ppo(
                        task,
                        cfg.policy,
                        n_envs,
                        n_steps=self.sizes.train_n_steps,
                        seed=int(cfg.policy.seed) + rep,
                    )
                    t0 = time.perf_counter()
                    model.learn(total_timesteps=steps)
                    times[key].append(model.num_timesteps / (time.perf_counter() - t0))
                    if n_envs == default_envs:
                        self.policy = model.policy  # the short-trained policy later sections use
        finally:
            torch.set_num_threads(old)
        sps = {k: statistics.median(v) for k, v in times.items()}
        s = "training"
        self.check(
            s,
            f"{default_envs} envs vs 1 env (steps/s)",
            sps[f"{default_envs}_envs"] / sps["1_env"],
            target=TARGETS["training"],
        )
        self.check(s, f"DummyVecEnv x{default_envs}", sps[f"{default_envs}_envs"], "steps/s")
        self.check(s, "single env", sps["1_env"], "steps/s")
        return {
            "params": {
                "env": "fourrooms",
                "total_timesteps": steps,
                "n_envs": default_envs,
                "torch_threads": threads,
                "n_steps": self.sizes.train_n_steps or 2048,
                "repeats": self.sizes.train_repeats,
                "vec_env": "DummyVecEnv",
            },
            "steps_per_s": sps,
            "steps_per_s_all": times,
        }

    def _policy(self, cfg: Any, task: Any):
        if self.policy is None:  # sections run on their own: train the short policy here
            old = torch.get_num_threads()
            torch.set_num_threads(int(cfg.policy.torch_threads))
            try:
                model = new_ppo(
                    task, cfg.policy, int(cfg.policy.n_envs), n_steps=self.sizes.train_n_steps
                )
                model.learn(total_timesteps=self.sizes.train_steps)
            finally:
                torch.set_num_threads(old)
            self.policy = model.policy
        return self.policy

    # -------------------------------------------------------------------------------- 2. evaluation
    def eval_overrides(self) -> list[str]:
        return [
            "env=fourrooms",
            f"env.task.max_steps={self.sizes.eval_max_steps}",
            "slm=tiny",
            "prompt=basic",
            "gate=entropy",
            "gate.tau=1.0",
        ]

    def section_evaluation(self) -> dict[str, Any]:
        from benchmark.build import build, prepare

        z = self.sizes
        cfg = self.cfg(
            *self.eval_overrides(), "slm.cache=false", f"eval.n_episodes={z.eval_episodes}"
        )
        prepared = prepare(cfg)
        policy = self._policy(cfg, prepared[0])
        n = int(cfg.gate.mc_samples)
        tau, entropies = calibrate_tau(
            policy, prepared[0], z.eval_episodes, z.eval_max_steps, n, z.target_ir
        )
        evaluation = build(cfg, prepared=prepared, policy=policy)
        try:
            seeds = evaluation.test_seeds()
            runs: dict[str, list[dict]] = {"lockstep": [], "sequential": []}
            outcomes: dict[str, list] = {"lockstep": [], "sequential": []}
            prefill: dict[str, list[dict]] = {"lockstep": [], "sequential": []}
            for _ in range(z.eval_repeats):
                for mode in ("lockstep", "sequential"):
                    sampler = RssSampler()
                    with sampler:
                        run = timed_run(evaluation, seeds, mode, tau)
                    if mode == "lockstep":
                        self.eval_rss = max(self.eval_rss or 0, sampler.max_bytes)
                    runs[mode].append(run.stats)
                    outcomes[mode].append(run.outcome)
                    if run.prefill is not None:
                        prefill[mode].append(run.prefill)
        finally:
            evaluation.close()
        med = {m: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for m, rs in runs.items()}
        identical = all(o == outcomes["lockstep"][0] for m in outcomes for o in outcomes[m])
        lock, seq = med["lockstep"], med["sequential"]
        s = "evaluation"
        self.check(
            s,
            "lockstep vs sequential (wall time, prefix reuse on in both)",
            seq["wall_s"] / lock["wall_s"],
            target=TARGETS["evaluation"],
        )
        self.check(s, "identical per-episode results", float(identical), "", target=1.0)
        self.check(s, "lockstep decisions/s", lock["decisions_per_s"], "1/s")
        self.check(s, "sequential decisions/s", seq["decisions_per_s"], "1/s")
        self.check(s, "lockstep LM queries/s", lock["queries_per_s"], "1/s")
        self.check(s, "sequential LM queries/s", seq["queries_per_s"], "1/s")
        self.check(s, "interaction rate (IR)", lock["ir"], "")
        prefill_med = {
            m: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            for m, rs in prefill.items()
            if rs
        }
        for mode, p in prefill_med.items():  # informational: prompt positions computed in prefill
            self.check(s, f"prefill tokens, prefix reuse ({mode})", p["prefill_tokens"], "tokens")
            self.check(
                s, f"prefill tokens, no reuse ({mode})", p["prefill_tokens_without_reuse"], "tokens"
            )
        return {
            "params": {
                "env": "fourrooms",
                "max_steps": z.eval_max_steps,
                "episodes": len(seeds),
                "split": str(cfg.eval.split),
                "slm": "tiny",
                "prompt": "basic",
                "cache": False,
                "prefix_cache": int(cfg.slm.backend.get("prefix_cache", 0)),  # the same in both
                "mc_samples": n,
                "tau": tau,
                "target_ir": z.target_ir,
                "repeats": z.eval_repeats,
                "torch_threads": torch.get_num_threads(),
                "policy": f"PPO short-trained for {z.train_steps} steps (not converged)",
            },
            "tau_calibration": entropies,
            "median": med,
            "runs": runs,
            "identical": identical,
            "prefill": prefill_med,  # hf backend: prefill tokens with and without prefix reuse
        }

    # -------------------------------------------------------------------------------- ir1
    def query_costs(
        self,
        paths: dict[str, tuple[str, Any]],
        task: Any,
        policy: Any,
        seeds: list[int],
        repeats: int = 7,
    ) -> dict[str, Any]:
        """Each path's cost per query on the same queries (the first step of the test episodes,
        as one lockstep batch or one by one as the path asks them), timed round-robin so that
        the machine's drifting load hits every path alike; beside them the floor: each query's
        suffix (its user message) prefilled on the cached system prompt, batch 1, nothing
        decoded (attention and MLP only), and its whole prompt prefilled from an empty cache;
        and the gate's MC dropout per decision, batched (the suite) or N passes (the authors).
        Medians and minima in ms per query."""
        import copy as _copy
        from dataclasses import replace as _replace

        from benchmark.build import build_prompt
        from benchmark.consultants import make_consultant
        from benchmark.uncertainty import mc_dropout, mc_dropout_sequential

        cfg = paths["default"][1]
        variant = build_prompt(cfg, task)
        episodes = [task.episode(seed) for seed in seeds]
        queries = [next(variant.session(e, False).consult(0))[0] for e in episodes]
        scored = [_replace(q, decoding=_replace(q.decoding, mode="choices")) for q in queries]
        obs = np.stack([np.asarray(e.obs) for e in episodes])
        n_mc = int(cfg.gate.mc_samples)
        made = {k: make_consultant(paths[k][1].slm, paths[k][1].paths) for k in paths}
        try:
            floor_model = made["default"]
            prompts = [floor_model.prompt(q) for q in queries]
            bases = []
            with torch.inference_mode():
                for pr in prompts:
                    bases.append(floor_model._new_cache())
                    floor_model._extend(bases[-1], [pr.ids[: pr.anchor]])

            def suffixes() -> None:
                with torch.inference_mode():
                    for pr, base in zip(prompts, bases, strict=True):
                        floor_model._extend(_copy.deepcopy(base), [pr.ids[pr.anchor :]])

            def wholes() -> None:
                with torch.inference_mode():
                    for pr in prompts:
                        floor_model._extend(floor_model._new_cache(), [pr.ids])

            authors = AuthorsConsultant(made["authors"])

            def one_by_one(consultant: Any, qs: list) -> Any:
                return lambda: [consultant.answer([q]) for q in qs]

            fns = {
                "default": lambda: made["default"].answer(queries),
                "generate": lambda: made["generate"].answer(queries),
                "choices": lambda: made["choices"].answer(scored),
                "batch1": one_by_one(made["batch1"], queries),
                "authors": one_by_one(authors, queries),
                "floor": suffixes,
                "whole": wholes,
                "gate_batched": lambda: mc_dropout(policy, obs, n_mc),
                "gate_n_pass": lambda: [
                    mc_dropout_sequential(policy, obs[i : i + 1], n_mc) for i in range(len(obs))
                ],
            }
            timings = time_interleaved(fns, repeats)
        finally:
            for consultant in made.values():
                consultant.close()
        n = len(queries)
        return {
            "queries": n,
            "prompt_tokens": [len(pr.ids) for pr in prompts],
            "prefix_tokens": prompts[0].anchor,
            "suffix_tokens": [len(pr.ids) - pr.anchor for pr in prompts],
            "median_ms": {k: 1e3 * t["median_s"] / n for k, t in timings.items()},
            "min_ms": {k: 1e3 * t["min_s"] / n for k, t in timings.items()},
            "repeats": repeats,
        }

    def section_ir1(self) -> dict[str, Any]:
        """ASK at interaction rate 1 (the entropy gate with tau=0 asks at every step, and the
        PPO suggestion stays in the prompt; gate=always would drop the policy), `stateful`
        prompt, tiny LM, greedy, response cache off. The like-for-like figure of the suite's
        default path (lockstep, batched, prefix reuse) against the naive loop of the official
        ASK+ code (one episode, one query at a time, no prefix reuse): same policy, same seeds,
        same config otherwise, and the same episodes step for step. Beside them: choice scoring,
        the authors' loop (benchmark.bench.authors) and the per-query costs timed round-robin
        with the floor (`query_costs`), whose ratio to a path's cost is the best any exact path
        could reach against it (the cap; docs/choices.md)."""
        from benchmark.build import build, prepare

        z = self.sizes
        if z.ir1_max_steps < IR1_PAPER_MAX_STEPS:
            print(
                f"bench ir1: episodes capped at {z.ir1_max_steps} steps "
                f"(the paper setting is {IR1_PAPER_MAX_STEPS})",
                flush=True,
            )
        base = [
            "env=fourrooms",
            f"env.task.max_steps={z.ir1_max_steps}",
            "slm=tiny",
            "slm.cache=false",
            "method=ask_stateful",
            "gate.tau=0",
            f"eval.n_episodes={z.ir1_episodes}",
        ]
        generate = "slm.backend.lean_max_new_tokens=0"  # every answer through generate()
        batch1 = ("slm.backend.prefix_cache=0", generate)
        paths = {  # path -> (eval mode, config)
            "default": ("lockstep", self.cfg(*base)),
            "generate": ("lockstep", self.cfg(*base, generate)),
            "choices": ("lockstep", self.cfg(*base, "slm.decoding.mode=choices")),
            "batch1": ("sequential", self.cfg(*base, *batch1)),
            "authors": ("sequential", self.cfg(*base, *batch1)),  # wrapped below
        }
        prepared = prepare(paths["default"][1])
        policy = self._policy(paths["default"][1], prepared[0])
        runs: dict[str, TimedRun] = {}
        steps = z.ir1_episodes * z.ir1_max_steps  # decisions of one path at most
        for k, (key, (mode, cfg)) in enumerate(paths.items()):
            evaluation = build(cfg, prepared=prepared, policy=policy)
            authors = key == "authors"
            if authors:  # the released code's loop (benchmark.bench.authors)
                evaluation.consultant = AuthorsConsultant(evaluation.consultant)

            def report(fraction: float, rate: float, k: int = k, key: str = key) -> None:
                self.within(
                    (k + fraction) / len(paths),
                    f"{key} path {fraction:.0%}, {rate:.1f} decisions/s",
                )

            try:
                with n_pass_gate() if authors else contextlib.nullcontext():
                    runs[key] = timed_run(
                        evaluation,
                        (seeds := evaluation.test_seeds()),
                        mode,
                        0.0,
                        True,
                        every(steps, report),
                    )
            finally:
                evaluation.close()
        default, batch1 = runs["default"], runs["batch1"]
        identical = all(
            runs[k].outcome == batch1.outcome and runs[k].actions == batch1.actions
            for k in ("default", "generate")
        )
        s = "ir1"
        self.check(
            s,
            "default path vs batch-1 sequential, no reuse (decisions/s)",
            default.stats["decisions_per_s"] / batch1.stats["decisions_per_s"],
            target=TARGETS["ir1"],
        )
        self.check(
            s,
            "choice scoring vs batch-1 sequential (decisions/s)",
            runs["choices"].stats["decisions_per_s"] / batch1.stats["decisions_per_s"],
            target=TARGETS["ir1"],
        )
        self.check(
            s,
            "lean decode vs generate(), both lockstep with reuse (decisions/s)",
            default.stats["decisions_per_s"] / runs["generate"].stats["decisions_per_s"],
        )
        authors = runs["authors"]
        for key, label in (("choices", "choice scoring"), ("default", "default path")):
            self.check(
                s,
                f"{label} vs the authors' loop (decisions/s)",
                runs[key].stats["decisions_per_s"] / authors.stats["decisions_per_s"],
                target=TARGETS["ir1"],
            )
        self.check(s, "identical per-episode results and actions", float(identical), "", target=1.0)
        same_as_authors = authors.outcome == batch1.outcome and authors.actions == batch1.actions
        self.check(s, "authors' loop plays batch-1's episodes", float(same_as_authors), "")
        costs = self.query_costs(paths, prepared[0], policy, seeds)
        med = costs["median_ms"]
        floor = {
            "suffix_tokens": round(statistics.mean(costs["suffix_tokens"])),
            "prefix_tokens": costs["prefix_tokens"],
            "suffix_ms": med["floor"],
            "whole_ms": med["whole"],
        }
        self.check(s, "floor: one suffix's prefill on the cached prefix", floor["suffix_ms"], "ms")
        self.check(s, "the whole prompt's prefill, no reuse", floor["whole_ms"], "ms")
        for key, label in (("choices", "choice scoring"), ("default", "default path")):
            for other, name in (("batch1", "batch-1"), ("authors", "the authors' call")):
                self.check(
                    s,
                    f"per query, interleaved: {label} vs {name}",
                    med[other] / med[key],
                )
        for key in ("choices", "default", "generate", "batch1", "authors"):
            self.check(s, f"per query, interleaved: {key} ms", med[key], "ms")
        self.check(s, "gate per decision: batched MC dropout", med["gate_batched"], "ms")
        self.check(s, "gate per decision: N-pass MC dropout", med["gate_n_pass"], "ms")
        # the best any exact path could do: every decision costs at least one suffix's prefill
        ms = {k: 1e3 / r.stats["decisions_per_s"] for k, r in runs.items()}  # ms per decision
        caps = {
            "batch1": med["batch1"] / med["floor"],
            "authors": (med["authors"] + med["gate_n_pass"]) / med["floor"],
        }
        self.check(s, "cap vs batch-1: its ms/query / the floor", caps["batch1"], "x")
        self.check(
            s,
            "cap vs the authors' loop: its ms/query (call + gate) / the floor",
            caps["authors"],
            "x",
        )
        labels = {
            "default": "default path (lean decode)",
            "generate": "generate() path",
            "choices": "choice scoring",
            "batch1": "batch-1 sequential",
            "authors": "authors' loop",
        }
        for key, label in labels.items():
            run = runs[key]
            self.check(s, f"{label} decisions/s", run.stats["decisions_per_s"], "1/s")
            self.check(s, f"{label} ms/decision", ms[key], "ms")
            self.check(
                s, f"{label} consultant ms/query", run.stats["consultant_ms_per_query"], "ms"
            )
            if run.prefill is not None and key != "authors":  # it calls generate() itself
                self.check(s, f"{label} prefill tokens", run.prefill["prefill_tokens"], "tokens")
                split = query_split(run)
                if split is not None:
                    for part in ("prefill", "decode", "overhead"):
                        self.check(s, f"{label} {part} ms/query", split[part], "ms")
        self.check(s, "interaction rate (IR)", default.stats["ir"], "")
        cfg = paths["default"][1]
        return {
            "params": {
                "env": "fourrooms",
                "max_steps": z.ir1_max_steps,
                "paper_max_steps": IR1_PAPER_MAX_STEPS,
                "episodes": z.ir1_episodes,
                "split": str(cfg.eval.split),
                "slm": "tiny",
                "prompt": str(cfg.prompt.name),
                "gate": f"{cfg.gate.name}, tau=0 (asks at every step)",
                "mc_samples": int(cfg.gate.mc_samples),
                "decoding": "greedy",
                "cache": False,
                "paths": {
                    key: {
                        "mode": mode,
                        "prefix_cache": int(c.slm.backend.get("prefix_cache", 0)),
                        "max_batch_size": int(c.slm.backend.max_batch_size),
                    }
                    for key, (mode, c) in paths.items()
                },
                "torch_threads": torch.get_num_threads(),
                "policy": f"PPO short-trained for {z.train_steps} steps (the same in both paths)",
            },
            **{key: {**run.summary(), "split_ms": query_split(run)} for key, run in runs.items()},
            "ratio": default.stats["decisions_per_s"] / batch1.stats["decisions_per_s"],
            "ratio_choices": runs["choices"].stats["decisions_per_s"]
            / batch1.stats["decisions_per_s"],
            "ratio_authors": runs["choices"].stats["decisions_per_s"]
            / authors.stats["decisions_per_s"],
            "identical": identical,
            "authors_plays_batch1": same_as_authors,
            "floor": floor,
            "query_costs": costs,
            "ms_per_decision": ms,
            "cap": caps,
        }

    # -------------------------------------------------------------------------------- 3. tuning
    def section_tuning(self) -> dict[str, Any]:
        from omegaconf import OmegaConf

        from benchmark.build import build, prepare
        from benchmark.consultants import make_consultant

        z = self.sizes
        cfg = self.cfg(
            *self.eval_overrides(),
            "gate.tau=auto",
            f"tuning.n_trials={z.tune_trials}",
            f"tuning.n_episodes={z.tune_episodes}",
        )
        prepared = prepare(cfg)
        policy = self._policy(cfg, prepared[0])
        out: dict[str, Any] = {}
        for cached in (False, True):
            key = "with_cache" if cached else "without_cache"
            slm = OmegaConf.merge(cfg.slm, {"cache": cached})
            paths = OmegaConf.merge(cfg.paths, {"cache": str(self.work / f"cache-{key}")})
            consultant = counting(make_consultant(slm, paths))
            evaluation = build(cfg, prepared=prepared, policy=policy, consultant=consultant)
            try:
                t0 = time.perf_counter()
                tau, trials = evaluation.tune(self.work / f"study-{key}")
                wall = time.perf_counter() - t0
                stats = consultant.stats() if hasattr(consultant, "stats") else None
                entry: dict[str, Any] = {
                    "wall_s": wall,
                    "best_tau": tau,
                    "trials": len(trials),
                    "queries": consultant.queries_seen,
                    "cache": stats,
                    "ir": [t["ir"] for t in trials],
                }
                if stats is not None:
                    asked = stats["hits"] + stats["misses"]
                    entry["hit_rate"] = stats["hits"] / asked if asked else 0.0
                    store = consultant.store
                    store.flush()  # publish the last few seconds' answers before measuring
                    entry["cache_rows"] = len(store)
                    entry["cache_bytes"] = store.disk_bytes()
                    entry["cache_max_entries"] = store.max_entries
                    entry["cache_row_bytes_estimate"] = store.row_bytes_estimate()
                out[key] = entry
            finally:
                evaluation.close()
        low, high = evaluation.tau_range()
        s = "tuning"
        speedup = out["without_cache"]["wall_s"] / out["with_cache"]["wall_s"]
        self.check(
            s, f"with cache vs without ({z.tune_trials} trials)", speedup, target=TARGETS["tuning"]
        )
        self.check(s, "cache hit rate", out["with_cache"]["hit_rate"], "")
        self.check(s, "study without cache", out["without_cache"]["wall_s"], "s")
        self.check(s, "study with cache", out["with_cache"]["wall_s"], "s")
        return {
            "params": {
                "env": "fourrooms",
                "max_steps": z.eval_max_steps,
                "split": "validation",
                "episodes": z.tune_episodes,
                "trials": z.tune_trials,
                "slm": "tiny",
                "prompt": "basic",
                "tau_range": [low, high],
                "repeats": 1,
                "policy": f"PPO short-trained for {z.train_steps} steps",
            },
            **out,
        }

    # -------------------------------------------------------------------------------- threads
    def section_threads(self) -> dict[str, Any]:
        """The tiny model's batched generation with 1 torch thread vs torch's default count:
        on a shared machine, OpenMP threads that wait for each other are the main slowdown."""
        from benchmark.build import build_prompt, prepare
        from benchmark.consultants import make_consultant

        cfg = self.cfg(*self.eval_overrides(), "slm.cache=false")
        task = prepare(cfg)[0]
        prompt = build_prompt(cfg, task)
        queries = []
        for seed in range(8):
            consultation = prompt.session(task.episode(seed), False).consult(0)
            queries += next(consultation)
        consultant = make_consultant(cfg.slm, cfg.paths)
        old = torch.get_num_threads()
        counts = sorted({1, self.default_threads})

        def with_threads(k: int):
            def fn():
                torch.set_num_threads(k)
                try:
                    consultant.answer(queries)
                finally:
                    torch.set_num_threads(old)

            return fn

        try:
            timings = time_interleaved(
                {f"{k}_threads": with_threads(k) for k in counts}, repeats=self.sizes.thread_repeats
            )
        finally:
            consultant.close()
        s = "threads"
        one = timings["1_threads"]["median_s"]
        default = timings[f"{self.default_threads}_threads"]["median_s"]
        self.check(
            s, f"1 thread vs default {self.default_threads} (tiny LM batch of 8)", default / one
        )
        self.check(s, "tiny LM, 8 prompts, 1 thread", one, "s")
        return {
            "params": {
                "batch": len(queries),
                "prompt": "basic",
                "env": "fourrooms",
                "default_threads": self.default_threads,
                "repeats": self.sizes.thread_repeats,
            },
            "timings": timings,
        }

    # -------------------------------------------------------------------------------- 5. memory
    def section_memory(self) -> dict[str, Any]:
        cfg = self.cfg("slm=tiny")
        # The kernel updates ru_maxrss lazily (per-thread RSS counters are folded in late), so a
        # sampled current RSS can exceed it by a few pages: the peak is the larger of the two.
        peak = max(peak_rss_bytes(), self.eval_rss or 0)
        s = "memory"
        data: dict[str, Any] = {
            "peak_rss_bytes": peak,
            "cache_max_entries": cache_cap(Store.of(cfg.paths).responses_dir()),
        }
        if self.eval_rss is not None:
            data["eval_lockstep_rss_bytes"] = self.eval_rss
            ep = self.sections.get("evaluation", {}).get("params", {}).get("episodes")
            self.check(
                s,
                f"RSS during lockstep eval ({ep} episodes)",
                self.eval_rss / GIB,
                "GiB",
                target=TARGETS["memory_gib"],
                cmp="<",
            )
        self.check(s, "peak RSS of the bench process", peak / GIB, "GiB")
        self.check(s, "response cache cap (rows)", data["cache_max_entries"], "rows")
        tuning = self.sections.get("tuning", {}).get("with_cache")
        if tuning:
            data["cache_rows_after_tuning"] = tuning["cache_rows"]
            data["cache_bytes_after_tuning"] = tuning["cache_bytes"]
            per_row = tuning["cache_row_bytes_estimate"]
            data["cache_row_bytes_estimate"] = per_row
            data["cache_bytes_at_cap_estimate"] = per_row * data["cache_max_entries"]
            self.check(
                s,
                "response cache at cap (estimate)",
                data["cache_bytes_at_cap_estimate"] / (1 << 20),
                "MiB",
            )
        return data


# ------------------------------------------------------------------------------------ helpers
def new_ppo(task: Any, policy_cfg: Any, n_envs: int, n_steps: int | None = None, seed: int = 0):
    """An untrained PPO with the dropout policy, set up as benchmark.policy.train sets it up."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.utils import LinearSchedule, set_random_seed

    from benchmark.policy import DropoutActorCriticPolicy
    from benchmark.policy.train import training_vec_env

    set_random_seed(seed)
    env = training_vec_env(task, seed, n_envs)
    kwargs = dict(policy_cfg.get("ppo") or {})
    if n_steps is not None:
        kwargs["n_steps"] = n_steps
    lr = float(policy_cfg.learning_rate)
    return PPO(
        DropoutActorCriticPolicy,
        env,
        learning_rate=LinearSchedule(lr, 0.0, 1.0),
        policy_kwargs={"net_arch": list(policy_cfg.net_arch), "dropout": float(policy_cfg.dropout)},
        device="cpu",
        verbose=0,
        **kwargs,
    )


def sample_observations(task: Any, n: int, steps: int = 5) -> np.ndarray:
    """Observations of `n` validation episodes after a few seeded random steps (varied inputs)."""
    rng = np.random.default_rng(0)
    obs = []
    for seed in range(n):
        ep = task.episode(seed)
        for _ in range(steps):
            if ep.done:
                break
            ep.step(int(rng.integers(len(ep.action_names))))
        obs.append(np.asarray(ep.obs))
    return np.stack(obs)


class counting:  # noqa: N801 - reads as a function at the call site
    """A consultant that counts the queries it is asked (the tuning section's cost figure)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.queries_seen = inner, 0

    def answer(self, queries: list) -> list:
        self.queries_seen += len(queries)
        return self.inner.answer(queries)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def calibrate_tau(
    policy: Any, task: Any, n_episodes: int, max_steps: int, n_samples: int, target_ir: float
) -> tuple[float, dict[str, Any]]:
    """tau = the (1 - target IR) quantile of the total entropy along PPO-only trajectories of the
    VALIDATION seeds (never a test seed), so the entropy gate asks on about `target_ir` of steps."""
    from benchmark.evaluate import deterministic_actions
    from benchmark.seeds import DEFAULT_SPLITS
    from benchmark.uncertainty import mc_dropout

    episodes = [task.episode(s) for s in DEFAULT_SPLITS.seeds("validation", n_episodes)]
    obs = []
    for _ in range(max_steps):
        live = [e for e in episodes if not e.done]
        if not live:
            break
        batch = np.stack([np.asarray(e.obs) for e in live])
        obs.append(batch)
        for e, a in zip(live, deterministic_actions(policy, batch).tolist(), strict=True):
            e.step(int(a))
    total = mc_dropout(
        policy, np.concatenate(obs), n_samples, torch.Generator().manual_seed(0)
    ).total
    tau = float(np.quantile(total, 1.0 - target_ir))
    return tau, {
        "n_observations": int(total.size),
        "quantile": 1.0 - target_ir,
        "tau": tau,
        "entropy_bits": {q: float(np.quantile(total, q)) for q in (0.0, 0.25, 0.5, 0.75, 1.0)},
        "max_entropy_bits": math.log2(len(task.action_names)),
    }


def every(total: int, report: Any, share: float = 0.2) -> Any:
    """A step counter: `report(fraction done, steps/s)` at every `share` of `total` steps, so a
    long run shows a few progress lines."""
    t0, state = time.perf_counter(), {"n": 0, "next": share}

    def tick() -> None:
        state["n"] += 1
        fraction = state["n"] / max(1, total)
        if fraction >= state["next"]:
            state["next"] += share
            report(fraction, state["n"] / max(time.perf_counter() - t0, 1e-9))

    return tick


@dataclass
class TimedRun:
    """One timed evaluation: speed figures, the deterministic episode rows, the consultant's
    prefill counts over the run (None for a backend without them) and, when recorded, every
    episode's (action, PPO action, consultant's action) per step."""

    stats: dict[str, float]
    outcome: list[dict]
    prefill: dict[str, int] | None
    actions: dict[int, list[tuple]] | None = None

    def summary(self) -> dict[str, Any]:
        return {"stats": self.stats, "prefill": self.prefill, "episodes": self.outcome}


def timed_run(
    evaluation: Any,
    seeds: list[int],
    mode: str,
    tau: float,
    record: bool = False,
    tick: Any = None,
) -> TimedRun:
    """`evaluation`'s episodes on `seeds` in `mode` with the gate's tau set to `tau`, timed;
    `record`: keep every step's actions; `tick()`: called at every step of every episode."""
    from benchmark import results

    counts = getattr(evaluation.consultant, "prefill_stats", None)  # hf backend only
    before = counts() if counts else {}
    actions: dict[int, list[tuple]] | None = {s: [] for s in seeds} if record else None

    def on_step(event: Any) -> None:
        if actions is not None:
            consulted = event.decision.action if event.decision is not None else None
            actions[event.episode.seed].append((event.action, event.ppo_action, consulted))
        if tick is not None:
            tick()

    evaluator = evaluation.evaluator(tau=tau)
    t0 = time.perf_counter()
    rows = evaluator.run(seeds, mode=mode, on_step=on_step if record or tick else None)
    wall = time.perf_counter() - t0
    prefill = {k: v - before[k] for k, v in counts().items()} if counts else None
    return TimedRun(_run_stats(rows, wall), results.split_runtime(rows)[0], prefill, actions)


def query_split(run: TimedRun) -> dict[str, float] | None:
    """A path's consultant time per query split into prefill, decode (scoring the choices or
    the lean greedy loop) and overhead (the rest: templating, tokenizing, batching, parsing;
    generate()'s own machinery when it ran), in ms; None when the backend timed no part of it
    (every answer through generate(): its prefill and decode are not separable)."""
    p = run.prefill or {}
    queries = max(1, run.stats["queries"])
    prefill, decode = p.get("prefill_seconds", 0.0), p.get("decode_seconds", 0.0)
    if not prefill and not decode:
        return None
    total = run.stats["consultant_ms_per_query"]
    out = {"prefill": 1e3 * prefill / queries, "decode": 1e3 * decode / queries}
    out["overhead"] = total - out["prefill"] - out["decode"]
    return out


def _run_stats(rows: list[dict], wall: float) -> dict[str, float]:
    decisions = sum(r["length"] for r in rows)
    queries = sum(r["queries"] for r in rows)
    return {
        "wall_s": wall,
        "decisions": decisions,
        "queries": queries,
        "decisions_per_s": decisions / wall,
        "queries_per_s": queries / wall,
        "ir": queries / max(1, decisions),
        # the consultant's share of the wall time, per query (its batches' time split over rows)
        "consultant_ms_per_query": 1e3
        * sum(r["consultant_seconds"] for r in rows)
        / max(1, queries),
    }


def sizes_dict(sizes: Sizes) -> dict[str, Any]:
    return asdict(sizes)
