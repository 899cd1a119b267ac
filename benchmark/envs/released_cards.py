"""The released code's HigherLower prompt (higher_lower/env.py HigherLowerEnv.build_prompt;
protocol=official), from one of our episodes: its card counts (the equal-rank count leaves out
the current card a second time, as its `cards_equal` does), its count-derived hints and its
decision history. Reproduced, not improved, so the official protocol sends what the released
code sends (tests/test_official_parity.py)."""

from __future__ import annotations

from benchmark.envs.base import CardView, Memory
from benchmark.envs.family import ReleasedText
from benchmark.envs.higherlower import rank_name

TOKENS = (("HIGHER", "HIGHER"), ("LOWER", "LOWER"), ("HIGH", "HIGHER"), ("LOW", "LOWER"))
LEVELS = ("basic", "enriched", "stateful")  # its --prompt-style choices (no stateful_min)
NO_TEXT = "- Do NOT explain.\n- Do NOT add text or markdown.\n"
TWO_LINES = (
    "- First line: Reason: <one short line, max 12 words>.\n"
    "- Second line: Action: <HIGHER|LOWER>.\n"
    "- No other text or markdown.\n"
)
COUNT_RULES = (
    "- Choose HIGHER if more cards remaining are strictly above the current card.\n"
    "- Choose LOWER if more cards remaining are strictly below the current card.\n"
    "- If counts tie, either action is symmetric; use P(push) and recent luck as tie-breakers.\n"
)
TOKEN_ANSWER = "HIGHER or LOWER\n\nAction: "


def counts(view: CardView) -> tuple[int, int, int]:
    """(higher, lower, equal) remaining, as the released env counts them."""
    return view.higher, view.lower, max(0, view.remaining[view.card] - 1)


def hints(above: int, below: int, equal: int) -> str:
    denom = above + below
    if denom <= 0:
        p_hi = p_lo = 0.5
        margin, advice = 0, "EITHER"
    else:
        p_hi, p_lo, margin = above / denom, below / denom, abs(above - below)
        advice = "HIGHER" if above > below else "LOWER" if below > above else "EITHER"
    total = above + below + max(equal, 0)
    p_push = equal / total if total > 0 else 0.0
    return (
        "Count-derived hints (remaining unknown cards; current rank excluded from higher/lower "
        "pools):\n"
        f"P(next strictly higher | not push) ≈ {p_hi:.4f}\n"
        f"P(next strictly lower  | not push) ≈ {p_lo:.4f}\n"
        f"P(push / same rank) among remaining mass ≈ {p_push:.4f} (equal ranks left: {equal})\n"
        f"Recommended action from counts: {advice}\n"
        f"Margin |higher − lower|: {margin}\n"
    )


def history_block(memory: Memory, n: int) -> str:
    if not memory.decisions:
        return "Recent decisions: (none yet — this is the first guess.)\n"
    lines = [
        f"  On {rank_name(d['card'])} chose {d['action']} → {d['outcome']} "
        f"(next card {rank_name(d['next_card'])})"
        for d in memory.decisions[-n:]
    ]
    streak = f"Win streak: {memory.win_streak}  |  Loss streak: {memory.loss_streak}"
    return f"Recent decisions (last up to {n}):\n" + "\n".join(lines) + f"\n{streak}\n"


def cards_prompt(
    view: CardView,
    memory: Memory,
    autopilot: str | None,
    level: str,
    rationale: bool,
    history: int = 8,
) -> str:
    above, below, equal = counts(view)
    ppo = f"\nAutopilot suggests: {autopilot}" if autopilot is not None else ""
    rules_tail = (
        "- If the autopilot suggestion is consistent with the card counts, follow it.\n"
        if ppo
        else ""
    )
    shaped = rationale and level != "basic"  # the basic style ignores the rationale format
    rules = (TWO_LINES if shaped else NO_TEXT) + COUNT_RULES + rules_tail
    answer = "Reason: <short>\nAction: HIGHER or LOWER\n\n" if shaped else TOKEN_ANSWER
    memory_text = ""
    if level == "stateful":
        memory_text = (
            f"Episode decision index: {view.decision} (after this choice, {len(view.seen) - 1} "
            "cards have been seen including the opening card).\n" + history_block(memory, history)
        )
    state = (
        f"STATE:\nCurrent card: {view.card_name}\nCards remaining strictly higher: {above}\n"
        f"Cards remaining strictly lower: {below}\nCards remaining equal rank: {equal}{ppo}\n"
    )
    enriched = hints(above, below, equal) if level in ("enriched", "stateful") else ""
    return (
        "You are a card game decision policy (Higher / Lower vs the next card from a finite "
        "shoe).\nYour task is to choose exactly ONE action.\n\nVALID ACTIONS:\nHIGHER\nLOWER\n\n"
        f"RULES:\n{rules}\n{memory_text}{state}{enriched}\n"
        "Examples:\nCard=A, many more ranks above → HIGHER\n"
        "Card=K, many more ranks below → LOWER\n"
        "Counts tie with pushes possible → pick using push probability and recent streaks\n\n"
        f"OUTPUT FORMAT (MANDATORY):\n{answer}"
    )


def cards_text() -> ReleasedText:
    """higher_lower/eval.py: DECODING max_tokens 10, 32 with rationale; HIGHER on an invalid
    answer; no state beyond the episode's own memory."""

    def prompt(episode, _state, level, rationale, autopilot, _radius=5, history=8):
        return cards_prompt(episode.view(), episode.memory, autopilot, level, rationale, history)

    return ReleasedText(LEVELS, TOKENS, "HIGHER", 10, 32, lambda episode: None, prompt)
