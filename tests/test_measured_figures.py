"""Every measured figure the docs quote comes from a page the measuring command wrote
(docs/measured/, benchmark.measured): a hand-typed number has no command, commit or machine
beside it, and nothing tells a reader when it stopped being true."""

from __future__ import annotations

import re

import pytest

from benchmark.measured import FIELDS, NAME, read_header, write_page
from tests.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MEASURED = REPO / "docs" / "measured"
# a line that quotes a value which is not a measurement of this suite says so: a setting (a
# threshold, a goal, a range) or a figure quoted from a paper
SETTING = "<!-- setting -->"
PAPER = "<!-- paper -->"
FIGURE = re.compile(
    r"(?<![\w.])[+-]?\d*\.\d{2,}(?![\w.])"  # a decimal with 2+ digits after the point
    r"|\[[+-]?\d*\.?\d+, ?[+-]?\d*\.?\d+\]"  # a confidence interval
    # a percentage, not a confidence level ("95% CIs", "95% bootstrap", "Wilson 95% intervals")
    r"|(?<![\w.])\d+(?:\.\d+)?\s?%(?!\s*(?:bootstrap|CIs?\b|confidence|interval))"
    r"|\b\d+ min \d+ s\b"  # a duration
)
GENERATED = re.compile(r"<!-- ([\w-]+):start -->.*?<!-- \1:end -->", re.S)
LINK = re.compile(r"\]\((?:\.\./|docs/)?(?:measured/)([a-z0-9-]+)\.md")


def figures(text: str) -> list[tuple[int, str]]:
    """(line number, figure) of each measured-looking figure outside code blocks, inline code,
    generated blocks and lines marked as settings."""
    text = GENERATED.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or SETTING in line or PAPER in line:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        found += [(number, m.group(0).strip()) for m in FIGURE.finditer(line)]
    return found


def unsourced(text: str) -> list[str]:
    """The figures of a document that no measured page it links holds."""
    pages = [MEASURED / f"{name}.md" for name in sorted(set(LINK.findall(text)))]
    sources = "\n".join(p.read_text() for p in pages if p.exists())
    return [f"line {n}: {fig}" for n, fig in figures(text) if fig not in sources]


@pytest.mark.parametrize(
    "doc",
    [pytest.param(p, id=str(p.relative_to(REPO))) for p in DOCS],
)
def test_every_quoted_figure_is_on_a_measured_page_the_document_links(doc):
    bad = unsourced(doc.read_text())
    assert not bad, (
        f"{doc.relative_to(REPO)}: figures no linked docs/measured page holds (quote the page's "
        f"figures, link it, or mark the line {SETTING} or {PAPER}): {bad}"
    )


def test_the_scan_finds_each_kind_of_figure_and_skips_code_settings_and_generated_blocks():
    text = (
        "reward 0.359 [0.27, 0.46], asked at 46% of the steps, in 2 min 59 s, 95% CIs\n"
        "tau 1.9 and `gate.tau=0.65` and version 2\n"
        f"goal 0.95 {SETTING}\nthe paper's 0.72 {PAPER}\n"
        "```\n0.123\n```\n"
        "<!-- x:start -->\n0.456\n<!-- x:end -->\n"
    )
    assert [f for _, f in figures(text)] == ["0.359", "[0.27, 0.46]", "46%", "2 min 59 s"]


def test_a_figure_counts_only_when_a_linked_page_holds_it():
    page = sorted(MEASURED.glob("*.md"))[0]
    name = page.stem
    shown = next(f for _, f in figures(page.read_text()) if "." in f)
    assert unsourced(f"see [it](docs/measured/{name}.md): {shown}") == []
    assert unsourced(f"{shown} with no link") == [f"line 1: {shown}"]


@pytest.mark.parametrize("page", sorted(MEASURED.glob("*.md")), ids=lambda p: p.name)
def test_each_measured_page_names_its_command_commit_date_and_machine(page):
    fields = read_header(page.read_text())
    assert set(fields) == set(FIELDS), f"{page.name}: header has {sorted(fields)}"
    assert re.fullmatch(r"[0-9a-f]{7,}(\+dirty)?|unknown", fields["commit"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", fields["date"])
    assert fields["command"].startswith("`") and "cores" in fields["machine"]


def test_write_page_writes_the_header_and_refuses_a_bad_name(tmp_path):
    path = write_page("x-1", "X", "| a |\n|---|\n| 0.5 |", "python -m x", pages=tmp_path)
    fields = read_header(path.read_text())
    assert fields["command"] == "`python -m x`" and "GPU:" in fields["machine"]
    assert path.read_text().endswith("| 0.5 |\n")
    assert NAME.fullmatch("x-1")
    with pytest.raises(ValueError, match="'../x'"):
        write_page("../x", "X", "", "c", pages=tmp_path)
