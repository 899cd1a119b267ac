"""Agent-BRACE's rewards, computed by program against the environment's true state instead of an
LLM judge (the suite knows the true grid, inventory, doors and card history exactly).

R_env (policy model)  = 1 on success, 0 on failure.
R_belief (belief model) = format gate x (w_c correctness + w_t tracking + w_d diversity
                                         + w_s gamma^t x success)
- format gate: the update has a <belief_state> block and every non-empty line in it is a valid
  claim of the suite's belief format (benchmark.prompts.belief.parse_belief), at most max_claims;
- correctness: each (subject, predicate, certainty) claim is verified against the true state:
  correct (1), partially correct (0.5: the fact is right but its certainty label is miscalibrated),
  incorrect (0) or unverifiable (left out); the mean over verifiable claims (0 if none);
- tracking: of the facts the new observation changed (the teacher's claims at t that b(t-1) did
  not already hold), the fraction b(t) captures correctly, less the fraction of b(t)'s claims that
  are stale (carried over from b(t-1) unchanged and now false);
- diversity: normalized Shannon entropy of the certainty labels over the 7 levels;
- gamma^t x success: the episode's success, discounted by the step of the update."""

from __future__ import annotations

import copy
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmark.envs import navfeatures as nf
from benchmark.envs.base import CardView, Memory, NavView
from benchmark.prompts.belief import _BELIEF_BLOCK, LABELS, parse_belief
from benchmark.prompts.parse import strip_thinking

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


def label_for(p: float) -> str:
    """The certainty label of a probability (the nearest level of LABEL_P, ties to the surer)."""
    return min(LABEL_P, key=lambda lb: (abs(LABEL_P[lb] - p), -abs(LABEL_P[lb] - 0.5)))


@dataclass
class Truth:
    """The true state at one step, frozen (the episode moves on): the simulator's view, a copy of
    the episodic memory (what was observed so far) and the action names."""

    view: NavView | CardView
    memory: Memory
    action_names: tuple[str, ...]
    step: int

    def visible(self) -> set[tuple[int, int]]:
        """World cells in the agent's view now (navigation)."""
        return set(self.view.ego_to_world.values()) if isinstance(self.view, NavView) else set()

    def true_cells(self, char: str) -> list[tuple[int, int]]:
        """World positions of `char` on the true grid (navigation); the goal under the agent
        (the grid shows the agent there) is at the agent's position."""
        assert isinstance(self.view, NavView)
        cells = [
            (x, y)
            for y, row in enumerate(self.view.full_grid)
            for x, ch in enumerate(row)
            if ch == char
        ]
        return cells if cells or char != "G" else [tuple(self.view.pos)]


def snapshot(episode: Any) -> Truth:
    """The episode's true state now, copied."""
    return Truth(
        copy.deepcopy(episode.view()),
        copy.deepcopy(episode.memory),
        tuple(episode.action_names),
        int(episode.steps),
    )


# ----------------------------------------------------------------------------- verifiers
@dataclass(frozen=True)
class Verdict:
    subject: str
    predicate: str
    label: str
    verdict: str  # correct | partial | incorrect | unverifiable


_CLAIM = re.compile(r"^-\s*(.*?)\s*\[([a-z ]+)\]$")
_POS = r"\(\s*(\d+)\s*,\s*(\d+)\s*\)"


def _fact(true: bool, label: str, observable: bool = True) -> str:
    """Verdict on a deterministic fact: a true fact is correct when held as near-sure, partial
    when held as a coin toss (or unknown although observable), incorrect when doubted; mirrored
    for a false fact."""
    if label == "unknown":
        return "partial" if observable else ("correct" if not true else "partial")
    p = LABEL_P[label]
    if true:
        return "correct" if p >= 0.9 else "partial" if p >= 0.5 else "incorrect"
    return "correct" if p <= 0.3 else "partial" if p == 0.5 else "incorrect"


def _prob(p_true: float, label: str) -> str:
    """Verdict on a claim whose truth is a probability: correct at the calibrated label, partial
    one level away, else incorrect."""
    if label == "unknown":
        return "partial"
    levels = list(LABEL_P)
    gap = abs(levels.index(label) - levels.index(label_for(p_true)))
    return "correct" if gap == 0 else "partial" if gap == 1 else "incorrect"


Rule = tuple[str, re.Pattern[str], Callable[[re.Match[str], Truth, str], str | None]]


def _nav_rules() -> list[Rule]:
    def pos(m, t, lb):
        return _fact((int(m[1]), int(m[2])) == tuple(t.view.pos), lb)

    def facing(m, t, lb):
        return _fact(m[1].upper() == t.view.facing, lb)

    def ahead(m, t, lb):
        word = nf.CELL_WORDS.get(t.view.front, t.view.front)
        return _fact(m[1].strip().lower() == str(word).lower(), lb)

    def goal_at(m, t, lb):
        seen = t.memory.goal_pos is not None or t.view.goal_pos is not None
        return _fact((int(m[1]), int(m[2])) in t.true_cells("G"), lb, observable=seen)

    def goal_unknown(m, t, lb):
        seen = t.memory.goal_pos is not None or t.view.goal_pos is not None
        if lb != "unknown":
            return None  # a location claim without a position: nothing to verify
        return "partial" if seen else "correct"

    def seen_cells(m, t, lb):
        return _fact(int(m[1]) == len(t.memory.known_map), lb)

    def carry(m, t, lb):
        said = m[1].strip().lower()
        said = "nothing" if said in ("nothing", "none", "no object") else said
        return _fact(said == (t.view.carrying or "nothing"), lb)

    def key_at(m, t, lb):
        where = (int(m[1]), int(m[2]))
        seen = any(ch == "k" for ch in t.memory.known_map.values()) or bool(t.view.keys)
        return _fact(where in t.true_cells("k"), lb, observable=seen)

    def door(m, t, lb):
        chars = {ch for row in t.view.full_grid for ch in row}
        true_state = next(
            (w for ch, w in (("L", "locked"), ("D", "closed"), ("o", "open")) if ch in chars),
            "unseen",
        )
        said = m[1].strip().lower()
        if said == "unseen":  # a claim about what was observed, not the world
            known = {ch for ch in t.memory.known_map.values()} | {
                ch for row in t.view.ego for ch in row
            }
            return _fact(not (known & set("LDo")), lb)
        return _fact(said == true_state, lb)

    return [
        ("position", re.compile(r"\bi am at " + _POS), pos),
        ("facing", re.compile(r"\bfacing (north|east|south|west)\b"), facing),
        ("cell ahead", re.compile(r"\bthe cell ahead is ([a-z ]+)$"), ahead),
        ("goal", re.compile(r"\bgoal is at " + _POS), goal_at),
        ("goal", re.compile(r"\bgoal location\b"), goal_unknown),
        ("map seen", re.compile(r"^(\d+) cells of the map have been seen"), seen_cells),
        ("inventory", re.compile(r"\bi carry ([a-z ]+)$"), carry),
        ("key", re.compile(r"\ba key lies at " + _POS), key_at),
        ("door", re.compile(r"\bthe door is ([a-z]+)$"), door),
    ]


def _card_rules() -> list[Rule]:
    def card(m, t, lb):
        return _fact(m[1].upper() == t.view.card_name, lb)

    def dealt(m, t, lb):
        return _fact(int(m[1]) == len(t.view.seen) and int(m[2]) == sum(t.view.remaining), lb)

    def higher_lower(m, t, lb):
        return _fact(int(m[1]) == t.view.higher and int(m[2]) == t.view.lower, lb)

    def equal(m, t, lb):
        return _fact(int(m[1]) == t.view.equal, lb)

    def streak(m, t, lb):
        return _fact(int(m[1]) == t.memory.win_streak and int(m[2]) == t.memory.loss_streak, lb)

    def next_card(m, t, lb):
        total = sum(t.view.remaining)
        if not total:
            return None
        side = t.view.higher if m[1] == "higher" else t.view.lower
        return _prob(side / total, lb)

    return [
        ("current card", re.compile(r"\bthe current card is (a|k|q|j|10|[2-9])\b"), card),
        ("deck", re.compile(r"^(\d+) cards have been dealt; (\d+) remain"), dealt),
        (
            "higher/lower",
            re.compile(r"^(\d+) remaining cards rank higher and (\d+) lower"),
            higher_lower,
        ),  # fmt: skip
        ("same rank", re.compile(r"^(\d+) remaining cards share the current rank"), equal),
        ("streaks", re.compile(r"\bwin streak (\d+), loss streak (\d+)"), streak),
        ("next card", re.compile(r"\bthe next card ranks (higher|lower)\b"), next_card),
    ]


NAV_RULES, CARD_RULES = _nav_rules(), _card_rules()


def split_claim(claim: str) -> tuple[str, str]:
    """(claim text, label) of one '- <claim> [<label>]' line of parse_belief."""
    m = _CLAIM.match(claim.strip())
    if not m or m[2] not in LABELS:
        raise ValueError(f"not a parsed belief claim: {claim!r} (want '- <claim> [<label>]')")
    return m[1], m[2]


def verify(claim: str, truth: Truth) -> Verdict:
    """One claim against the true state: its (subject, predicate, certainty) and verdict."""
    text, label = split_claim(claim)
    low = text.lower()
    rules = CARD_RULES if isinstance(truth.view, CardView) else NAV_RULES
    for subject, pattern, rule in rules:
        m = pattern.search(low)
        if m:
            verdict = rule(m, truth, label)
            if verdict is not None:
                return Verdict(subject, text, label, verdict)
    return Verdict("", text, label, "unverifiable")


def correctness(claims: Sequence[str], truth: Truth) -> float:
    """Mean verdict score over the verifiable claims (0 when none is verifiable)."""
    scores = [
        VERDICT_SCORE[v.verdict]
        for v in (verify(c, truth) for c in claims)
        if v.verdict != "unverifiable"
    ]
    return sum(scores) / len(scores) if scores else 0.0


# ----------------------------------------------------------------------------- the others
def format_gate(text: str | None, max_claims: int = 12) -> float:
    """1 when the update is a <belief_state> block whose every non-empty line is a valid claim
    (at most max_claims), else 0: a structurally invalid update earns nothing."""
    if not text:
        return 0.0
    visible, _ = strip_thinking(text)
    m = _BELIEF_BLOCK.search(visible)
    if not m or "</belief_state>" not in visible.lower():
        return 0.0
    lines = [ln for ln in m.group(1).splitlines() if ln.strip()]
    if not lines or len(lines) > max_claims:
        return 0.0
    return float(len(parse_belief(m.group(1), max_claims)) == len(lines))


def diversity(claims: Sequence[str]) -> float:
    """Normalized Shannon entropy of the certainty labels over the 7 levels (0: one label)."""
    counts = Counter(split_claim(c)[1] for c in claims)
    n = sum(counts.values())
    if n == 0:
        return 0.0
    h = -sum(k / n * math.log(k / n) for k in counts.values())
    return max(0.0, h / math.log(len(LABELS)))


def tracking(
    previous: Sequence[str], claims: Sequence[str], truth: Truth, teacher: Sequence[str]
) -> float:
    """How well b(t) takes in what the new observation changed: of the teacher's claims at t
    that b(t-1) did not hold, the fraction whose subject b(t) states correctly; minus the
    fraction of b(t)'s claims carried over unchanged from b(t-1) and now false (stale)."""
    prev = {c.strip() for c in previous}
    new_subjects = {verify(c, truth).subject for c in teacher if c.strip() not in prev} - {""}
    verdicts = [verify(c, truth) for c in claims]
    correct = {v.subject for v in verdicts if v.verdict == "correct"}
    captured = len(new_subjects & correct) / len(new_subjects) if new_subjects else 1.0
    stale = sum(
        c.strip() in prev and v.verdict == "incorrect"
        for c, v in zip(claims, verdicts, strict=True)
    )
    return max(0.0, captured - stale / max(1, len(claims)))


@dataclass(frozen=True)
class BeliefWeights:
    """Weights of R_belief's terms (all 1: the paper sums them; the format is a gate)."""

    correctness: float = 1.0
    tracking: float = 1.0
    diversity: float = 1.0
    success: float = 1.0
    gamma: float = 0.99


DEFAULT_WEIGHTS = BeliefWeights()


@dataclass
class BeliefReward:
    total: float
    gate: float
    correctness: float
    tracking: float
    diversity: float
    success: float
    verdicts: list[Verdict] = field(default_factory=list)


def belief_reward(
    text: str | None,
    previous: Sequence[str],
    truth: Truth,
    teacher: Sequence[str],
    success: float,
    weights: BeliefWeights = DEFAULT_WEIGHTS,
    max_claims: int = 12,
) -> BeliefReward:
    """R_belief of one update `text` (the model's raw answer) at the state `truth`, given the
    previous belief b(t-1), the teacher's claims at t and the episode's success (0/1)."""
    gate = format_gate(text, max_claims)
    claims = parse_belief(text, max_claims) if gate else []
    terms = {
        "correctness": correctness(claims, truth) if claims else 0.0,
        "tracking": tracking(previous, claims, truth, teacher) if claims else 0.0,
        "diversity": diversity(claims) if claims else 0.0,
        "success": weights.gamma**truth.step * float(success),
    }
    total = gate * sum(getattr(weights, k) * v for k, v in terms.items())
    verdicts = [verify(c, truth) for c in claims]
    return BeliefReward(total, gate, verdicts=verdicts, **terms)


def env_reward(outcome: dict[str, float]) -> float:
    """R_env of the policy model: +1 for a success, 0 for a failure (HigherLower: a decision
    counts as a success when won; the episode's accuracy is the mean)."""
    if "success" in outcome:
        return float(outcome["success"] > 0)
    if "accuracy" in outcome:
        return float(outcome["accuracy"])
    raise ValueError(f"an outcome without 'success' or 'accuracy': {sorted(outcome)}")
