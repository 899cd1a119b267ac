"""Joint RL of Agent-BRACE's belief and policy models: a small GRPO loop around the
suite's own Evaluator (benchmark.brace.rollout), on TRAINING seeds only.

Each iteration draws `seeds_per_step` training seeds and plays each `group` times with both
models sampling (temperature > 0): the belief model writes every update, the policy model every
action, through the belief prompt's two rounds. Rewards by program:
- the policy model's act completions: R_env of their episode (1 success, 0 failure);
- the belief model's update completions: R_belief of that update (benchmark.brace.rewards:
  format gate x (correctness + tracking + diversity + gamma^t x success)).
Advantages are group-relative as in GRPO: a completion's reward less the mean over the same
seed's group, over their std (R_env per episode; R_belief per update, over all updates of the
seed's group). One on-policy gradient step per iteration (the importance ratio is 1, so GRPO's
clipping does not act; no KL term: beta 0), loss = -mean(A x mean token log-prob).

Modes (the gate decides which states the models see): `slm` = gate always (the paper: the
models act at every step); `ask` = the entropy gate with a PPO policy (the models are trained on
the states the gate sends them; PPO acts elsewhere). TRL's GRPOTrainer is the one-step belief RL
of benchmark.brace.grpo; a whole-episode rollout does not fit its one-prompt-one-completion
batches, hence this loop (the same objective)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmark.brace import tokens
from benchmark.brace.rewards import DEFAULT_WEIGHTS, BeliefWeights, belief_reward
from benchmark.brace.rollout import StepLog, rollout_batch
from benchmark.consultants import Answer, Consultant, Query, attention
from benchmark.consultants.finite import finite_watch, raise_nonfinite
from benchmark.consultants.hf import neutral_generation_config, prompt_ids, stop_ids
from benchmark.consultants.lean import plain_greedy
from benchmark.finetune import lm
from benchmark.prompts.belief import BELIEF_ROLE
from benchmark.seeds import check_training_seeds

if TYPE_CHECKING:
    from benchmark.brace.rl import RLJob
    from benchmark.brace.settings import RLSettings


class Sampler(Consultant):
    """The models being trained, as one consultant: the belief role's queries to `belief`, the
    rest to `policy` (the same object for one model with two prompts). Samples at
    `temperature`; each answer keeps its prompt and completion token ids for the loss."""

    def __init__(self, models: dict[str, tuple[Any, Any]], temperature: float = 1.0,
                 max_batch: int = 16, belief_samples: int = 1, seed: int = 0) -> None:  # fmt: skip
        """`belief_samples` > 1: each belief update is sampled that many times from the same
        state; the episode goes on with the first, and all of them (`extra["siblings"]`) are
        scored as one GRPO group of that state (R_belief is known at once from the truth).
        `seed`: the stream of the rows' sampling seeds (a run repeats). The models get the hf
        backend's attention (`attention.install`: fully masked rows of a left-padded batch
        zeroed, where some GPU kernels return NaN) and every batch its finite check."""
        self.models = models  # role -> (model, tokenizer)
        for model, _ in models.values():
            attention.install(model)
        self.temperature = float(temperature)
        self.max_batch = int(max_batch)
        self.belief_samples = int(belief_samples)
        self.rng = np.random.default_rng(seed)

    @property
    def identity(self) -> str:
        return "brace-sampler"

    def answer(self, queries: list[Query]) -> list[Answer]:
        out: list[Answer | None] = [None] * len(queries)
        for role in ("belief", "policy"):
            mine = [
                i for i, q in enumerate(queries) if (q.role == BELIEF_ROLE) == (role == "belief")
            ]
            n = self.belief_samples if role == "belief" else 1
            mine = [i for i in mine for _ in range(n)]  # each query n times, side by side
            got: list[Answer] = []
            for k in range(0, len(mine), self.max_batch):
                chunk = mine[k : k + self.max_batch]
                got += self._generate(role, [queries[i] for i in chunk])
            for j in range(0, len(got), n):
                first = got[j]
                if n > 1:
                    first.extra["siblings"] = [  # type: ignore[attr-defined]
                        (a.text, a.extra)
                        for a in got[j : j + n]  # type: ignore[attr-defined]
                    ]
                out[mine[j]] = first
        return out  # type: ignore[return-value]

    def _generate(self, role: str, queries: list[Query]) -> list[Answer]:
        """Samples exactly the distribution the RL losses score, softmax(logits / temperature)
        (benchmark.brace.tokens.completion_forward): the model's generation config reset as the
        hf backend resets it for evaluation (no repetition penalty, top-k, top-p or other
        processor of the checkpoint's, e.g. Qwen2.5's repetition_penalty 1.05), then the suite's
        row sampler (benchmark.consultants.sampling) at `temperature` alone; a query's own
        sampling fields are not read (its max_new_tokens is). Each answer keeps the log-prob
        its tokens were sampled with (`extra["sample_logp"]`): PPO's first ratio is 1 against
        it (tested)."""
        import torch
        from transformers import LogitsProcessorList

        model, tok = self.models[role]
        ids = [prompt_ids(tok, q.messages, enable_thinking=False) for q in queries]
        width = max(map(len, ids))
        pad, eos = lm.pad_id(tok), set(stop_ids(model, tok))  # stops as the hf backend does
        batch = torch.tensor([[pad] * (width - len(x)) + x for x in ids], device=model.device)
        mask = torch.tensor(
            [[0] * (width - len(x)) + [1] * len(x) for x in ids], device=model.device
        )
        gc = neutral_generation_config(model, pad, sorted(eos))
        gc.update(max_new_tokens=queries[0].decoding.max_new_tokens)
        if not plain_greedy(gc):
            raise ValueError(f"brace RL sampler: the {role} model's generation config applies a "
                             "logits processor (repetition / n-gram / length rules...); PPO "
                             "would score another distribution than the one sampled")  # fmt: skip
        recorder = _Recorder(self.temperature, len(ids), width, self.rng)
        watch = finite_watch(len(ids), model.device)  # first: it sees the model's own logits
        model.eval()
        with torch.no_grad():
            gen = model.generate(input_ids=batch, attention_mask=mask, generation_config=gc,
                                 logits_processor=LogitsProcessorList([watch, *recorder.processors()]))  # fmt: skip
        # a row sampled from NaN logits would still give an answer: raise as the hf backend does
        runtime = SimpleNamespace(model=model, device=model.device,
                                  identity=f"brace RL sampler ({role} model)")  # fmt: skip
        bad = [r for r, b in enumerate(watch.bad.tolist()) if b]
        raise_nonfinite(runtime, "left-padded", "RL sampling", bad, ids)
        answers = []
        sampled = recorder.logp()
        for r, (x, row) in enumerate(zip(ids, gen[:, width:].tolist(), strict=True)):
            completion = []
            for t in row:
                completion.append(t)
                if t in eos:
                    break
            text = tok.decode([t for t in completion if t not in eos], skip_special_tokens=True)
            a = Answer(text, prompt_tokens=len(x), generated_tokens=len(completion))
            a.extra = {"prompt_ids": x, "completion_ids": completion, "role": role,  # type: ignore[attr-defined]
                       "sample_logp": sampled[r, : len(completion)].tolist()}  # fmt: skip
            answers.append(a)
        return answers


class _Recorder:
    """The sampler's logits processors (the suite's row sampler at `temperature`, each row its
    own seed from `rng`; greedy when the temperature is 0) and the log-prob of each token they
    chose under the logits generate handed them, at that temperature."""

    def __init__(self, temperature: float, rows: int, width: int, rng: Any) -> None:
        from benchmark.consultants import Decoding
        from benchmark.consultants.sampling import row_sampler

        self.t = float(temperature) or 1.0
        self.steps: list[Any] = []
        seeds = [int(s) for s in rng.integers(0, 2**62, size=rows)]
        self.row = None
        if temperature > 0:
            self.row = row_sampler(Decoding(temperature=float(temperature)), seeds,
                                   [0] * rows, width)  # fmt: skip

    def processors(self) -> Any:
        import torch
        from transformers import LogitsProcessor, LogitsProcessorList

        outer = self

        class Record(LogitsProcessor):
            def __call__(self, input_ids: Any, scores: Any) -> Any:
                out = scores if outer.row is None else outer.row(input_ids, scores)
                token = out.argmax(-1, keepdim=True)
                logp = torch.log_softmax(scores.float() / outer.t, -1).gather(-1, token)[:, 0]
                outer.steps.append(logp)
                return out

        return LogitsProcessorList([Record()])

    def logp(self) -> Any:
        import torch

        return torch.stack(self.steps, 1).cpu() if self.steps else torch.zeros(0, 0)


def group_advantages(rewards: Sequence[float], eps: float = 1e-4) -> list[float]:
    """GRPO's group-relative advantages: (r - mean) / (std + eps); all 0 when the group agrees."""
    r = np.asarray(rewards, dtype=float)
    if r.size < 2 or r.std() < 1e-8:
        return [0.0] * int(r.size)
    return ((r - r.mean()) / (r.std() + eps)).tolist()


def samples(groups: dict[int, list[list[StepLog]]], weights: BeliefWeights = DEFAULT_WEIGHTS
            ) -> tuple[list[tuple[str, dict, float]], dict[str, list[float]]]:  # fmt: skip
    """(role, token ids, advantage) of every completion of the rollouts `groups` (seed -> one
    list of step logs per group member), and the raw rewards: R_env per episode, R_belief per
    update."""
    out: list[tuple[str, dict, float]] = []
    raw: dict[str, list[float]] = defaultdict(list)
    for members in groups.values():
        env = [m[0].success if m else 0.0 for m in members]
        raw["env"] += env
        env_adv = group_advantages(env)
        updates = []  # (turn, R_belief) of updates without siblings
        for member, adv in zip(members, env_adv, strict=True):
            for s in member:
                for t in s.turns:
                    if t.role == BELIEF_ROLE:
                        r = belief_reward(
                            t.text, s.previous, s.truth, s.teacher, s.success, weights
                        )
                        raw["belief"].append(r.total)
                        raw["gate"].append(r.gate)
                        raw["correctness"].append(r.correctness)
                        siblings = t.extra.get("siblings")
                        if not siblings:
                            updates.append((t, r.total))
                            continue
                        # one GRPO group per state: the same state's sampled updates
                        scores = [
                            belief_reward(text, s.previous, s.truth, s.teacher, s.success, weights)
                            for text, _ in siblings
                        ]
                        for (_, ids), a in zip(
                            siblings, group_advantages([x.total for x in scores]), strict=True
                        ):
                            out.append(("belief", ids, a))
                    elif t.extra:
                        out.append(("policy", t.extra, adv))
        # without siblings: the group is every update of the seed's rollouts
        for (t, _), adv in zip(updates, group_advantages([r for _, r in updates]), strict=True):
            if t.extra:
                out.append(("belief", t.extra, adv))
    return out, raw


def policy_gradient_step(models: dict[str, tuple[Any, Any]], optimizers: dict[str, Any],
                         batch: list[tuple[str, dict, float]], micro: int = 8,
                         bf16: bool = False) -> dict[str, float]:  # fmt: skip
    """One optimizer step per role on -mean(A x mean completion log-prob) (the completion
    tokens' log-probs only: benchmark.brace.tokens); completions with a zero advantage carry
    no gradient and are skipped."""
    import torch

    losses = {}
    for role, (model, tok) in models.items():
        mine = [(ids, a) for r, ids, a in batch if r == role and a != 0.0]
        if not mine or role not in optimizers:
            continue
        model.train()
        opt = optimizers[role]
        opt.zero_grad()
        total = 0.0
        pad = lm.pad_id(tok)
        for k in range(0, len(mine), micro):
            chunk = mine[k : k + micro]
            pairs = [(ids["prompt_ids"], ids["completion_ids"]) for ids, _ in chunk]
            tok_logp, _ = tokens.completion_forward(model, pairs, pad, bf16=bf16)
            loss = 0.0
            for logp, (_, adv) in zip(tok_logp, chunk, strict=True):
                loss = loss - adv * logp.mean()
            loss = loss / len(mine)
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses[role] = total
    return losses


def train(job: RLJob, settings: RLSettings, *,
          train_roles: Sequence[str] = ("belief", "policy")) -> dict[str, Any]:  # fmt: skip
    """GRPO of `job`'s models (role -> dir; the same dir for both roles = one model with two
    prompts, trained on both) at `settings` (its iterations, batch, learning rate, temperature,
    belief samples and memory options); saves each trained role to `job.out_dirs[role]`.
    Returns the mean rewards per iteration (benchmark.brace.rl documents the arguments)."""
    import torch

    check_training_seeds(job.train_seeds, job.splits)
    torch.manual_seed(job.seed)
    rng = np.random.default_rng(job.seed)
    loaded: dict[str, tuple[Any, Any]] = {}
    memory = {"dtype": settings.dtype, "lora_rank": settings.lora_rank,
              "lora_alpha": settings.lora_alpha,
              "gradient_checkpointing": settings.gradient_checkpointing}  # fmt: skip
    bf16 = bool(settings.bf16_autocast)
    model_dirs = job.model_dirs
    for role, d in model_dirs.items():
        same = next((r for r, o in model_dirs.items() if o == d and r in loaded), None)
        # on the model's device (the GPU if any); LoRA etc. only on a model that trains
        trains = any(model_dirs[r] == d for r in train_roles)
        loaded[role] = loaded[same] if same else tokens.load_for_rl(d, train=trains, **memory)
    optimizers: dict[str, Any] = {}
    for role in train_roles:
        model = loaded[role][0]
        shared = next((r for r in optimizers if loaded[r][0] is model), None)
        if shared is None:
            optimizers[role] = torch.optim.AdamW(
                [p for p in model.parameters() if p.requires_grad], lr=settings.learning_rate,
                weight_decay=0.0,
            )  # fmt: skip
    # a role whose model another role shares trains through that role's optimizer
    train_models = {r: loaded[r] for r in optimizers}
    sampler = Sampler(
        loaded, settings.temperature, belief_samples=settings.belief_samples, seed=job.seed
    )
    history = []
    pool = list(job.train_seeds)
    for it in range(settings.iterations):
        t0 = time.perf_counter()
        seeds = [int(s) for s in rng.choice(pool, size=settings.seeds_per_step, replace=False)]
        groups = rollout_batch(job.task, job.prompt, sampler, seeds, settings.group,
                               gate=job.gate, policy=job.policy)  # fmt: skip
        batch, raw = samples(groups, job.weights)
        # one model with two prompts: both roles' completions update it
        merged = [(next(r for r in train_models if loaded[r][0] is loaded[role][0]), ids, a)
                  for role, ids, a in batch if any(loaded[r][0] is loaded[role][0] for r in train_models)]  # fmt: skip
        losses = policy_gradient_step(train_models, optimizers, merged, bf16=bf16)
        row = {
            "iteration": it,
            "seeds": seeds,
            "r_env": float(np.mean(raw["env"])) if raw["env"] else 0.0,
            "r_belief": float(np.mean(raw["belief"])) if raw["belief"] else 0.0,
            "format": float(np.mean(raw["gate"])) if raw["gate"] else 0.0,
            "correctness": float(np.mean(raw["correctness"])) if raw["correctness"] else 0.0,
            "updates": len(raw["belief"]),
            "loss": losses,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        history.append(row)
        job.log(row)
    plain: dict[int, Any] = {}  # one model with two prompts: merged once
    for role, d in job.out_dirs.items():
        model = loaded[role][0]
        plain.setdefault(id(model), tokens.plain(model))
        lm.save(plain[id(model)], loaded[role][1], Path(d))
    return {"history": history}
