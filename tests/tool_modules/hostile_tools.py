"""Tools whose texts attack the terminal (the terminal-safety tests): name this module in
PLANLOOP_TOOL_MODULES."""

from __future__ import annotations

from pydantic import BaseModel

from planloop.core.errors import PermanentToolError
from planloop.core.tools import ToolContext, tool
from planloop.workers.toolsets._data import ToolParams

# Rich markup first (a view cuts long texts), then a window title, clear screen, a hyperlink,
# colours, a bell, a carriage return, an 8-bit CSI and a bidi override.
HOSTILE = (
    "[bold red]boom[/] \x1b]0;pwned\x07\x1b[2J\x1b[H"
    "\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\ \x1b[31mred\x1b[0m"
    "\x07 ok\rFAILED \x9b5m \u202etxt.exe"
)


class HostileParams(ToolParams):
    """Params of the hostile tools (none needed)."""


class Shouted(BaseModel):
    text: str


@tool(
    "hostile.shout",
    description=f"Answer a text that attacks the terminal {HOSTILE}",
    params=HostileParams,
    output=Shouted,
)
def shout(params: HostileParams, ctx: ToolContext) -> Shouted:
    return Shouted(text=HOSTILE)


@tool(
    "hostile.fail",
    description="Fail with an error text that attacks the terminal.",
    params=HostileParams,
    output=Shouted,
)
def fail(params: HostileParams, ctx: ToolContext) -> Shouted:
    raise PermanentToolError(f"tool broke: {HOSTILE}")
