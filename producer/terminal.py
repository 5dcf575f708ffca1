"""Text fit for a terminal: every CLI view prints what :func:`terminal_safe` leaves.

A tool's output or error, a goal, a step's or a worker's name, a model's reasoning are
anyone's text. Printed raw, their escape sequences act on the reader's terminal (set the
window title, clear the screen, colour, draw hyperlinks, ring the bell, move the cursor) and
bidi controls reorder what the line seems to say. So :func:`terminal_safe`:

* drops whole escape sequences: CSI (``ESC [`` … final byte, colours and cursor moves),
  OSC (``ESC ]`` … BEL or ST: window titles, OSC 8 hyperlinks, clipboard writes), DCS, SOS,
  PM and APC strings, the two-byte ``ESC x`` ones (``ESC c`` resets the terminal), and
  their 8-bit C1 forms (``\\x9b``, ``\\x9d``, …);
* shows every other control character escaped, visible and inert (``\\x07``, ``\\x1b``,
  ``\\r``, ``\\x85``): C0 but newline and tab, DEL, C1; and the bidi and invisible
  formatting characters (U+202A-U+202E, U+2066-U+2069, U+200B-U+200F, U+061C, U+2028,
  U+2029, U+2060, U+FEFF) as ``\\u202e``.

Rich markup (``[bold red]`` in a tool's text) is the other injection: the console of
:func:`make_console` reads no markup and no emoji codes in what it prints (views style
with ``Text`` objects), and passes every segment it renders through :func:`terminal_safe`,
so a view that forgets a field still prints it inert.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import IO

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment

# Width of tables when stdout is a pipe or a CI log (rich would assume 80 columns).
PLAIN_WIDTH = 160

_ST = r"(?:\x1b\\|\x9c|\x07)"  # string terminator (BEL ends an OSC in xterm's dialect)
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*+[\x20-\x2f]*+[\x40-\x7e]"  # CSI
    rf"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*+{_ST}"  # OSC DCS SOS PM APC
    r"|\x1b[\x20-\x2f]*+[\x30-\x7e]"  # two-byte (and nF) escapes
)
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"
)
_NAMED = {"\r": "\\r", "\x0b": "\\v", "\x0c": "\\f"}


def terminal_safe(text: object) -> str:
    """``text`` (``str()`` of anything) with escape sequences dropped and other control,
    bidi and invisible formatting characters escaped; newlines and tabs stay."""
    shown = text if isinstance(text, str) else str(text)
    if not _UNSAFE.search(shown):
        return shown  # the common case: one scan
    shown = _SEQUENCE.sub("", shown)
    return _UNSAFE.sub(_escaped, shown)


def _escaped(match: re.Match[str]) -> str:
    char = match[0]
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


class SafeConsole(Console):
    """A rich console whose rendered text passes :func:`terminal_safe` (its own control
    segments, a live view's cursor moves, are left alone)."""

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control or not _UNSAFE.search(segment.text):
                yield segment
            else:
                yield Segment(terminal_safe(segment.text), segment.style, segment.control)


def make_console(file: IO[str] | None = None) -> Console:
    """The console every view prints on (stdout, or ``file``): no markup or emoji read in
    text, every segment terminal-safe; wider than rich's 80-column default when the output
    is not a terminal."""
    console = SafeConsole(file=file, markup=False, emoji=False)
    if not console.is_terminal:
        console.width = PLAIN_WIDTH
    return console
