"""The names of a cell's method as the papers write them (PPO, SLM-only <slm>, ASK <slm>, ASK+
<slm>, other prompts by name): one definition for the report's rows, the W&B run's `method` and
the dashboard, so a cell is called the same everywhere."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

SLM_NAMES = {"random": "dice", "oracle": "oracle"}
# prompts named by whether the models were trained on them: prompt -> (the slm label's start
# that names the trained row's models, conf/slm/brace_trained.yaml's roles-<belief>-<policy>;
# the name then; the name otherwise). The summary prompt is MEM1-style on an untrained model,
# Agent-BRACE's Summary-Belief ablation on the models trained to write it.
TRAINED_PROMPT_NAMES = {
    "mem1": ("roles-summary_belief-", "Summary-Belief, trained", "MEM1-style summary, untrained")
}


def slm_label(slm: str | None) -> str:
    return SLM_NAMES.get(slm or "", slm or "?")


def prompt_label(prompt: str | None, rationale: bool | None, slm: str | None = None) -> str:
    name = prompt or "?"
    if name in TRAINED_PROMPT_NAMES:
        start, trained, untrained = TRAINED_PROMPT_NAMES[name]
        name = f"{name}: {trained if (slm or '').startswith(start) else untrained}"
    return f"{name}{'+rationale' if rationale else ''}"


def method_label(c: Any) -> str:
    """The papers' names of a cell with labels `gate`, `slm`, `prompt`, `rationale` and the random
    gate's `p` (a report Cell, or `of_spec`'s), and its PPO `variant` in brackets where set."""
    variant = getattr(c, "variant", None)
    return _method_name(c) + (f" [{variant}]" if variant else "")


def _method_name(c: Any) -> str:
    if c.gate == "never":
        return "PPO"
    if c.gate == "always":
        if c.slm == "random":
            return "Dice (random actions)"
        if c.slm == "oracle":
            return "Oracle"
        base = f"SLM-only {slm_label(c.slm)}"
        if (c.prompt, bool(c.rationale)) != ("stateful", True):
            base += f" ({prompt_label(c.prompt, c.rationale, c.slm)})"
        return base
    if (c.prompt, bool(c.rationale)) == ("basic", False):
        base = f"ASK {slm_label(c.slm)}"
    elif (c.prompt, bool(c.rationale)) == ("stateful", True):
        base = f"ASK+ {slm_label(c.slm)}"
    else:
        base = f"{prompt_label(c.prompt, c.rationale, c.slm)} {slm_label(c.slm)}"
    if c.gate == "random":
        p = f" p={number_text(c.p)}" if is_number(c.p) else ""
        base += f" (random gate{p})"
    elif c.gate not in (None, "entropy"):
        base += f" ({c.gate} gate)"
    return base


def of_spec(spec: Any) -> SimpleNamespace:
    """The labels `method_label` reads, of a `benchmark.cell.CellSpec`."""
    return SimpleNamespace(**spec.labels(), p=spec.gate.args.get("p"))


def number_text(x: Any) -> str:
    return f"{x:g}" if is_number(x) else str(x)


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)
