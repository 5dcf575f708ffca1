"""The shape of the answer a goal asks for, read from the goal's words.

A goal that asks for a report wants headings, figures and advice, not "a few sentences"; one
that asks for a table wants a table. :func:`answer_shape` turns the goal text into the
instruction the summarizer's (and the critic's) prompt gives for the answer's ``text``; it
holds whatever ``answer_schema`` asks of ``data``. Words are matched whole and case-blind, in
English and in Chinese.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SENTENCES = "a few sentences that answer the goal directly"


@dataclass(frozen=True)
class Shape:
    """One shape a goal may ask for: the words that ask for it and what the answer must be."""

    name: str
    words: re.Pattern[str]
    instruction: str


def _words(*words: str) -> re.Pattern[str]:
    # \b does not hold between Chinese characters: those match as plain substrings
    latin = [w for w in words if w.isascii()]
    other = [re.escape(w) for w in words if not w.isascii()]
    alternatives = [rf"\b(?:{'|'.join(latin)})\b"] if latin else []
    return re.compile("|".join(alternatives + other), re.IGNORECASE)


SHAPES = (
    Shape(
        "report",
        _words(
            "report",
            "reports",
            "analysis",
            "analyse",
            "analyze",
            "assessment",
            "assess",
            "review",
            "audit",
            "briefing",
            "overview",
            "write-up",
            "报告",
            "分析",
        ),
        "a report in Markdown: a one-line title, a heading (## ...) for each part the goal "
        "names, the key figures from the results with their units, and a closing "
        "## Recommendations section with concrete advice",
    ),
    Shape(
        "table",
        _words("table", "tables", "tabulate", "tabular", "spreadsheet", "表格"),
        "a Markdown table with a header row, one row per item and the figures in their own "
        "columns, then one sentence on what the table shows",
    ),
    Shape(
        "comparison",
        _words("compare", "comparison", "versus", "vs", "contrast", "rank", "对比", "比较"),
        "a comparison: the items side by side on the same criteria (a Markdown table when "
        "there are figures), then which one is better for what, and why",
    ),
    Shape(
        "list",
        _words("list", "enumerate", "itemize", "bullet", "bullets", "列表", "列出"),
        "a Markdown list, one item per line, each with the figure or fact that backs it",
    ),
    Shape(
        "advice",
        _words(
            "advise",
            "advice",
            "recommend",
            "recommendation",
            "recommendations",
            "suggest",
            "should",
            "建议",
        ),
        "end with concrete advice: what to do, with the figures that support it",
    ),
)


def answer_shape(goal: str) -> str:
    """The instruction for the answer's text that ``goal`` asks for (several shapes are
    combined; a goal that asks for none gets "a few sentences")."""
    asked = [s for s in SHAPES if s.words.search(goal)]
    names = {s.name for s in asked}
    if "report" in names:  # a report holds its own advice section
        asked = [s for s in asked if s.name != "advice"]
    if not asked:
        return SENTENCES
    if [s.name for s in asked] == ["advice"]:
        return f"{SENTENCES}; {asked[0].instruction}"
    return "; ".join(s.instruction for s in asked)
