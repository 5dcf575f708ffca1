"""Prompt tokens of an incremental re-plan vs a full re-plan, for one failure in a 12-step plan.

The plan analyses two SKUs (eight read steps) and restocks one of them through the primary
supplier (four supply-chain steps). The primary supplier fails for good after nine steps
completed. The same situation is then re-planned twice against the scripted
OpenAI-compatible test server: incrementally (``Replanner.replan_remaining``, the sub-graph
that replaces the failed branch) and fully (``Replanner.replan_full``, every step not
completed). The server counts prompt tokens with a real tokenizer (tiktoken's cl100k_base).
No Redis or workers are needed: completed steps' outputs come from the bundled tools run
in-process.

Run from the repo root: ``python bench/replan_tokens.py`` or ``python -m bench.replan_tokens``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runnable as a script

from planloop.config.settings import Settings
from planloop.core.tools import ToolContext, ToolRegistry, load_tools
from planloop.planner.llm import Usage
from planloop.planner.openai_chat import OpenAIChatModel
from planloop.planner.plan import Plan, Step
from planloop.planner.prompting import plan_outline, tool_catalogue
from planloop.planner.replans import FULL_SITUATION_CHARS, INCREMENTAL_SITUATION_CHARS, Replanner
from planloop.planner.situation import EventView, Situation, StepView, render_situation
from tests.llm_server import ScriptedLLMServer, count_tokens

TARGET = 0.5
FAILED = "verify_primary"
ERROR = (
    "PermanentToolError: supplier 'primary' cannot supply SKU SKU12345; "
    "find another with supply_chain.alternative_suppliers"
)


def _step(step_id: str, tool: str, *deps: str, **params: Any) -> Step:
    return Step(
        id=step_id,
        title=step_id.replace("_", " "),
        tool=tool,
        params=params,
        dependencies=list(deps),
    )


def twelve_step_plan() -> Plan:
    """Two SKUs analysed in parallel, then a restock of the first through its supplier."""
    steps = []
    for sku, tag in (("SKU12345", "a"), ("SKU67890", "b")):
        steps += [
            _step(f"orders_{tag}", "ecommerce.order_stats", product_id=sku, days=30),
            _step(f"stock_{tag}", "ecommerce.inventory", product_id=sku),
            _step(f"reviews_{tag}", "ecommerce.reviews", product_id=sku),
            _step(f"competitors_{tag}", "ecommerce.competitors", product_id=sku),
        ]
    steps += [
        _step("erp_stock", "supply_chain.erp_stock", sku="SKU12345"),
        _step(
            FAILED,
            "supply_chain.verify_supplier",
            "erp_stock",
            sku="SKU12345",
            supplier_id="primary",
        ),
        _step(
            "order_primary",
            "supply_chain.create_purchase_order",
            FAILED,
            "erp_stock",
            sku="SKU12345",
            qty="{{erp_stock.output.shortfall}}",
            supplier_id="primary",
        ),
        _step(
            "reserve",
            "supply_chain.reserve_stock",
            "order_primary",
            "stock_a",
            sku="SKU12345",
            qty="{{stock_a.output.shortfall}}",
        ),
    ]
    return Plan(
        goal="Analyse SKU12345 and SKU67890 (sales, stock, reviews, competitors) and restock "
        "SKU12345 from its primary supplier",
        steps=steps,
    )


def situation_after_failure(plan: Plan, tools: ToolRegistry) -> tuple[Situation, set[str]]:
    """Nine steps completed (outputs from the real tools), the supplier check failed."""
    views, done = [], set()
    for step in plan.steps:
        if step.id in (FAILED, "order_primary", "reserve"):
            continue
        ctx = ToolContext(
            session_id="bench", step_id=step.id, attempt=1, idempotency_key=f"bench:{step.id}"
        )
        output = tools.get(step.tool).run(step.params, ctx)
        views.append(
            StepView(
                step.id,
                step.tool,
                step.title,
                "completed",
                1,
                output=output,
                dependencies=tuple(step.dependencies),
            )
        )
        done.add(step.id)
    by_id = plan.by_id
    views += [
        StepView(
            FAILED,
            by_id[FAILED].tool,
            by_id[FAILED].title,
            "failed",
            1,
            error=ERROR,
            dependencies=tuple(by_id[FAILED].dependencies),
        ),
        *(
            StepView(
                i,
                by_id[i].tool,
                by_id[i].title,
                "pending",
                0,
                dependencies=tuple(by_id[i].dependencies),
            )
            for i in ("order_primary", "reserve")
        ),
    ]
    events = (
        EventView(
            "TASK_FAILED",
            "CRITICAL",
            FAILED,
            f"{FAILED} (supply_chain.verify_supplier) failed for good after 1 attempt(s): {ERROR}",
        ),
    )
    situation = Situation(
        goal=plan.goal,
        constraints=(),
        steps=tuple(views),
        events=events,
        replans_used=0,
        max_replans=3,
        trigger=f"REPLAN_REMAINING: {FAILED} failed; switch supplier",
        hints=("the primary supplier cannot deliver SKU12345",),
    )
    return situation, done


# The new steps both re-planners answer with: order from the best alternative instead.
NEW_STEPS: list[dict[str, Any]] = [
    {
        "id": "alternatives",
        "tool": "supply_chain.alternative_suppliers",
        "params": {"sku": "SKU12345"},
        "dependencies": [],
    },
    {
        "id": "order_alt",
        "tool": "supply_chain.create_purchase_order",
        "params": {
            "sku": "SKU12345",
            "qty": "{{erp_stock.output.shortfall}}",
            "supplier_id": "{{alternatives.output.suppliers.0.supplier_id}}",
        },
        "dependencies": ["alternatives", "erp_stock"],
    },
    {
        "id": "reserve",
        "tool": "supply_chain.reserve_stock",
        "params": {"sku": "SKU12345", "qty": "{{stock_a.output.shortfall}}"},
        "dependencies": ["order_alt", "stock_a"],
    },
]


def measure() -> tuple[int, int, dict[str, int]]:
    """(incremental prompt tokens, full prompt tokens, incremental prompt parts' tokens)."""
    tools = load_tools()
    plan = twelve_step_plan()
    situation, done = situation_after_failure(plan, tools)
    with ScriptedLLMServer() as srv:
        chat = OpenAIChatModel(
            Settings(llm_base_url=srv.base_url, llm_api_key="bench", llm_max_retries=0)
        )
        planner = Replanner(chat, tools)
        srv.script("replanner", {"steps": NEW_STEPS, "reasoning": "switch supplier"})
        inc_usages = planner.replan_remaining(situation, plan, done, cancel={FAILED}).usages
        srv.script("replanner", {"goal": plan.goal, "steps": NEW_STEPS})
        full_usages = planner.replan_full(situation, plan, done).usages
        chat.close()
        if len(srv.requests) != 2:
            raise SystemExit(f"expected 2 requests, the server saw {len(srv.requests)}")
    parts = {
        "situation report": count_tokens(
            render_situation(situation, budget_chars=INCREMENTAL_SITUATION_CHARS)
        ),
        "plan outline": count_tokens(plan_outline(plan, {s.id: s.status for s in situation.steps})),
        "tool catalogue (compact)": count_tokens(tool_catalogue(tools, compact=True)),
    }
    return _prompt(inc_usages), _prompt(full_usages), parts


def _prompt(usages: list[Usage]) -> int:
    return sum(u.prompt_tokens for u in usages)


def main() -> int:
    incremental, full, parts = measure()
    ratio = incremental / full
    print(f"12-step plan, {FAILED} failed for good after 9 steps completed")
    print(
        f"situation budgets: incremental {INCREMENTAL_SITUATION_CHARS} chars, "
        f"full {FULL_SITUATION_CHARS} chars"
    )
    print("incremental prompt, largest parts (tokens):")
    for name, tokens in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<26} {tokens:>6}")
    print(f"full re-plan prompt tokens:        {full:>6}")
    print(f"incremental re-plan prompt tokens: {incremental:>6}")
    print(
        f"replan prompt tokens: incremental={incremental} full={full} "
        f"ratio={ratio:.2f} (target <= {TARGET})"
    )
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
