"""A toolset only the pool tests' own workers serve: name it in PLANLOOP_TOOL_MODULES."""

from __future__ import annotations

import os

from pydantic import BaseModel

from planloop.core.tools import ToolContext, tool
from planloop.workers.toolsets._data import ToolParams


class GreetParams(ToolParams):
    """Params of ``pool.greet``."""

    name: str


class Greeting(BaseModel):
    text: str
    pid: int  # the worker process that ran it


@tool(
    "pool.greet",
    description="Greet someone (the pool tests' tool).",
    params=GreetParams,
    output=Greeting,
)
def greet(params: GreetParams, ctx: ToolContext) -> Greeting:
    return Greeting(text=f"hello {params.name}", pid=os.getpid())
