"""Tools for the secrets test (tests/integration/test_secrets.py), registered on request.

The worker loads them through ``secret_tools`` (``PLANLOOP_TOOL_MODULES``, tests/shipped.py);
the supervisor and the ``planloop`` commands never import them, so what they know of the
``sensitive`` fields comes from the tool catalogue the worker publishes.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from planloop.core.tools import ToolContext, ToolRegistry, tool

ECHO, PARSE = "secrets_test.echo", "secrets_test.parse"


class EchoParams(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    items: list[dict[str, str]] = Field(default_factory=list)
    api_key: str = Field("", alias="apiKey")
    url: str = ""
    pin: str = Field("", json_schema_extra={"sensitive": True})  # no name rule knows "pin"


class ParseParams(BaseModel):
    payload: str = Field(json_schema_extra={"sensitive": True})


class Inner(BaseModel):
    port: int


def echo(params: EchoParams, ctx: ToolContext) -> dict[str, Any]:
    """Hands the secrets back under names only the masker's rules (and the catalogue) hide."""
    token = params.items[0]["token"] if params.items else ""
    return {"pin": params.pin, "token": token, "connection": params.url, "count": len(params.items)}


def parse(params: ParseParams, ctx: ToolContext) -> dict[str, Any]:
    """Fails with pydantic's error, whose text repeats the input (the secret)."""
    return Inner.model_validate_json(params.payload).model_dump()


def register(registry: ToolRegistry) -> None:
    """Register both tools in ``registry``."""
    tool(ECHO, description="Echo secrets back.", params=EchoParams, registry=registry)(echo)
    tool(PARSE, description="Parse a payload.", params=ParseParams, registry=registry)(parse)
