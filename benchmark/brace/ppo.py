"""Agent-BRACE's PPO (the paper's F.3-F.4): policy PPO with a GAE critic, then joint PPO that
updates the belief model after every rollout batch, on TRAINING seeds only.

Each iteration is one rollout batch: `seeds_per_step` training seeds, each played `group` times
through the suite's Evaluator (benchmark.brace.rollout) with both models sampling. Then:
- policy: one trajectory per episode, its act completions in step order as one token sequence;
  reward R_env (1 success, 0 failure) on its last token, 0 elsewhere;
- belief (joint stage, unless frozen): one trajectory per update, reward R_belief
  (benchmark.brace.rewards: format gate x (correctness + tracking + diversity + gamma^t x
  success)) on its last token;
- critic: a value head (a linear map of the last hidden state) on each trained model: the same
  forward gives log-probs and values, so a 3-4B model is held once (a separate value model
  would double the memory); values at each completion token; GAE(gamma, lambda) over the
  trajectory's tokens gives advantages (whitened over the role's batch) and returns;
- KL penalty (`kl_coef` > 0, the policy only): the authors' release puts it in the reward
  (verl's use_kl_in_reward, kl_penalty "kl", a fixed coefficient): each completion token's
  reward less kl_coef x (log pi_old - log pi_ref), pi_ref the model the policy starts from (a
  frozen copy; with LoRA the same model with its adapters off), its log-probs computed once per
  batch; GAE then carries the penalty to the advantages;
- update: `ppo_epochs` passes of minibatches on the clipped surrogate
  -min(r A, clip(r, 1-eps, 1+eps) A) over the completion tokens (r: new/old probability) plus
  value_coef x 0.5 (V - return)^2; the old log-probs are the sampling model's, before the update.

Stages: `policy_iterations` of the policy alone (the belief model frozen: the paper's policy PPO),
then `iterations` of joint PPO (both updated after each batch; `train_belief=False`: the belief
stays frozen throughout, the frozen-belief ablation)."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmark.brace import tokens
from benchmark.brace.rewards import DEFAULT_WEIGHTS, BeliefWeights, belief_reward
from benchmark.brace.rollout import StepLog, rollout_batch
from benchmark.brace.settings import RLSettings
from benchmark.finetune import lm
from benchmark.prompts.belief import BELIEF_ROLE
from benchmark.seeds import check_training_seeds

if TYPE_CHECKING:
    from benchmark.brace.rl import RLJob

VALUE_HEAD = "value_head.safetensors"  # the critic, saved beside a trained model's weights
ADAPTERS = "adapters"  # a LoRA learner's reference: its own model with the adapters off


def gae(rewards: Sequence[float], values: Sequence[float], gamma: float, lam: float
        ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Generalized Advantage Estimation over one trajectory (the value after its end is 0):
    delta_t = r_t + gamma V_{t+1} - V_t, A_t = delta_t + gamma lam A_{t+1}; returns A + V."""
    r = np.asarray(rewards, dtype=float)
    v = np.asarray(values, dtype=float)
    if r.shape != v.shape:
        raise ValueError(f"gae: {r.size} rewards but {v.size} values")
    adv = np.zeros_like(r)
    running = 0.0
    for t in range(r.size - 1, -1, -1):
        nxt = v[t + 1] if t + 1 < r.size else 0.0
        running = r[t] + gamma * nxt - v[t] + gamma * lam * running
        adv[t] = running
    return adv, adv + v


@dataclass
class Trajectory:
    """One trajectory of one role: its completions (prompt ids, completion ids) in order and
    its reward (on the last token); `score` adds old log-probs, advantages and returns per
    completion."""

    role: str
    pairs: list[tuple[list[int], list[int]]]
    reward: float
    sampled: list[Any] = field(default_factory=list)  # the sampler's log-probs, per completion
    old_logp: list[Any] = field(default_factory=list)
    advantages: list[Any] = field(default_factory=list)
    returns: list[Any] = field(default_factory=list)


def trajectories(groups: dict[int, list[list[StepLog]]], roles: Sequence[str],
                 weights: BeliefWeights = DEFAULT_WEIGHTS
                 ) -> tuple[list[Trajectory], dict[str, list[float]]]:  # fmt: skip
    """The trajectories of `roles` in the rollouts `groups` (seed -> one list of step logs per
    episode) and the raw rewards: R_env per episode, R_belief, format and correctness per
    update, the policy's prompt tokens per step (its context)."""
    out: list[Trajectory] = []
    raw: dict[str, list[float]] = {"env": [], "belief": [], "gate": [], "correctness": [],
                                   "context": []}  # fmt: skip
    for members in groups.values():
        for steps in members:
            success = steps[0].success if steps else 0.0
            raw["env"].append(success)
            acts = []
            for s in steps:
                for t in s.turns:
                    ids = t.extra
                    if t.role != BELIEF_ROLE:
                        if ids:
                            acts.append(ids)
                            raw["context"].append(len(ids["prompt_ids"]))
                        continue
                    r = belief_reward(t.text, s.previous, s.truth, s.teacher, s.success, weights)
                    raw["belief"].append(r.total)
                    raw["gate"].append(r.gate)
                    raw["correctness"].append(r.correctness)
                    if "belief" in roles and ids:
                        out.append(_trajectory("belief", [ids], r.total))
            if "policy" in roles and acts:
                out.append(_trajectory("policy", acts, float(success)))
    return out, raw


def _trajectory(role: str, completions: Sequence[dict[str, Any]], reward: float) -> Trajectory:
    """A trajectory of the sampler's completions (their token ids and sampling log-probs)."""
    pairs = [(c["prompt_ids"], c["completion_ids"]) for c in completions]
    return Trajectory(role, pairs, reward, [c.get("sample_logp") for c in completions])


def sampling_gap(trajs: Sequence[Trajectory]) -> float | None:
    """The largest |r - 1| over the tokens of scored trajectories, r = exp(old log-prob - the
    sampler's log-prob): 0 up to float error when the sampler samples what PPO scores (None:
    no sampler log-probs)."""
    import torch

    gaps = [float((torch.exp(old - torch.as_tensor(s, dtype=old.dtype, device=old.device)) - 1)
                  .abs().max())
            for t in trajs for old, s in zip(t.old_logp, t.sampled, strict=False)
            if s is not None and len(s) == old.numel() and old.numel()]  # fmt: skip
    return max(gaps) if gaps else None


class Learner:
    """One trained role: its model (LoRA / checkpointing as set), value head and optimizer, at
    the role's learning rate; the policy with `kl_coef` > 0 also its KL reference."""

    def __init__(self, model: Any, tokenizer: Any, settings: RLSettings, role: str = "policy",
                 reference: Any = None) -> None:  # fmt: skip
        """`reference`: the frozen model the policy's KL penalty measures against (ADAPTERS: a
        LoRA model with its adapters off), needed when the role is the policy and
        `settings.kl_coef` > 0 (`reference_for` makes it)."""
        import torch

        self.model, self.tok, self.s = model, tokenizer, settings
        self.kl_coef = float(settings.kl_coef) if role == "policy" else 0.0
        if self.kl_coef and reference is None:
            raise ValueError(f"rl kl_coef={settings.kl_coef}: the policy needs its reference "
                             "model (reference_for)")  # fmt: skip
        self.reference = reference if self.kl_coef else None
        self.head = tokens.value_head(model)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            [{"params": params, "lr": settings.role_learning_rate(role)},
             {"params": list(self.head.parameters()), "lr": settings.value_learning_rate}],
            weight_decay=0.0,
        )  # fmt: skip

    def forward(self, pairs: Sequence[tuple[list[int], list[int]]]) -> tuple[list[Any], list[Any]]:
        logp, values = tokens.completion_forward(
            self.model, pairs, lm.pad_id(self.tok), temperature=self.s.temperature,
            head=self.head, bf16=self.s.bf16_autocast,
        )  # fmt: skip
        return logp, values  # type: ignore[return-value]

    def reference_logp(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[Any]:
        """The reference model's log-probs of the completions (no gradient), at the sampling
        temperature as the old log-probs."""
        import torch

        lora = self.reference == ADAPTERS
        model = self.model if lora else self.reference
        off = self.model.disable_adapter() if lora else contextlib.nullcontext()
        with torch.no_grad(), off:
            logp, _ = tokens.completion_forward(
                model, pairs, lm.pad_id(self.tok), temperature=self.s.temperature,
                bf16=self.s.bf16_autocast,
            )  # fmt: skip
        return logp

    def score(self, trajs: Sequence[Trajectory]) -> dict[str, float]:
        """Old log-probs and values (no gradient), then GAE advantages, whitened over the
        batch's tokens, and returns, per completion. With the KL penalty, each token's reward
        is less kl_coef x (old - reference log-prob); returns {"kl_ref": that difference's mean
        over the batch's tokens} (empty without the penalty).

        The whitening is verl's (`masked_whiten`: less the mean over the batch's tokens, over
        their std). It keeps each advantage's sign on the first iteration: with lambda = 1 and
        the critic's zero-initialised head, every token of an episode has its episode's return
        as advantage, the token mean lies between the batch's smallest and largest return, so
        with R_env in {0, 1} every token of a won episode stays above 0 and every token of a
        lost one below (tested); a batch whose episodes all agree gets 0 everywhere. With
        lambda < 1 the early tokens of a long won episode get a tiny raw advantage that the
        mean pushes below 0."""
        import torch

        self.model.eval()
        kls = []
        for traj in trajs:
            with torch.no_grad():
                logp, values = self.forward(traj.pairs)
            v = torch.cat(values).float().cpu().numpy()
            rewards = np.zeros_like(v)
            rewards[-1] = traj.reward
            if self.kl_coef:  # the reference's log-probs: once per batch, on the sampled tokens
                ref = torch.cat(self.reference_logp(traj.pairs)).float()
                kl = (torch.cat(logp).float() - ref).cpu().numpy()
                rewards = rewards - self.kl_coef * kl
                kls.append(kl)
            adv, ret = gae(rewards, v, self.s.gamma, self.s.lam)
            sizes = [len(c) for _, c in traj.pairs]
            traj.old_logp = [x.detach() for x in logp]
            device = self.model.device
            traj.advantages = list(
                torch.tensor(adv, dtype=torch.float32, device=device).split(sizes)
            )
            traj.returns = list(torch.tensor(ret, dtype=torch.float32, device=device).split(sizes))
        every = torch.cat([a for t in trajs for a in t.advantages]) if trajs else None
        if every is not None and every.numel() > 1:
            mean, std = every.mean(), every.std()
            for t in trajs:
                t.advantages = [(a - mean) / (std + 1e-8) for a in t.advantages]
        return {"kl_ref": round(float(np.concatenate(kls).mean()), 6)} if kls else {}

    def update(self, trajs: Sequence[Trajectory], seed: int = 0) -> dict[str, float]:
        """`ppo_epochs` passes over the completions of `trajs` (scored), in minibatches."""
        items = [(pair, t.old_logp[k], t.advantages[k], t.returns[k])
                 for t in trajs for k, pair in enumerate(t.pairs)]  # fmt: skip
        return ppo_update(self, items, seed)


def ppo_update(learner: Learner, items: Sequence[tuple[Any, Any, Any, Any]], seed: int = 0
               ) -> dict[str, float]:  # fmt: skip
    """The PPO step on `items` ((prompt, completion), old log-probs, advantages, returns per
    completion token): clipped surrogate + value loss, `ppo_epochs` passes of shuffled
    minibatches. Returns the mean policy loss, value loss, clip fraction and approximate KL."""
    import torch

    s, model = learner.s, learner.model
    if not items:
        return {}
    model.train()
    rng = np.random.default_rng(seed)
    stats: dict[str, list[float]] = {"policy_loss": [], "value_loss": [], "clip_frac": [],
                                     "approx_kl": []}  # fmt: skip
    params = [p for p in model.parameters() if p.requires_grad] + list(learner.head.parameters())
    for _ in range(s.ppo_epochs):
        order = rng.permutation(len(items))
        for k in range(0, len(order), s.minibatch):
            chunk = [items[i] for i in order[k : k + s.minibatch]]
            logp, values = learner.forward([c[0] for c in chunk])
            new, old = torch.cat(logp), torch.cat([c[1] for c in chunk])
            adv, ret = torch.cat([c[2] for c in chunk]), torch.cat([c[3] for c in chunk])
            ratio = torch.exp(new - old)
            surrogate = torch.min(ratio * adv, ratio.clamp(1 - s.clip, 1 + s.clip) * adv)
            policy_loss = -surrogate.mean()
            value_loss = 0.5 * ((torch.cat(values) - ret) ** 2).mean()
            loss = policy_loss + s.value_coef * value_loss
            learner.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, s.max_grad_norm)
            learner.optimizer.step()
            with torch.no_grad():
                stats["policy_loss"].append(float(policy_loss))
                stats["value_loss"].append(float(value_loss))
                stats["clip_frac"].append(float(((ratio - 1).abs() > s.clip).float().mean()))
                stats["approx_kl"].append(float((old - new).mean()))
    return {k: round(float(np.mean(v)), 6) for k, v in stats.items()}


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else 0.0


def train(job: RLJob, settings: RLSettings, *, train_belief: bool = True) -> dict[str, Any]:
    """PPO of `job`'s models ("policy", and "belief" unless the prompt has no belief round);
    saves each role to `job.out_dirs` (a frozen belief copied byte for byte). Returns the
    per-iteration rows and the critic's value loss per iteration (benchmark.brace.rl documents
    the arguments)."""
    import torch

    from benchmark.brace.joint import Sampler

    check_training_seeds(job.train_seeds, job.splits)
    if len(job.train_seeds) < settings.seeds_per_step:
        raise ValueError(f"rl seeds_per_step={settings.seeds_per_step}: more than the "
                         f"{len(job.train_seeds)} training seeds given")  # fmt: skip
    torch.manual_seed(job.seed)
    rng = np.random.default_rng(job.seed)
    trained_roles = {"policy"} | (
        {"belief"} if train_belief and "belief" in job.model_dirs else set()
    )
    loaded = {
        role: tokens.load_for_rl(
            d, dtype=settings.dtype, lora_rank=settings.lora_rank, lora_alpha=settings.lora_alpha,
            gradient_checkpointing=settings.gradient_checkpointing, train=role in trained_roles,
        )
        for role, d in job.model_dirs.items()
    }  # fmt: skip
    learners = {
        r: Learner(*loaded[r], settings, role=r,
                   reference=reference_for(settings, job.model_dirs[r]) if r == "policy" else None)
        for r in trained_roles
    }  # fmt: skip
    sampler = Sampler(loaded, settings.temperature, seed=job.seed)
    stages = ["policy"] * settings.policy_iterations + ["joint"] * settings.iterations
    history, pool = [], [int(s) for s in job.train_seeds]
    value_loss: dict[str, list[float | None]] = {r: [] for r in sorted(trained_roles)}
    for it, stage in enumerate(stages):
        t0 = time.perf_counter()
        seeds = [int(s) for s in rng.choice(pool, size=settings.seeds_per_step, replace=False)]
        groups = rollout_batch(job.task, job.prompt, sampler, seeds, settings.group,
                               gate=job.gate, policy=job.policy)  # fmt: skip
        roles = ["policy"] + (["belief"] if stage == "joint" and "belief" in learners else [])
        trajs, raw = trajectories(groups, roles, job.weights)
        losses = {}
        for role in roles:  # the belief after the policy, both on this batch
            mine = [t for t in trajs if t.role == role]
            scored = learners[role].score(mine)
            losses[role] = {**learners[role].update(mine, seed=job.seed + it),
                            "sampling_gap": sampling_gap(mine), **scored}  # fmt: skip
        for role in value_loss:
            value_loss[role].append(losses.get(role, {}).get("value_loss"))
        row = {
            "iteration": it, "stage": stage, "seeds": seeds, "r_env": _mean(raw["env"]),
            "r_belief": _mean(raw["belief"]), "format": _mean(raw["gate"]),
            "correctness": _mean(raw["correctness"]), "updates": len(raw["belief"]),
            "context_tokens": _mean(raw["context"]), "loss": losses,
            "value_loss": {r: v[-1] for r, v in value_loss.items()},
            "seconds": round(time.perf_counter() - t0, 1),
        }  # fmt: skip
        history.append(row)
        job.log(row)
    for role, d in job.out_dirs.items():
        save_role(role, loaded[role], learners.get(role), Path(job.model_dirs[role]), Path(d))
    return {"algorithm": "ppo", "settings": settings.as_dict(), "history": history,
            "value_loss": value_loss, "trained_roles": sorted(trained_roles)}  # fmt: skip


def reference_for(settings: RLSettings, directory: str | Path) -> Any:
    """The policy's KL reference (None without the penalty): with LoRA its own model with the
    adapters off (ADAPTERS, no second copy), else a frozen copy of the model it starts from
    (one more set of weights in memory)."""
    if not settings.kl_coef:
        return None
    if settings.lora_rank > 0:
        return ADAPTERS
    return tokens.load_for_rl(directory, dtype=settings.dtype, train=False)[0]


def save_role(role: str, loaded: tuple[Any, Any], learner: Learner | None, source: Path,
              out: Path) -> None:  # fmt: skip
    """A trained role as a plain model folder (LoRA merged) with its value head; a frozen one
    copied from `source` byte for byte (without its folder's completion record)."""
    if learner is None:
        shutil.copytree(source, out, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("complete.json"))  # fmt: skip
        return
    from safetensors.torch import save_file

    model = tokens.plain(loaded[0])
    lm.save(model, loaded[1], out)
    save_file({k: v.detach().cpu().contiguous() for k, v in learner.head.state_dict().items()},
              str(out / VALUE_HEAD))  # fmt: skip
