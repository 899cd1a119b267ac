"""Prompt tools.

  python -m benchmark.prompts show env=fourrooms prompt=stateful seed=100 step=5
      [rationale=true] [autopilot=FORWARD] [policy=expert|random] [HYDRA OVERRIDES]
  python -m benchmark.prompts stats [seeds=3] [steps=40]
  python -m benchmark.prompts golden        # rewrite tests/golden's variant prompts (`make golden`: all)

`show` prints the exact chat messages at step K of episode `seed`, reached by consulting at every
step and executing the expert's actions (policy=expert, default) or seeded random actions
(policy=random); see benchmark.prompts.showcase. Any other key=value is a Hydra override of the
composed config, as `python -m benchmark` takes it (e.g. protocol=suite, prompt.planner_hint=none).
`stats` finds the tiny model's tokenizer under the results root (paths.models: BENCHMARK_ROOT)."""

from __future__ import annotations

import sys

from benchmark.prompts import showcase

USAGE = __doc__ or ""


def _kv(args: list[str]) -> dict[str, str]:
    out = {}
    for a in args:
        if "=" not in a:
            raise SystemExit(f"expected key=value, got {a!r}\n{USAGE}")
        k, v = a.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _bool(v: str) -> bool:
    if v.lower() in ("1", "true", "yes"):
        return True
    if v.lower() in ("0", "false", "no"):
        return False
    raise SystemExit(f"expected true/false, got {v!r}")


def cmd_show(kw: dict[str, str], overrides: tuple[str, ...] = ()) -> None:
    from hydra.errors import HydraException

    try:
        showcase.compose(kw.get("env", "fourrooms"), kw.get("prompt", "stateful"), overrides)
    except HydraException as exc:  # before the episode is driven
        raise SystemExit(
            f"show: {exc}\nshow's own keys: {sorted(KEYS['show'])}; any other key=value is a "
            "Hydra override of the config"
        ) from None
    print(
        showcase.show(
            kw.get("env", "fourrooms"),
            kw.get("prompt", "stateful"),
            seed=int(kw.get("seed", 100)),
            step=int(kw.get("step", 5)),
            rationale=_bool(kw.get("rationale", "false")),
            autopilot=kw.get("autopilot"),
            policy=kw.get("policy", "expert"),
            composed=True,
            overrides=overrides,
        ),
        end="",
    )


def cmd_stats(kw: dict[str, str]) -> None:
    from benchmark.envs import available_envs

    n_seeds, steps = int(kw.get("seeds", 3)), int(kw.get("steps", 40))
    seeds = list(range(100, 100 + n_seeds))
    counters = {"qwen3.5": showcase.qwen_counter()}
    models = showcase.models_dir()
    tiny = showcase.tiny_counter(models)
    if tiny is not None:
        counters["tiny"] = tiny
    names = list(counters)
    print(
        f"# prompt tokens per consultation (all rounds), random-walk episodes, seeds {seeds}, "
        f"steps 0..{steps}; tiny tokenizer {'found' if tiny else 'not built'} in {models}"
    )
    head = "| env | variant | " + " | ".join(f"{n} mean | {n} max" for n in names) + " |"
    print(head)
    print("|" + "---|" * (2 + 2 * len(names)))
    rows = [(p, False) for p in showcase.VARIANTS] + [("stateful", True), ("belief", True)]
    for env in available_envs():
        for prompt, rationale in rows:
            if not showcase.supported(env, prompt):
                continue
            st = showcase.length_stats(env, prompt, rationale, seeds, steps, counters)
            label = prompt + ("+rationale" if rationale else "")
            cells = " | ".join(f"{st[n][0]:.0f} | {st[n][1]}" for n in names)
            print(f"| {env} | {label} | {cells} |", flush=True)
    print("\n# fourrooms growth (real Qwen3.5 tokens per consultation, one random-walk episode)")
    print("| variant | " + " | ".join(f"step {s}" for s in (0, 25, 50, 100)) + " |")
    print("|---|---|---|---|---|")
    for prompt, rationale in (("stateful", False), ("stateful", True), ("belief", False)):
        g = showcase.growth(prompt, rationale=rationale)
        label = prompt + ("+rationale" if rationale else "")
        print(f"| {label} | " + " | ".join(str(g[s]) for s in sorted(g)) + " |")


def cmd_golden() -> None:
    for env, prompt, rationale in showcase.golden_cases():
        path = showcase.golden_path(env, prompt, rationale)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(showcase.show(env, prompt, rationale=rationale))
    print(f"wrote {len(showcase.golden_cases())} files under {showcase.GOLDEN_DIR}")


# command -> the keys it takes
KEYS = {
    "show": {"env", "prompt", "seed", "step", "rationale", "autopilot", "policy"},
    "stats": {"seeds", "steps"},
    "golden": set(),
}


def parse(argv: list[str]) -> tuple[str, dict[str, str], tuple[str, ...]]:
    """(command, its own key=value arguments, Hydra overrides: `show` only); SystemExit naming
    the bad command or key."""
    cmd = argv[0]
    if cmd not in KEYS:
        raise SystemExit(f"unknown command {cmd!r}; allowed: {', '.join(KEYS)}\n{USAGE}")
    own = [a for a in argv[1:] if a.split("=", 1)[0].strip() in KEYS[cmd]]
    overrides = tuple(a for a in argv[1:] if a not in own)
    kw = _kv(own)
    if overrides and cmd != "show":
        raise SystemExit(f"unknown keys {list(overrides)}; allowed: {sorted(KEYS[cmd])}")
    return cmd, kw, overrides


def main(argv: list[str]) -> None:
    if not argv or argv[0] == "help" or {"-h", "--help"} & set(argv):
        print(USAGE)
        return
    cmd, kw, overrides = parse(argv)
    if cmd == "show":
        cmd_show(kw, overrides)
    elif cmd == "stats":
        cmd_stats(kw)
    else:
        cmd_golden()


if __name__ == "__main__":
    main(sys.argv[1:])
