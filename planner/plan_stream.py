"""Reading the planner's terse reply while it streams: each array step as soon as it is whole.

The reply the planner prompt asks for is ``{"steps": [[...], [...], ...]}``
(planner/compact_plan.py). An array step is complete the moment its closing bracket
arrives, so the session can validate and dispatch it while the model still writes the rest
(LLMCompiler's early dispatch). :class:`StepStream` is fed the reply's text in whatever
pieces the server sends and hands back each step array once it is whole.

It only reads the shape it knows. Anything else (a step written as an object, a ``goal`` key
before ``steps``, prose, a code fence, a syntax error) stops it for good: it says
:attr:`StepStream.stopped` and hands back nothing more, and the whole reply goes through the
ordinary path once it has arrived (a stopped stream loses nothing, it only stops being early).
"""

from __future__ import annotations

import json
import re
from typing import Any

# The reply's opening, up to the steps array's first bracket; whitespace anywhere between.
_OPENING = re.compile(r'\s*\{\s*"steps"\s*:\s*\[')
_OPENING_CHARS = '{"steps":['


class StepStream:
    """An incremental reader of ``{"steps": [[...], ...]}``.

    Attributes:
        stopped: Why reading stopped early (object-form step, unknown shape, bad JSON), or
            empty. A stopped stream yields nothing more; the caller waits for the whole reply.
        ended: The steps array's closing bracket arrived.
    """

    def __init__(self) -> None:
        self._buffer = ""
        self._pos = 0  # next character of _buffer to read
        self._opened = False  # past '{"steps": ['
        self._step_start = -1  # where the array step being read starts, or -1
        self._depth = 0  # bracket depth inside that step
        self._in_string = False
        self._escaped = False
        self.stopped = ""
        self.ended = False
        self.count = 0  # steps handed back so far

    def feed(self, text: str) -> list[list[Any]]:
        """Read ``text`` (the reply's next piece); return the step arrays it completed."""
        if self.stopped or self.ended or not text:
            return []
        self._buffer += text
        if not self._opened and not self._open():
            return []
        steps: list[list[Any]] = []
        buffer = self._buffer
        while self._pos < len(buffer) and not (self.stopped or self.ended):
            if self._step_start < 0:
                self._between_steps(buffer[self._pos])
                continue
            step = self._inside_step(buffer)
            if step is not None:
                steps.append(step)
        self.count += len(steps)
        return steps

    # --- states ---------------------------------------------------------------------------

    def _open(self) -> bool:
        """Match the opening; stop if the text so far cannot be it."""
        match = _OPENING.match(self._buffer)
        if match is not None:
            self._opened, self._pos = True, match.end()
            return True
        if not _could_open(self._buffer):
            self.stopped = 'the reply does not start with {"steps": ['
        return False

    def _between_steps(self, char: str) -> None:
        if char.isspace() or char == ",":  # the whole reply's parse checks the commas
            self._pos += 1
        elif char == "[":
            self._step_start, self._depth = self._pos, 0
        elif char == "]":
            self.ended = True
            self._pos += 1
        elif char == "{":
            self.stopped = "a step written as an object: read when the reply is whole"
        else:
            self.stopped = f"unexpected {char!r} between steps"

    def _inside_step(self, buffer: str) -> list[Any] | None:
        """Scan the step being read; the parsed array once its closing bracket arrives."""
        while self._pos < len(buffer):
            char = buffer[self._pos]
            self._pos += 1
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self._in_string = False
            elif char == '"':
                self._in_string = True
            elif char in "[{":
                self._depth += 1
            elif char in "]}":
                self._depth -= 1
                if self._depth == 0:
                    return self._finish_step(buffer[self._step_start : self._pos])
        return None

    def _finish_step(self, text: str) -> list[Any] | None:
        self._step_start = -1
        try:
            step = json.loads(text)
        except ValueError as exc:
            self.stopped = f"a step that is not JSON ({exc})"
            return None
        if not isinstance(step, list):  # brackets that do not pair up: '[1}'
            self.stopped = "a step that is not an array"
            return None
        return step


def _could_open(text: str) -> bool:
    """Whether ``text`` may still grow into the opening ``{"steps": [``."""
    compact = "".join(text.split())
    return _OPENING_CHARS.startswith(compact)
