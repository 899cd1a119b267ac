"""The words every layer shares, below the environments: prompt levels, what each action name
means, thinking tags in an answer, and the belief-claim vocabulary (certainty labels, what each
label stands for, claim lines and the verdicts a claim can get). Environments, consultants,
prompts and Agent-BRACE all speak it; it imports nothing from the suite."""

from __future__ import annotations

import re
from collections.abc import Sequence

LEVELS = ("basic", "enriched", "stateful_min", "stateful")

ACTION_MEANING = {
    "TURN_LEFT": "rotate 90 degrees counter-clockwise in place",
    "TURN_RIGHT": "rotate 90 degrees clockwise in place",
    "FORWARD": "move one cell in the facing direction (fails if blocked)",
    "PICKUP": "pick up the object directly ahead",
    "DROP": "drop the carried object onto the cell ahead",
    "TOGGLE": "open/close/unlock the door directly ahead",
    "DONE": "declare the task finished",
    "HIGHER": "bet the next card ranks above the current one",
    "LOWER": "bet the next card ranks below the current one",
}

# ----------------------------------------------------------------------------- answers
THINK_START, THINK_END = "<think>", "</think>"
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_THINK_LITERAL = re.compile(r"<think>(.*?)(</think>|$)", re.DOTALL)  # one pass, open or closed


def strip_thinking(text: str, *, literal: bool = False) -> tuple[str, str]:
    """Split an answer into (visible text, unterminated thinking text).

    Closed <think> blocks are dropped; text before a lone </think> is thinking; an unterminated
    <think> makes everything after it thinking (returned second, searched for markers only).

    One function, two readings that differ only on unusual text (tests/prompts/test_parse.py pins
    where). The parser's (default) matches the tags in any case, replaces a closed block by a
    space, then cuts at the last </think> left. `literal=True` is the backends' cleanup of
    generated text (consultants.hf.strip_thinking): tags only as tokenizers write them; a
    </think> before any <think> (the chat template opened the block in the prompt) cuts first,
    then one pass drops closed blocks and the unterminated tail without a space."""
    if literal:
        end = text.find(THINK_END)
        if end >= 0 and not 0 <= text.find(THINK_START) < end:
            text = text[end + len(THINK_END) :]
        unterminated: list[str] = []

        def drop(m: re.Match[str]) -> str:
            if not m.group(2):
                unterminated.append(m.group(1))
            return ""

        return _THINK_LITERAL.sub(drop, text), "".join(unterminated)
    text = _THINK_BLOCK.sub(" ", text)
    # indices into the lower-cased copy slice `text` (off by one after an 'İ', whose lower case
    # is two characters): kept as it is, since the parser's answers depend on it
    lower = text.lower()
    if THINK_END in lower:
        text = text[lower.rindex(THINK_END) + len(THINK_END) :]
        lower = text.lower()
    if THINK_START in lower:
        i = lower.index(THINK_START)
        return text[:i], text[i + len(THINK_START) :]
    return text, ""


# ----------------------------------------------------------------------------- belief claims
# the most bullets a belief update holds before R_belief's format score penalises its length
# (the authors' released code: 20); a teacher's belief never states more
BELIEF_MAX_BULLETS = 20
LABELS = (
    "confirmed",
    "almost certain",
    "probable",
    "possible",
    "unlikely",
    "doubtful",
    "unknown",
)

# the probability a certainty label stands for ("unknown": no evidence, no probability)
LABEL_P = {
    "confirmed": 1.0,
    "almost certain": 0.9,
    "probable": 0.7,
    "possible": 0.5,
    "unlikely": 0.3,
    "doubtful": 0.1,
}
VERDICT_SCORE = {"correct": 1.0, "partial": 0.5, "incorrect": 0.0}
# the certainty scales a belief may use: the paper's 7 levels, or its binary-label ablation
# (certain / unknown: `confirmed` for what is held as certain, `unknown` for everything else)
SCALES = ("seven", "binary")
BINARY_LABELS = ("confirmed", "unknown")


def binary_label(label: str) -> str:
    """A label read on the binary scale: held as certain (confirmed, almost certain) ->
    `confirmed`; anything less sure (probable ... doubtful, unknown) -> `unknown`."""
    return "confirmed" if LABEL_P.get(label, 0.0) >= 0.9 else "unknown"


def on_scale(claims: Sequence[str], scale: str) -> list[str]:
    """Parsed claims ('- <claim> [<label>]') with their labels read on `scale` (seven: as they
    are; binary: `binary_label`)."""
    if scale not in SCALES:
        raise ValueError(f"certainty scale {scale!r}: allowed {', '.join(SCALES)}")
    if scale == "seven":
        return list(claims)
    out = []
    for c in claims:
        text, label = split_claim(c)
        out.append(f"- {text} [{binary_label(label)}]")
    return out


def label_for(p: float) -> str:
    """The certainty label of a probability (the nearest level of LABEL_P, ties to the surer)."""
    return min(LABEL_P, key=lambda lb: (abs(LABEL_P[lb] - p), -abs(LABEL_P[lb] - 0.5)))


_CLAIM = re.compile(r"^-\s*(.*?)\s*\[([a-z ]+)\]$")
POS = r"\(\s*(\d+)\s*,\s*(\d+)\s*\)"


def fact_verdict(true: bool, label: str, observable: bool = True) -> str:
    """Verdict on a deterministic fact: a true fact is correct when held as near-sure, partial
    when held as a coin toss (or unknown although observable), incorrect when doubted; mirrored
    for a false fact."""
    if label == "unknown":
        return "partial" if observable else ("correct" if not true else "partial")
    p = LABEL_P[label]
    if true:
        return "correct" if p >= 0.9 else "partial" if p >= 0.5 else "incorrect"
    return "correct" if p <= 0.3 else "partial" if p == 0.5 else "incorrect"


def prob_verdict(p_true: float, label: str) -> str:
    """Verdict on a claim whose truth is a probability: correct at the calibrated label, partial
    one level away, else incorrect."""
    if label == "unknown":
        return "partial"
    levels = list(LABEL_P)
    gap = abs(levels.index(label) - levels.index(label_for(p_true)))
    return "correct" if gap == 0 else "partial" if gap == 1 else "incorrect"


def split_claim(claim: str) -> tuple[str, str]:
    """(claim text, label) of one '- <claim> [<label>]' line of parse_belief."""
    m = _CLAIM.match(claim.strip())
    if not m or m[2] not in LABELS:
        raise ValueError(f"not a parsed belief claim: {claim!r} (want '- <claim> [<label>]')")
    return m[1], m[2]


def released_answer(text: str) -> str:
    """The released code's answer text (src/ask/slm/model.py, protocol=official): `text`
    stripped and, where a `</think>` appears, only what follows the first one, stripped."""
    text = text.strip()
    return text.split(THINK_END, 1)[-1].strip() if THINK_END in text else text
