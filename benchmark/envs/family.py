"""Environment families: the one extension point for what the suite asks about an environment.

A family (MiniGrid navigation `grid`, HigherLower `cards`, MiniGrid Memory `memory`, ...) is a
`Family` object named `FAMILY` in the module or sub-package `benchmark.envs.<name>`, where <name>
is the task's `family` attribute (also the `family` key of conf/env/<env>.yaml). A family in
another installed package is found by name through the entry-point group `benchmark.families`;
a dotted name (`mypackage.myfamily`) names any module outside this package. The family declares, in one place,
the ASK/ASK+ prompt blocks per level (system with rules, state, examples), the belief-state
claims, the feedback-paper text where those strategies apply, the templated reasons of the
fine-tuning data and Agent-BRACE's teacher beliefs and claim rules. The task and its episodes (same module or one it imports) give the simulator
view, the expert (`expert_action`, `optimal_actions`) and the per-step analysis fields
(`Episode.step_fields`). Nothing else in the suite branches on the kind of environment: a new
family adds its module(s), its conf/env files, tests and docs (docs/families.md)."""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from benchmark.settings import UNREAD, added, identity
from benchmark.vocabulary import ACTION_MEANING

if TYPE_CHECKING:
    from benchmark.envs.base import Episode, Memory, Task
    from benchmark.envs.truth import Rule, Truth

PACKAGE = "benchmark.envs"
ENTRY_POINT_GROUP = "benchmark.families"  # how a family in another installed package is found


@dataclass(frozen=True)
class FamilyPromptSettings:
    """The prompt keys only some families' texts read (Family.prompt_keys), at the value a cell's
    name omits. A key declared outside the UNREAD scheme leaves the identity of a cell whose
    family's texts do not read it at the cell's prompt level: it changes no prompt there."""

    # what a `Planner hint:` line searches for; frontier: the cells before the key existed
    planner_hint: str = added("frontier", old="frontier", outside=(UNREAD,))
    # the known-map window, read by the grid's `stateful` level only, but in every ASK cell's
    # identity since the first results: it stays there, so those cells keep their hash
    map_radius: int = identity(5)


@dataclass(frozen=True)
class ReleasedText:
    """The authors' released code's prompts for one env (protocol=official, prompt.style=released,
    benchmark.prompts.released): its prompt levels, the tokens its parser tries in order (token,
    action name), the action its SLM-only loop takes on an unparseable answer, its answer
    lengths (it never thinks), the per-episode state its stateful prompts read (`start`: made at
    the episode's start, kept up to date on every step) and the prompt itself:
    `prompt(episode, state, level, rationale, autopilot name or None, map_radius, history)`."""

    levels: tuple[str, ...]
    tokens: tuple[tuple[str, str], ...]
    fallback: str
    max_new_tokens: int
    rationale_max_new_tokens: int
    start: Callable[[Episode], Any]
    prompt: Callable[..., str]


class Family:
    """What one environment family tells the rest of the suite. Subclasses fill in the text of
    their prompts; `feedback` is None where the feedback paper's strategies do not apply."""

    name: str = ""
    kinds: tuple[str, ...] = ()  # the `kind` values its env configs may take (report column)
    # The version of this family's prompt texts, part of the identity of every cell of the family
    # that asks a consultant (and of a model fine-tuned on its states): bump it with any change
    # to a text its prompts send, its own or the shared code's (tests/golden/<env>.version pins
    # it), so that the results of the old texts are not reused and other families' are kept.
    prompt_version: int = 1
    feedback: Any = None  # an object with title(task), observation(view), description(...)
    # The SB3 features extractors its observations can feed, by the `policy.extractor` value that
    # selects one: the class as "module.Class", imported only when a policy is built (it is
    # torch code, a layer above; benchmark.policy.network asks every family for its own).
    extractors: Mapping[str, str] = {}
    # The report's "where queries land" figure of its envs, drawn from their step records
    # (Episode.step_fields): "module.function"(sweep, env, cells, steps, out) -> Path | None, the
    # function of benchmark.report.analysis that suits its records, or a family's own; None:
    # its envs get no such figure.
    where_figure: str | None = None

    PARTS = {  # prompt part -> the methods a family overrides to have it
        "ask": ("system", "state", "examples"),
        "belief": ("system", "state", "belief_task", "belief_claims", "belief_steps"),
        "brace": ("brace_teacher", "brace_rules"),
    }

    def supports(self, part: str) -> bool:
        """Whether this family has the prompts of `part` (ask, belief or feedback) or the
        Agent-BRACE teacher and claim rules (brace)."""
        if part == "feedback":
            return self.feedback is not None
        if part not in self.PARTS:
            raise ValueError(f"unknown prompt part {part!r}; allowed: {[*self.PARTS, 'feedback']}")
        return all(getattr(type(self), m) is not getattr(Family, m) for m in self.PARTS[part])

    # -- ASK / ASK+ blocks (benchmark.prompts.ask) --------------------------------------------

    def system(
        self, task: Task, actions: tuple[str, ...], level: str, rationale: bool, autopilot: bool
    ) -> str:
        """Blocks (i)-(iii): role, valid actions, rules (with the rationale rule if asked)."""
        raise NotImplementedError(f"family {self.name!r} has no ASK system block")

    def state(
        self,
        view: Any,
        memory: Memory,
        actions: tuple[str, ...],
        level: str,
        autopilot: str | None,
        map_radius: int = 5,
        planner_hint: str = "frontier",
    ) -> str:
        """Block (iv), cumulative over the levels basic, enriched, stateful_min, stateful.
        `planner_hint`: what a `Planner hint:` line searches for (navfeatures.PLANNER_HINTS), for
        the families that show one."""
        raise NotImplementedError(f"family {self.name!r} has no ASK state block")

    def prompt_keys(self, level: str) -> frozenset[str]:
        """The prompt config keys beyond the common ones (FamilyPromptSettings) that this family's
        ASK state block reads at `level`. A cell's identity and name hold exactly these: a key no
        text of the family reads at that level changes no prompt, so it names no other cell."""
        return frozenset()

    def examples(self, task: Task, actions: tuple[str, ...], level: str) -> str:
        """Block (v): the one-shot examples."""
        raise NotImplementedError(f"family {self.name!r} has no ASK examples")

    def vocabulary(self) -> str:
        """The words this family's prompts and answers are made of, one phrase per line, for a
        tokenizer trained offline (the tiny model's `text` size); empty where the built-in
        corpus already covers them (grids, cards)."""
        return ""

    def released(self, task: Task) -> ReleasedText | None:
        """The released code's prompts for `task` (protocol=official); None where it has none."""
        return None

    # -- belief state (benchmark.prompts.belief) ----------------------------------------------

    def belief_task(self, task: Task) -> str:
        """The TASK paragraph of the belief prompts."""
        raise NotImplementedError(f"family {self.name!r} has no belief-state prompts")

    def belief_claims(self, episode: Episode) -> list[str]:
        """Claims the current view and memory establish (the oracle's belief update)."""
        raise NotImplementedError(f"family {self.name!r} has no belief-state prompts")

    def belief_steps(self, episode: Episode, since: int, limit: int) -> list[str]:
        """One short text per step since step `since` (at most the last `limit`)."""
        raise NotImplementedError(f"family {self.name!r} has no belief-state prompts")

    # -- Agent-BRACE (benchmark.brace) -------------------------------------------------------

    def brace_teacher(self, truth: Truth) -> list[str]:
        """The teacher's belief at the true state `truth` ('- <claim> [<label>]' lines): the
        SFT target of the belief model, and what its claims are scored against."""
        raise NotImplementedError(f"family {self.name!r} has no Agent-BRACE teacher beliefs")

    def brace_rules(self) -> list[Rule]:
        """The claim rules that verify a belief's claims against the true state
        (benchmark.envs.truth.verify tries them in order)."""
        raise NotImplementedError(f"family {self.name!r} has no Agent-BRACE claim rules")

    # -- fine-tuning data (benchmark.finetune.dataset) ----------------------------------------

    def reason(self, episode: Episode, action: str) -> str:
        """The templated reason line of the expert's `action` (the rationale format)."""
        return "best option"


def system_block(
    role: str,
    actions: Sequence[str],
    rules: Sequence[str],
    meanings: Mapping[str, str] = ACTION_MEANING,
) -> str:
    """Blocks (i)-(iii) as every family words them: the ROLE line, each valid action with its
    meaning (benchmark.vocabulary's, or the family's own `meanings`), then the RULES."""
    lines = [
        f"ROLE: {role}",
        "",
        "VALID ACTIONS:",
        *(f"- {a}: {meanings[a]}" for a in actions),
        "",
        "RULES:",
        *rules,
    ]
    return "\n".join(lines)


def package_families() -> list[str]:
    """Names of the modules and sub-packages of benchmark.envs that define a Family `FAMILY`
    (a family may be one file, `benchmark/envs/<name>.py`, or a folder with an __init__.py)."""
    package = importlib.import_module(PACKAGE)
    names = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name != "family" and not info.name.startswith("_"):
            module = importlib.import_module(f"{PACKAGE}.{info.name}")
            if isinstance(getattr(module, "FAMILY", None), Family):
                names.append(info.name)
    return sorted(names)


def entry_point_families() -> dict[str, metadata.EntryPoint]:
    """The families other installed packages declare in the entry-point group `benchmark.families`
    (name -> "module" holding FAMILY, or "module:OBJECT"), by name; loaded only when asked for.
    Read once per `sys.path` (a scan of every installed distribution costs about 25 ms, and
    prompt checks ask for it per state); a package installed into the running process on a
    path already searched is seen by the next process."""
    return _entry_points(tuple(sys.path))


@functools.lru_cache(maxsize=8)
def _entry_points(search_path: tuple[str, ...]) -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def available_families() -> list[str]:
    """Every family name `get_family` resolves: this package's, then the installed packages'."""
    return sorted(set(package_families()) | set(entry_point_families()))


@functools.cache
def get_family(name: str) -> Family:
    """The family called `name`: a module or sub-package of benchmark.envs, an entry point of the
    group `benchmark.families`, or a dotted module path (`mypackage.myfamily`)."""
    if "." in name:
        return _from_module(name, name)
    plugin = entry_point_families().get(name)
    if name in package_families():
        if plugin is not None:
            raise ValueError(
                f"env family {name!r} is both {PACKAGE}.{name} and the entry point {plugin.value!r} "
                f"of the group {ENTRY_POINT_GROUP!r}: rename the installed one"
            )
        return _from_module(f"{PACKAGE}.{name}", name)
    if plugin is not None:
        loaded = plugin.load()
        module = inspect.ismodule(loaded)
        family = getattr(loaded, "FAMILY", None) if module else loaded
        if not isinstance(family, Family):
            got = f"module {loaded.__name__} has no FAMILY" if module else type(loaded).__name__
            raise ValueError(
                f"entry point {name} = {plugin.value!r} of the group {ENTRY_POINT_GROUP!r} gives "
                f"{got}, not a benchmark.envs.family.Family (name a module with a Family FAMILY, "
                "or module:OBJECT)"
            )
        return family
    raise ValueError(f"unknown env family {name!r}; available: {available_families()}")


def _from_module(module_name: str, name: str) -> Family:
    """The FAMILY of `module_name`, with an error naming the family when there is none."""
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name and not module_name.startswith(f"{exc.name}."):
            raise  # the module exists and one of its own imports is missing
        module = None
    family = getattr(module, "FAMILY", None)
    if not isinstance(family, Family):
        raise ValueError(
            f"unknown env family {name!r} (no Family named FAMILY in module {module_name}); "
            f"available: {available_families()}"
        )
    return family


def family_of(task: Any) -> Family:
    """The family of a task (its `family` attribute) or of an episode (its task's)."""
    task = getattr(task, "task", task)
    name = getattr(task, "family", None)
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"task {getattr(task, 'name', task)!r} declares no family; give its Task class a "
            f"`family` attribute, one of {available_families()}"
        )
    return get_family(name)
