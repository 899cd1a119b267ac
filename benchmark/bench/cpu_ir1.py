"""CPU bench section `ir1`: ASK at IR 1 (every step asks), stateful prompt: the suite's default
path (lockstep, batched, prefix reuse) and choice scoring vs the naive batch-1 loop (sequential,
no prefix reuse) and the authors' loop (benchmark.bench.authors); the floor (one suffix's
prefill) and the best ratio it allows (docs/choices.md)."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
import torch

from benchmark.bench.authors import AuthorsConsultant
from benchmark.bench.common import time_interleaved
from benchmark.bench.cpu_evaluation import TimedRun, every, query_split, timed_run
from benchmark.bench.cpu_settings import IR1_PAPER_MAX_STEPS, TARGETS


class Ir1Section:
    """The ir1 section of CpuBench (a mixin; the host (CpuBench) provides `cfg`, `check`, `sizes`, `within` and the state the sections share)."""

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
                    bases.append(floor_model.prefix.new_cache())
                    floor_model.prefix.extend(bases[-1], [pr.ids[: pr.anchor]])

            def suffixes() -> None:
                with torch.inference_mode():
                    for pr, base in zip(prompts, bases, strict=True):
                        floor_model.prefix.extend(_copy.deepcopy(base), [pr.ids[pr.anchor :]])

            def wholes() -> None:
                with torch.inference_mode():
                    for pr in prompts:
                        floor_model.prefix.extend(floor_model.prefix.new_cache(), [pr.ids])

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
        from benchmark.uncertainty import mc_dropout_sequential

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
            if authors:  # the released code's loop (benchmark.bench.authors): N-pass gate
                evaluation.consultant = AuthorsConsultant(evaluation.consultant)
                evaluation.mc_dropout_fn = mc_dropout_sequential

            def report(fraction: float, rate: float, k: int = k, key: str = key) -> None:
                self.within(
                    (k + fraction) / len(paths),
                    f"{key} path {fraction:.0%}, {rate:.1f} decisions/s",
                )

            try:
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
        )
        self.check(
            s,
            "choice scoring vs batch-1 sequential (decisions/s)",
            runs["choices"].stats["decisions_per_s"] / batch1.stats["decisions_per_s"],
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
        # the goal: a query costs little more than the floor (one step's new message prefilled on
        # the cached prefix); nothing faster is exact on this CPU
        for key, label in (("choices", "choice scoring"), ("default", "default path")):
            self.check(
                s,
                f"per query, interleaved: {label} / the floor",
                med[key] / med["floor"],
                target=TARGETS["ir1_floor"] if key == "choices" else None,
                cmp="<=",
            )
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
