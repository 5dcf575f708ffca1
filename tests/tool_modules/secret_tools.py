"""The secrets test's tools in the worker's registry: name this module in PLANLOOP_TOOL_MODULES."""

from secret_tool_defs import register  # type: ignore[import-not-found]

from planloop.core.tools import REGISTRY

register(REGISTRY)
