"""The model card of a policy bundle (its README.md): the YAML metadata the Hugging Face hub
indexes (library, tags, model-index with the test results), then what each policy is, its scores,
how to use it and what it was trained with. Written from the bundle's index (bundle.json) alone,
so an export and a re-export of the same index give the same card."""

from __future__ import annotations

from typing import Any

import yaml


def _fmt(row: dict[str, Any], metric: str) -> str:
    if f"{metric}_mean" not in row:
        return ""
    return (
        f"{row[f'{metric}_mean']:.3f} [{row[f'{metric}_ci95_low']:.2f}, "
        f"{row[f'{metric}_ci95_high']:.2f}]"
    )


def _steps(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)


def card_metadata(index: dict[str, Any]) -> dict[str, Any]:
    """The model card's YAML: what the hub indexes (library, tags, model-index results)."""
    policies = index["policies"]
    tags = ["reinforcement-learning", "deep-reinforcement-learning", "stable-baselines3", "ppo"]
    tags += sorted({p["env_id"] for p in policies})
    meta: dict[str, Any] = {"library_name": "stable-baselines3", "tags": tags}
    found = []
    for p in policies:
        row = p["test"].get(p["headline"])
        if row is None:
            continue
        metrics = [
            {
                "type": "mean_reward",
                "value": round(float(row["reward_mean"]), 3),
                "name": f"mean_reward {p['name']}/{p['headline']}",
                "verified": False,
            }
        ]
        metric = p["metric"]
        if f"{metric}_mean" in row:
            metrics.append(
                {
                    "type": metric,
                    "value": round(float(row[f"{metric}_mean"]), 3),
                    "name": f"{metric} {p['name']}/{p['headline']}",
                    "verified": False,
                }
            )
        found.append(
            {
                "task": {"type": "reinforcement-learning", "name": "reinforcement-learning"},
                "dataset": {"type": p["env_id"], "name": p["env_label"]},
                "metrics": metrics,
            }
        )
    if found:
        meta["model-index"] = [{"name": index["title"], "results": found}]
    return meta


def model_card(index: dict[str, Any]) -> str:
    """README.md: metadata, then what each policy is, its scores and how to use it."""
    policies = index["policies"]
    first = policies[0] if policies else {"env": "<env>", "seed": 0, "name": "<policy>"}
    lines = [
        "---",
        yaml.safe_dump(card_metadata(index), sort_keys=False).rstrip(),
        "---",
        "",
        f"# {index['title']}: PPO policies (MC-dropout actor-critic)",
        "",
        "PPO policies trained by the ASK benchmark suite (Stable-Baselines3 PPO with dropout after "
        "every hidden activation of the actor and critic MLPs). Every ASK / ASK+ number is "
        "relative to a PPO policy: these are the exact policies behind a results table, so that "
        "others can evaluate against the same ones.",
        "",
        "| policy | env | seed | steps | checkpoints | test reward | test success / accuracy |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in policies:
        row = p["test"].get(p["headline"]) or {}
        split = f" ({row['split']}, {row['n_episodes']} ep.)" if row else ""
        lines.append(
            f"| `{p['name']}` ({p['headline']}) | {p['env_label']} | {p['seed']} "
            f"| {_steps(p['total_timesteps'])} | {', '.join(p['checkpoints'])} "
            f"| {_fmt(row, 'reward') or 'not evaluated'}{split} | {_fmt(row, p['metric'])} |"
        )
    lines += [
        "",
        "Test metrics: deterministic actions, dropout off, on the suite's test seeds; 95% "
        "bootstrap CIs in brackets (each policy's `results.json` has every evaluation found, per "
        "checkpoint).",
        "",
        "## Use",
        "",
        "With the ASK benchmark suite (the `benchmark` package), from a copy of this directory "
        "or from the hub (read from the Hugging Face cache first, pinned by revision):",
        "",
        "```bash",
        f"python -m benchmark env={first['env']} policy.seed={first['seed']} "
        "policy.path=<this directory> gate=never",
        f"python -m benchmark env={first['env']} policy.seed={first['seed']} "
        "policy.source=<user>/<repo> policy.revision=<commit> gate=never",
        "```",
        "",
        "In a bundle the policy is picked by `env` and `policy.seed` (the one of exactly the "
        "job's recipe first); `policy.path` may also name one policy directory. "
        "`policy.checkpoint` picks `best`, `final` or a reward-threshold checkpoint `rNNN` (or "
        "`tK`) inside it, as with the suite's own cache. Each checkpoint is a `.safetensors` "
        "file of the policy's tensors, and `policy.json` beside them says what rebuilds the "
        "policy (the suite's policy class by name, its kwargs, the observation and action "
        "spaces); nothing in them is a pickle, and loading runs no code from the files:",
        "",
        "```python",
        "from huggingface_hub import hf_hub_download",
        "from benchmark.policy import load",
        f'hf_hub_download("<user>/<repo>", "{first["name"]}/policy.json")  # read beside it',
        f'model = load(hf_hub_download("<user>/<repo>", "{first["name"]}/best.safetensors"))',
        "```",
        "",
        "## Files",
        "",
        "Each `<env>-s<seed>-<hash>/` holds the weights (`best` = best validation reward, "
        "`final` = last weights, `rNNN` = first to reach validation reward NNN/100) as "
        "`.safetensors`, `policy.json`, their `.json` metas, the validation learning curve "
        "`curve.csv`, the resolved training config with its hash `config.json`, the test "
        "metrics `results.json`, the machine and package versions it was trained with "
        "`system.json`, and `COMPLETE` (SHA-256 of every file there, checked on every load). "
        "`bundle.json` indexes them, with each checkpoint's policy identity (the suite's cells "
        "name the policy by it); the top `COMPLETE` holds the SHA-256 of `bundle.json`, this "
        "card and each policy's `COMPLETE`, so an edited or corrupt file is refused, by name.",
        "",
        "## Reproducibility",
        "",
        "Training is deterministic on one machine with the same package versions: the same "
        "config gives bit-identical weights and byte-identical evaluation files. Across machines "
        "it is not: torch picks its CPU kernels by instruction set (AVX-512, AVX2, ...) and their "
        "floating-point rounding differs, which PPO amplifies over a long training, so a "
        "retrained policy is statistically equal over training seeds, not identical. Evaluating "
        "these weights evaluates the very same policies (evaluation is far less sensitive: the "
        "suite's evaluation files came out byte-identical under every CPU kernel setting tried).",
        "",
        "| policy | trained with |",
        "| --- | --- |",
    ]
    for p in policies:
        tw = p.get("trained_with") or {}
        pk = tw.get("packages") or {}
        versions = ", ".join(f"{k} {v}" for k, v in pk.items() if v)
        what = f"{tw.get('cpu') or 'unknown CPU'} ({tw.get('torch_cpu_capability') or '?'})"
        lines.append(f"| `{p['name']}` | {what}; {versions or 'versions not recorded'} |")
    if index.get("command"):
        lines += ["", f"Exported with `{index['command']}`."]
    return "\n".join(lines) + "\n"
