"""Agreement between two ways of answering the same queries (padded vs by_length, one prompt at a
time, cuDNN on or off, fast kernels vs reference ones), with a stated tolerance per dtype.

Why not equality: in bf16 a change of batch shape changes the kernels and their rounding (max
|delta log-prob| 2.7e-3 at toy widths, 0.29 measured by others on a raw random model), and random
weights have small gaps between their top tokens, so "the same answers" would fail without a
bug. A bug (a NaN row, a wrong position, a pad key attended) moves log-probabilities by far more
than rounding does. So bf16 is checked against a tolerance: every score finite, the largest
|delta log-prob| of any valid action below `max_abs_dlogp`, and the share of identical answers
(greedy text, or the chosen action) at least `min_agreement`; fp32 keeps the exact check (the
same answers, log-probs equal up to float rounding). Log-probabilities are those of
`Answer.choices` (each valid action's probability normalized over the valid actions: what choice
scoring decides by)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from benchmark.bench.common import Check


@dataclass(frozen=True)
class Tolerance:
    dtype: str
    max_abs_dlogp: float  # largest |delta log-prob| of any valid action
    min_agreement: float  # share of identical answers


BF16 = Tolerance("bfloat16", max_abs_dlogp=0.05, min_agreement=0.95)
FP32 = Tolerance("float32", max_abs_dlogp=1e-4, min_agreement=1.0)  # the exact check
KERNELS_FP32 = Tolerance("float32", max_abs_dlogp=1e-3, min_agreement=1.0)  # fast vs reference


def tolerance(dtype: str) -> Tolerance:
    """The stated tolerance of a dtype name (bfloat16, float32); float16 takes bf16's."""
    if dtype == "float32":
        return FP32
    if dtype in ("bfloat16", "float16"):
        return BF16
    raise ValueError(f"no agreement tolerance for dtype {dtype!r}; allowed: bfloat16, float32")


MIN_PROB = 0.01  # |delta log-prob| counts the actions the reference gives at least this


def compare(reference: list[Any], other: list[Any], min_prob: float = MIN_PROB) -> dict[str, Any]:
    """Agreement of two lists of Answers to the same queries: `agreement` (share of identical
    answer texts), `max_abs_dlogp` (over the valid actions of every choice-scored answer that the
    reference gives at least `min_prob`; None when none was choice-scored) and `finite` (every
    score of `other` finite). Why `min_prob`: bf16's error in a log-probability grows with its
    size (a log-prob of -15 moved by 0.07 between batch shapes of the tiny hybrid on a CPU, no
    bug), and an action that unlikely decides nothing."""
    if len(reference) != len(other) or not reference:
        raise ValueError(
            f"compare needs two equal, non-empty lists, got {len(reference)}, {len(other)}"
        )
    same = sum(a.text == b.text for a, b in zip(reference, other, strict=True))
    deltas: list[float] = []
    finite = True
    for a, b in zip(reference, other, strict=True):
        if not b.choices:
            continue
        for action, p in b.choices.items():
            finite &= math.isfinite(p)
            if not a.choices[action] < min_prob:  # NaN counts
                deltas.append(_dlogp(a.choices[action], p))
    return {
        "answers": len(reference),
        "agreement": same / len(reference),
        "max_abs_dlogp": max(deltas) if deltas else None,
        "finite": bool(finite),
    }


def choice_queries(queries: list) -> list:
    """The same queries answered by choice scoring (slm.decoding.mode=choices)."""
    import dataclasses

    return [
        dataclasses.replace(q, decoding=dataclasses.replace(q.decoding, mode="choices"))
        for q in queries
    ]


def batching_agreement(consultant: Any, queries: list) -> dict[str, Any]:
    """Per kind ("lean": greedy generation, "choices": choice scoring): the answers of the batch
    padded, and of each query alone, compared with by_length's (`compare`); untimed. The
    consultant's own `batching` is restored afterwards."""
    before = consultant.batching
    out: dict[str, Any] = {}
    try:
        for kind, batch in (("lean", queries), ("choices", choice_queries(queries))):
            consultant.batching = "by_length"
            reference = consultant.answer(batch)
            alone = [a for q in batch for a in consultant.answer([q])]
            consultant.batching = "padded"
            padded = consultant.answer(batch)
            out[kind] = {
                "padded": compare(reference, padded),
                "one_at_a_time": compare(reference, alone),
            }
    finally:
        consultant.batching = before
    return out


def _dlogp(p: float, q: float) -> float:
    """|log p - log q|; 0 when both are 0, inf when one is, NaN when either is NaN."""
    if math.isnan(p) or math.isnan(q):
        return math.nan
    if p == q:
        return 0.0
    if p <= 0.0 or q <= 0.0:
        return math.inf
    return abs(math.log(p) - math.log(q))


def passed(result: dict[str, Any], tol: Tolerance) -> bool:
    """Does a `compare` result hold `tol`? (NaN deltas never do.)"""
    d = result["max_abs_dlogp"]
    return bool(
        result["finite"]
        and result["agreement"] >= tol.min_agreement
        and (d is None or d < tol.max_abs_dlogp)
    )


def checks(section: str, label: str, result: dict[str, Any], tol: Tolerance) -> list[Check]:
    """The table rows of one `compare` result against `tol`: finite, |delta log-prob|, agreement."""
    out = [Check(section, f"{label}: every score finite", float(result["finite"]), "", target=1.0)]
    d = result["max_abs_dlogp"]
    if d is not None:
        value = d if math.isfinite(d) else 1e9  # a NaN or inf delta is a MISS, not a crash
        out.append(
            Check(
                section,
                f"{label}: max |delta log-prob| ({tol.dtype})",
                value,
                "",
                target=tol.max_abs_dlogp,
                cmp="<",
            )
        )
    out.append(
        Check(
            section,
            f"{label}: share of identical answers ({tol.dtype})",
            result["agreement"],
            "",
            target=tol.min_agreement,
        )
    )
    return out


def describe(tol: Tolerance) -> dict[str, Any]:
    return asdict(tol)
