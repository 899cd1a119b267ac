"""The one place where consultant text becomes an action (every variant, every backend).

Small models wrap answers in markdown, quotes, thinking blocks, JSON or prose, and use
synonyms ('turn left', 'Move Forward', 'high'). The parser accepts all of that but never
guesses: an explicit answer (a JSON "action" field, an `Action:` line, a line holding only an
action) wins over free text, and free text that names two different actions is invalid (None).

Priority, highest first:
1. a JSON object's "action" field (also truncated JSON, python-dict quoting, code fences);
2. the last `Action: X` marker (also `**Action:** X`, `Final action = X`, inline after a reason);
3. the last line that consists of exactly one action phrase;
4. free text naming exactly one distinct action.
Text inside <think>...</think> is ignored, also an unterminated <think> (then only explicit
markers after it count) and everything before a lone </think> (a chat template that opens the
thinking block in the prompt)."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Sequence

from benchmark.vocabulary import strip_thinking

# Synonyms per canonical action token (lower case, words separated by single spaces). Only the
# synonyms of actions that are valid for the query are active, so 'done' is plain prose in
# FourRooms (which has no DONE action).
SYNONYMS: dict[str, tuple[str, ...]] = {
    "TURN_LEFT": ("turn left", "turnleft", "rotate left", "left turn", "go left", "left"),
    "TURN_RIGHT": ("turn right", "turnright", "rotate right", "right turn", "go right", "right"),
    "FORWARD": (
        "forward",
        "forwards",
        "move forward",
        "moveforward",
        "go forward",
        "step forward",
        "go straight",
        "straight ahead",
        "straight",
        "move ahead",
        "fwd",
    ),
    "PICKUP": ("pickup", "pick up", "pick", "grab", "pick up key", "pick up the key"),
    "DROP": ("drop", "put down"),
    "TOGGLE": ("toggle", "open", "unlock", "open door", "open the door", "unlock door", "use key"),
    "DONE": ("done", "finish", "stop"),
    "HIGHER": ("higher", "high", "greater", "above", "bigger"),
    "LOWER": ("lower", "low", "less", "below", "smaller"),
}

# Part of the identity of every cell that asks a consultant: bump it with any change that parses
# some answer differently (tests/prompts/test_parse.py pins the answers that anchor it).
PARSER_VERSION = 1
_ACTION_MARKER = re.compile(
    r"(?:final\s+)?\baction\b\s*\**\s*[:=]\s*\**\s*(?P<value>[^\n]*)", re.IGNORECASE
)
_MARKUP = re.compile(r"[*`#>\"'“”‘’\[\]{}()|]")  # markdown, quotes, brackets -> spaces
_SEPARATORS = re.compile(r"[_\-/\\]+")
_REPEAT_PREFIX = re.compile(r"^\s*(\d{1,3})\s*(?:x|×|\*|times)\s*(.+)$", re.IGNORECASE)
_REPEAT_SUFFIX = re.compile(r"^(.+?)\s*(?:x|×|\*)\s*(\d{1,3})\s*$", re.IGNORECASE)
_REPEAT_TIMES = re.compile(r"^(.+?)\s*\(?\s*(\d{1,3})\s*times?\s*\)?\s*$", re.IGNORECASE)
_MAX_REPEAT = 200


def _normalize(text: str) -> str:
    text = _MARKUP.sub(" ", text)
    text = _SEPARATORS.sub(" ", text)
    text = re.sub(r"[^\w\s]", " ", text)
    return " ".join(text.lower().split())


def _phrase_table(actions: Sequence[str]) -> list[tuple[str, str]]:
    """(phrase, action) pairs, longest phrase first, for the valid actions only."""
    table: dict[str, str] = {}
    for action in actions:
        for phrase in (_normalize(action), *SYNONYMS.get(action.upper(), ())):
            table.setdefault(phrase, action)
    return sorted(table.items(), key=lambda kv: (-len(kv[0]), kv[0]))


def _mentions(text: str, actions: Sequence[str]) -> list[str]:
    """Actions named in `text`, in order, by non-overlapping longest-phrase matching."""
    norm = _normalize(text)
    if not norm:
        return []
    table = _phrase_table(actions)
    pattern = re.compile(r"\b(" + "|".join(re.escape(p) for p, _ in table) + r")\b")
    lookup = dict(table)
    return [lookup[m.group(1)] for m in pattern.finditer(norm)]


def _single(mentions: Iterable[str]) -> str | None:
    distinct = set(mentions)
    return distinct.pop() if len(distinct) == 1 else None


def _exact_phrase(line: str, actions: Sequence[str]) -> str | None:
    """The action if the whole line is one action phrase (markup and punctuation aside)."""
    norm = _normalize(line)
    for phrase, action in _phrase_table(actions):
        if norm == phrase:
            return action
    return None


def _json_objects(text: str) -> list[dict]:
    """Every JSON (or python-dict) object embedded in text, outermost first."""
    found: list[dict] = []
    decoder = json.JSONDecoder()
    i = text.find("{")
    while i != -1:
        obj = None
        try:
            obj, end = decoder.raw_decode(text, i)
        except ValueError:
            close = text.find("}", i)
            if close != -1:
                try:
                    obj = ast.literal_eval(text[i : close + 1])
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    obj = None
                end = close + 1
            else:
                end = i + 1
        if isinstance(obj, dict):
            found.append(obj)
            i = text.find("{", end)
        else:
            i = text.find("{", i + 1)
    return found


def json_field(text: str, key: str) -> str | None:
    """The string value of `key` in the first JSON object that has it; tolerant of thinking
    blocks, code fences, single quotes and truncation (a cut-off object still yields its
    complete "key": "value" pairs). Non-string values are JSON-encoded."""
    visible, _ = strip_thinking(text)
    for obj in _json_objects(visible):
        for k, v in obj.items():
            if str(k).lower() == key.lower():
                return v if isinstance(v, str) else json.dumps(v)
    m = re.search(rf"[\"']{re.escape(key)}[\"']\s*:\s*[\"']((?:[^\"'\\]|\\.)*)", visible, re.I)
    return m.group(1).strip() if m else None


def _explicit(text: str, actions: Sequence[str]) -> tuple[bool, str | None]:
    """(found an explicit answer, its action). An explicit answer naming two actions -> None."""
    for obj in _json_objects(text):
        for k, v in obj.items():
            if str(k).lower() == "action" and isinstance(v, str):
                return True, _single(_mentions(v, actions))
    m = re.search(r"[\"']action[\"']\s*:\s*[\"']([^\"'\n]*)", text, re.IGNORECASE)
    if m:  # truncated JSON
        return True, _single(_mentions(m.group(1), actions))
    markers = list(_ACTION_MARKER.finditer(text))
    for marker in reversed(markers):
        named = _mentions(marker.group("value"), actions)
        if named:
            return True, _single(named)
    return False, None


def parse_action(text: str | None, actions: Sequence[str]) -> str | None:
    """The single action (one of `actions`, original spelling) the text answers, else None."""
    if not text or not actions:
        return None
    visible, thinking = strip_thinking(text)
    found, action = _explicit(visible, actions)
    if found:
        return action
    lines = [ln for ln in visible.splitlines() if ln.strip()]
    for line in reversed(lines):
        exact = _exact_phrase(line, actions)
        if exact is not None:
            return exact
    named = _mentions(visible, actions)
    if named:
        return _single(named)
    if thinking:  # thinking cut off by the budget: trust only an explicit answer inside it
        found, action = _explicit(thinking, actions)
        return action if found else None
    return None


def _plan_items(items: Iterable[str], actions: Sequence[str]) -> list[str] | None:
    plan: list[str] = []
    for raw in items:
        item = str(raw).strip().strip(",;.")
        if not item:
            continue
        count = 1
        for pat, act_group, n_group in (
            (_REPEAT_PREFIX, 2, 1),
            (_REPEAT_SUFFIX, 1, 2),
            (_REPEAT_TIMES, 1, 2),
        ):
            m = pat.match(item)
            if m and _mentions(m.group(act_group), actions):
                item, count = m.group(act_group), min(int(m.group(n_group)), _MAX_REPEAT)
                break
        named = _mentions(item, actions)
        if not named:
            continue
        if count > 1 and len(set(named)) == 1:
            plan.extend([named[0]] * count)
        else:
            plan.extend(named)
    return plan or None


def parse_plan(text: str | None, actions: Sequence[str]) -> list[str] | None:
    """A whole action sequence (one-shot plan prompts), else None.

    Accepts a JSON object with an "actions"/"plan"/"action" list, a bare JSON list, or a
    comma-, arrow- or line-separated list of action phrases (with repeats such as
    'FORWARD x3', '3 x Move Forward', 'Move Forward (3 times)'). Items that name no action are
    skipped (step numbers, prose); an empty result is None."""
    if not text or not actions:
        return None
    visible, _ = strip_thinking(text)
    for obj in _json_objects(visible):
        for k, v in obj.items():
            if str(k).lower() in ("actions", "plan", "action", "sequence") and isinstance(v, list):
                return _plan_items(v, actions)
    start = visible.find("[")
    if start != -1:
        try:
            arr, _ = json.JSONDecoder().raw_decode(visible, start)
            if isinstance(arr, list):
                return _plan_items(arr, actions)
        except ValueError:
            pass
    marker = re.search(r"\b(?:actions|plan|sequence)\b\s*\**\s*[:=]", visible, re.IGNORECASE)
    body = visible[marker.end() :] if marker else visible
    items = re.split(r"[,;\n]|->|→|=>|\bthen\b|\d+\s*[.)]\s", body)
    return _plan_items(items, actions)


def parse_reason(text: str | None) -> str:
    """The answer's justification: a JSON "reason" field or a `Reason:` line ('' if none)."""
    if not text:
        return ""
    value = json_field(text, "reason")
    if value:
        return value.strip()
    visible, _ = strip_thinking(text)
    m = re.search(r"\breason\b\s*\**\s*[:=]\s*\**\s*([^\n]*)", visible, re.IGNORECASE)
    if not m:
        return ""
    reason = m.group(1)
    cut = re.search(r"\baction\b\s*\**\s*[:=]", reason, re.IGNORECASE)
    return (reason[: cut.start()] if cut else reason).strip(" *`")


def parse_released(text: str, tokens: Sequence[tuple[str, str]], rationale: bool) -> str | None:
    """The released code's parser (protocol=official): with rationale, the first `Action:` line
    whose tail contains a token; otherwise (or failing that) the first token of `tokens`, in
    their order, found anywhere in the upper-cased answer. Returns the action name or None."""

    def first(upper: str) -> str | None:
        return next((name for token, name in tokens if token in upper), None)

    t = text.strip()
    if rationale:
        for line in t.splitlines():
            s = line.strip()
            if s.upper().startswith("ACTION:"):
                hit = first(s.split(":", 1)[-1].strip().upper())
                if hit is not None:
                    return hit
    return first(t.upper())
