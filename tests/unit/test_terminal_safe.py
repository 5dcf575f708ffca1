"""Terminal-safe CLI output (producer/terminal.py): escapes dropped, controls shown inert,
rich markup in data printed literally, by the function and by the views' console."""

from __future__ import annotations

import io
import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.table import Table
from rich.text import Text

from planloop.producer.terminal import make_console, terminal_safe
from planloop.producer.views import short

# What a hostile tool puts in its output or error text.
HOSTILE = [
    ("\x1b]0;pwned\x07", ""),  # window title (OSC 0, BEL-terminated)
    ("\x1b]2;pwned\x1b\\", ""),  # window title (ST-terminated)
    ("\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\", "click"),  # OSC 8 hyperlink
    ("\x1b]52;c;cGF5bG9hZA==\x07", ""),  # clipboard write
    ("\x1b[2J\x1b[H", ""),  # clear screen, cursor home
    ("\x1b[31mred\x1b[0m", "red"),  # colours
    ("\x1b[?1049h", ""),  # alternate screen
    ("\x1bc", ""),  # full reset
    ("\x1bPq#0;2;0;0;0\x1b\\", ""),  # DCS (sixel)
    ("\x9b31mred", "red"),  # 8-bit CSI
    ("\x9d0;t\x9c", ""),  # 8-bit OSC
    ("ding\x07", "ding\\x07"),  # bell
    ("ok\rFAILED", "ok\\rFAILED"),  # carriage return overwrites the line
    ("back\x08\x08", "back\\x08\\x08"),
    ("cut \x1b[31", "cut 31"),  # a cut-off sequence: its introducer dropped
    ("lone \x1b", "lone \\x1b"),
    ("nul\x00", "nul\\x00"),
    ("del\x7f", "del\\x7f"),
    ("c1\x85", "c1\\x85"),
    ("user\u202eexe.txt", "user\\u202eexe.txt"),  # bidi override
    ("a\u2066b\u2069", "a\\u2066b\\u2069"),
    ("zero\u200bwidth", "zero\\u200bwidth"),
    ("line one\nline two\tcol", "line one\nline two\tcol"),  # newlines and tabs stay
    ("plain text, ünïcode, 日本語", "plain text, ünïcode, 日本語"),
    ("[bold red]not markup[/]", "[bold red]not markup[/]"),  # the function leaves markup
]


@pytest.mark.parametrize(("text", "expected"), HOSTILE)
def test_escape_sequences_are_dropped_and_controls_shown_inert(text: str, expected: str) -> None:
    assert terminal_safe(text) == expected


def test_anything_is_shown_by_its_str() -> None:
    assert terminal_safe(42) == "42"
    assert terminal_safe(None) == "None"


UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"
)


def is_inert(text: str) -> bool:
    """No control character but newline and tab, no bidi or invisible formatting."""
    if UNSAFE.search(text):
        return False
    return all(unicodedata.category(c) != "Cc" or c in "\n\t" for c in text)


hostile_text = st.lists(
    st.one_of(
        st.characters(),
        st.sampled_from(["\x1b", "\x9b", "\x9d", "\x07", "\x1b[", "\x1b]", "\x1b\\", "\u202e"]),
    ),
    max_size=100,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(hostile_text)
def test_whatever_a_tool_writes_comes_out_inert(text: str) -> None:
    shown = terminal_safe(text)
    assert is_inert(shown)
    assert terminal_safe(shown) == shown


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cc", "Cf", "Zl", "Zp")), max_size=200))
def test_printable_text_is_left_as_it_is(text: str) -> None:
    assert terminal_safe(text) == text


def printed(render: object) -> str:
    out = io.StringIO()
    console = make_console(file=out)
    console.print(render)
    return out.getvalue()


EVIL = "\x1b]0;pwned\x07[bold red]boom[/] \x1b[2J:warning: ok\x07"


def test_the_views_console_prints_markup_and_emoji_codes_literally() -> None:
    shown = printed(f"error: {EVIL}")
    assert "[bold red]boom[/]" in shown
    assert ":warning:" in shown
    assert "\x1b" not in shown
    assert "\x07" not in shown


def test_the_views_console_makes_every_renderable_inert() -> None:
    # Text objects and table cells skip the markup parser: the console's net catches them.
    table = Table("step", "error")
    table.add_row(EVIL, Text(EVIL, style="red"))
    for render in (Text(EVIL), table):
        shown = printed(render)
        assert "\x1b" not in shown
        assert "\x07" not in shown
        assert "[bold red]boom[/]" in shown


def test_short_cuts_masks_and_makes_inert() -> None:
    text = short("\x1b]0;t\x07password=hunter2 \x1b[31mred\x1b[0m", 100)
    assert text == "password=*** red"
    # an escape inside a word does not hide it from the masker
    assert "hunter2" not in short("pass\x1b[0mword=hunter2", 100)
