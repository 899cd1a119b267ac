"""Rendering: a `Table` of display strings as Markdown, LaTeX (booktabs) and CSV, and the number
formats its cells use (`mean [low, high]`, signed paired differences). Knows nothing about
sweeps or cells."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field

DASH = "—"
NUMERIC = re.compile(r"^([+-]?[\d.,]+|FAILED|MISSING)")


@dataclass
class Table:
    """A table with optional column groups; every cell is already a display string."""

    name: str  # file stem
    title: str
    index: list[str]  # the leading (row label) column names
    groups: list[tuple[str, list[str]]]  # (group label or "", its column names)
    rows: list[tuple[list[str], list[str]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def header(self) -> list[str]:
        return self.index + [f"{g}: {c}" if g else c for g, cols in self.groups for c in cols]

    def records(self) -> list[dict[str, str]]:
        return [dict(zip(self.header(), idx + vals, strict=True)) for idx, vals in self.rows]

    def to_markdown(self, title: bool = True) -> str:
        def esc(s: str) -> str:
            return str(s).replace("|", "\\|").replace("\n", " ")

        head = self.header()
        lines = [f"**{self.title}**", ""] if title else []
        lines.append("| " + " | ".join(esc(h) for h in head) + " |")
        lines.append("|" + "|".join(self._align()) + "|")
        for idx, vals in self.rows:
            lines.append("| " + " | ".join(esc(v) for v in idx + vals) + " |")
        lines += [""] + [f"_{n}_  " for n in self.notes]
        return "\n".join(lines).rstrip() + "\n"

    def _align(self) -> list[str]:
        """Numbers right, text left (Markdown)."""
        out = [":---"] * len(self.index)
        for j in range(len(self.header()) - len(self.index)):
            col = [vals[j] for _, vals in self.rows if vals[j] not in ("", DASH)]
            numeric = col and all(NUMERIC.match(v) for v in col)
            out.append("---:" if numeric else ":---")
        return out

    def to_latex(self) -> str:
        n_idx = len(self.index)
        spec = "l" * n_idx + "".join("c" * len(cols) for _, cols in self.groups)
        out = [
            "\\begin{table}[ht]",
            "\\centering",
            "\\small",
            f"\\caption{{{tex(self.title)}}}",
            f"\\label{{tab:{self.name}}}",
            f"\\begin{{tabular}}{{{spec}}}",
            "\\toprule",
        ]
        if any(g for g, _ in self.groups):
            top, rules, col = [""] * n_idx, [], n_idx + 1
            for g, cols in self.groups:
                top.append(
                    f"\\multicolumn{{{len(cols)}}}{{c}}{{{tex(g)}}}"
                    if g
                    else " & ".join([""] * len(cols))
                )
                if g:
                    rules.append(f"\\cmidrule(lr){{{col}-{col + len(cols) - 1}}}")
                col += len(cols)
            out.append(" & ".join(top) + " \\\\")
            out.append(" ".join(rules))
        out.append(
            " & ".join(tex(h) for h in self.index + [c for _, cols in self.groups for c in cols])
            + " \\\\"
        )
        out.append("\\midrule")
        for idx, vals in self.rows:
            out.append(" & ".join([tex(v) for v in idx] + [tex_cell(v) for v in vals]) + " \\\\")
        out += ["\\bottomrule", "\\end{tabular}"]
        if self.notes:
            out.append("\\par\\smallskip\\footnotesize " + tex(" ".join(self.notes)))
        out.append("\\end{table}")
        return "\n".join(out) + "\n"

    def to_csv(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(self.header())
        for idx, vals in self.rows:
            writer.writerow(idx + vals)
        return buf.getvalue()


TEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "—": "---",
    "±": r"$\pm$",
    "Δ": r"$\Delta$",
    "τ": r"$\tau$",
}


def tex(s: str) -> str:
    return "".join(TEX_ESCAPES.get(ch, ch) for ch in str(s))


def tex_cell(s: str) -> str:
    """`0.640 [0.55, 0.72]` -> the mean with a small CI below-right, as papers print it."""
    s = str(s)
    if " [" in s and s.endswith("]"):
        mean, ci = s.split(" [", 1)
        return f"{tex(mean)} {{\\scriptsize[{tex(ci)}}}"
    return tex(s)


def fmt(v: tuple[float, float, float] | None, digits: int = 3) -> str:
    if v is None:
        return DASH
    mean, low, high = v
    return f"{mean:.{digits}f} [{low:.2f}, {high:.2f}]"


def fmt_diff(d: dict | None) -> str:
    if d is None:
        return DASH
    star = "*" if d["diff_ci95_low"] > 0 or d["diff_ci95_high"] < 0 else ""
    return f"{d['diff_mean']:+.3f} [{d['diff_ci95_low']:+.2f}, {d['diff_ci95_high']:+.2f}]{star}"
