"""The secrets test's tools in the worker's registry: name this module in PLANLOOP_TOOL_MODULES."""

from planloop.core.tools import REGISTRY
from tests.integration.secret_tool_defs import register

register(REGISTRY)
