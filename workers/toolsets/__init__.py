"""Toolsets bundled with Planloop; each module registers its tools with @tool."""

# Benchmark and test tools (sleep, echo, write): not in the default catalogue that planners
# see; benchmarks, tests and the demo add this module to ``Settings.tool_modules``.
BENCH_TOOLS = "planloop.workers.toolsets.bench"
