"""Toolsets bundled with Planloop; each module registers its tools with @tool."""
