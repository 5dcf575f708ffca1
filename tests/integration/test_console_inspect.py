"""What the session page tells an operator, in Debian's chromium driven by playwright: the
step panel (resolved params, output), a running step's elapsed time, the failed step an LLM
re-plan dropped, edges that never cross a box (dagre's layout, routed), and the sessions
list's filters."""

from __future__ import annotations

import itertools
import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from planloop.config.settings import Settings
from planloop.core.models import SessionStatus
from planloop.core.record import SqlRecord
from planloop.planner.plan import Plan, load_plan, parse_plan
from planloop.producer.client import Producer
from planloop.producer.stack import Stack
from tests.integration.conftest import wait_ended
from tests.integration.console_process import Console, console_process
from tests.integration.test_console_browser import chromium, node
from tests.integration.test_planning_loop import THREE_STEPS, decision, echo, run
from tests.llm_server import ScriptedLLMServer

pytestmark = pytest.mark.browser

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def console(
    stack: Stack, env_overrides: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Console]:
    with console_process(env_overrides, tmp_path_factory.mktemp("console")) as running:
        yield running


def open_browser(console: Console) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium(), args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        context = browser.new_context(
            http_credentials={"username": console.user, "password": console.password},
            viewport={"width": 1360, "height": 1000},
        )
        try:
            yield context.new_page()
        finally:
            context.close()
            browser.close()


@pytest.fixture
def page(console: Console) -> Iterator[Any]:
    yield from open_browser(console)


def test_a_completed_step_shows_its_resolved_params_and_its_output(
    page: Any, console: Console, producer: Producer
) -> None:
    sid = producer.submit(load_plan(EXAMPLES / "supply_chain.yaml"))
    wait_ended(producer, sid, 60)
    page.goto(f"{console.url}/sessions/{sid}")
    page.locator('svg#dag g.node[data-step="order_alternative"]').click()
    panel = page.locator("#step-panel")
    panel.locator("[data-resolved] pre").wait_for(timeout=10_000)
    resolved = json.loads(panel.locator("[data-resolved] pre").inner_text())
    written = panel.locator("pre.json").first.inner_text()
    assert "{{erp_stock.output.shortfall}}" in written  # as written ...
    assert isinstance(resolved["qty"], int)  # ... and as the worker got it
    assert resolved["supplier_id"] != "{{alternative_suppliers.output.suppliers.0.supplier_id}}"
    output = json.loads(panel.locator('[data-output="complete"] pre').inner_text())
    assert output["qty"] == resolved["qty"]
    assert re.search(r"\d+ B", panel.locator("[data-output-box]").inner_text())
    assert panel.locator("tr[data-attempt]").count() >= 1
    assert sid in panel.locator("code[data-key]").inner_text()  # the idempotency key
    assert "create_purchase_order" in panel.locator("table.effects").inner_text()
    # the failed step names its error's kind
    page.locator('svg#dag g.node[data-step="verify_primary"]').click()
    page.wait_for_selector('#step-panel [data-error-kind="permanent"]', timeout=10_000)
    # an explicit plan without an LLM: no answer section, no controls after the end
    assert page.locator("#answer-section").is_hidden()
    assert page.locator("#actions").is_hidden()
    assert page.locator("#timeline rect[data-kind=attempt]").count() >= 6


SLOW = """
goal: one slow step
steps:
  - {id: slow, tool: bench.sleep, params: {seconds: 6}}
"""


def test_a_running_steps_elapsed_time_moves(
    page: Any, console: Console, producer: Producer
) -> None:
    sid = producer.submit(parse_plan(SLOW))
    page.goto(f"{console.url}/sessions/{sid}")
    cell = page.locator('#steps tr[data-step="slow"] td.elapsed[data-running]')
    cell.wait_for(timeout=15_000)
    first = cell.inner_text()
    page.wait_for_function(
        "([sel, before]) => { const c = document.querySelector(sel);"
        " return c && c.dataset.running && c.textContent !== before; }",
        arg=['#steps tr[data-step="slow"] td.elapsed', first],
        timeout=5_000,
    )
    assert page.locator("#timeline rect[data-running]").count() == 1
    page.wait_for_selector("#times:has-text('running for')", timeout=5_000)
    producer.cancel(sid, "enough")
    wait_ended(producer, sid, 30)


def box_of(text: str) -> tuple[float, float, float, float]:
    x, y, w, h = map(float, text.split(","))
    return x, y, w, h


def crosses(a: tuple[float, float], b: tuple[float, float], box: tuple[float, ...]) -> bool:
    """Whether segment a-b enters the box's inside (Liang-Barsky clipping, 0.5 px inset)."""
    x, y, w, h = box[0] + 0.5, box[1] + 0.5, box[2] - 1, box[3] - 1
    dx, dy = b[0] - a[0], b[1] - a[1]
    low, high = 0.0, 1.0
    for p, q in ((-dx, a[0] - x), (dx, x + w - a[0]), (-dy, a[1] - y), (dy, y + h - a[1])):
        if p == 0:
            if q < 0:
                return False
            continue
        t = q / p
        if p < 0:
            low = max(low, t)
        else:
            high = min(high, t)
        if low > high:
            return False
    return True


def crossings(page: Any) -> list[str]:
    """Every (edge, box) pair of the drawn DAG where the edge runs through the box."""
    boxes = page.eval_on_selector_all(
        "svg#dag g.node", "gs => gs.map(g => [g.dataset.step, g.dataset.box])"
    )
    edges = page.eval_on_selector_all(
        "svg#dag path.edge", "ps => ps.map(p => [p.dataset.edge, p.dataset.points])"
    )
    assert boxes
    found = []
    for name, raw in edges:
        points = json.loads(raw)
        for a, b in itertools.pairwise(points):
            found += [f"{name} x {step}" for step, box in boxes if crosses(a, b, box_of(box))]
    return found


def version_doc(plan: Plan) -> dict[str, Any]:
    """A plan version as the session endpoint sends it (what drawDag takes)."""
    ids = set(plan.by_id)
    return {
        "version": 1,
        "added": [],
        "changed": {},
        "ghosts": [],
        "steps": {s.id: {"tool": s.tool, "title": s.title} for s in plan.steps},
        "edges": [[d, s.id] for s in plan.steps for d in s.dependencies if d in ids],
    }


def random_plan(steps: int, seed: int) -> Plan:
    chooser = random.Random(seed)
    made: list[dict[str, Any]] = []
    for i in range(steps):
        earlier = [s["id"] for s in made]
        deps = chooser.sample(earlier, k=min(len(earlier), chooser.choice([0, 1, 1, 2, 3])))
        made.append({"id": f"step_{i:02d}", "tool": "bench.echo", "dependencies": deps})
    return Plan.model_validate({"goal": "a random DAG", "steps": made})


def test_no_edge_of_the_drawn_dag_crosses_a_box(
    page: Any, console: Console, producer: Producer
) -> None:
    sid = producer.submit(parse_plan("steps: [{id: a, tool: bench.echo, params: {value: 1}}]"))
    wait_ended(producer, sid, 30)
    page.goto(f"{console.url}/sessions/{sid}")
    page.wait_for_selector("svg#dag g.node")
    plans = {p.name: load_plan(p) for p in sorted(EXAMPLES.glob("*.yaml"))}
    plans |= {f"random-{seed}": random_plan(50, seed) for seed in (1, 2, 3)}
    for name, plan in plans.items():
        page.evaluate(
            "doc => drawDag(document.getElementById('dag'), doc, {}, () => {})",
            version_doc(plan),
        )
        drawn = page.locator("svg#dag path.edge").count()
        assert drawn == sum(len(s.dependencies) for s in plan.steps), name
        assert crossings(page) == [], name
    # the check itself sees a crossing: a segment straight through the first box
    first = page.eval_on_selector("svg#dag g.node", "g => g.dataset.box")
    x, y, w, h = box_of(first)
    assert crosses((x - 10, y + h / 2), (x + w + 10, y + h / 2), (x, y, w, h))


def test_after_a_replan_the_failed_step_is_still_on_the_page(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_settings: Settings,
    tmp_path: Path,
) -> None:
    llm.script("decider", decision("REPLAN_FULL", "the approach is wrong; start over"))
    fresh = {
        "goal": "three steps, the second one fails for good",
        "steps": [echo("n1", "{{s1.output.value}}", "s1"), echo("n2", "done", "n1")],
    }
    llm.script("replanner", fresh)
    sid, session = run(llm_producer, llm_record, THREE_STEPS)
    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.plan_version == 2
    with console_process(llm_settings.to_env(), tmp_path) as llm_console:
        for tab in open_browser(llm_console):
            tab.goto(f"{llm_console.url}/sessions/{sid}")
            tab.wait_for_selector(node("n2", "completed"), timeout=10_000)
            assert tab.locator("#version").input_value() == "2"
            ghost = tab.locator('svg#dag g.node.ghost[data-step="s2"][data-status="failed"]')
            assert ghost.count() == 1  # dropped by v2, drawn greyed with how it ended
            assert "failed in v1" in ghost.text_content()
            row = tab.locator('#steps tr.ghost[data-step="s2"]')
            assert "failed" in row.inner_text()
            assert "-s2" in tab.locator("#diff").inner_text()
            assert crossings(tab) == []
            # the LLM calls, with their cost, and the prompt viewer for the (admin) user
            assert tab.locator("#llm tr[data-call]").count() >= 2
            tab.locator("#llm tr[data-call] button[data-action=transcript]").first.click()
            tab.wait_for_selector("#transcript pre[data-prompt]", timeout=5_000)
            assert "ROLE:" in tab.locator("#transcript pre[data-prompt]").inner_text()
            assert tab.locator("#timeline rect[data-kind=llm]").count() >= 2
            assert tab.locator("#timeline rect[data-kind=decision]").count() == 1


def test_filters_narrow_the_sessions_list(page: Any, console: Console, producer: Producer) -> None:
    marker = f"filtered-{random.randrange(10**9)}"
    done = producer.submit(
        parse_plan(f"goal: {marker} ok\nsteps: [{{id: a, tool: bench.echo, params: {{value: 1}}}}]")
    )
    bad = producer.submit(
        parse_plan(
            f"goal: {marker} bad\nsteps:\n"
            "  - {id: x, tool: bench.sleep, critical: true, max_retries: 0,\n"
            "     params: {seconds: 0.01, simulate: {fail_attempts: [1], permanent: true}}}"
        )
    )
    wait_ended(producer, done, 30)
    assert wait_ended(producer, bad, 30).status == SessionStatus.FAILED
    page.goto(f"{console.url}/")
    page.fill("#q", marker)
    page.wait_for_function("() => document.querySelectorAll('#sessions tbody tr').length === 2")
    page.locator('#counts button[data-filter="failed"]').click()
    page.wait_for_function("() => document.querySelectorAll('#sessions tbody tr').length === 1")
    row = page.locator(f'#sessions tr[data-sid="{bad}"]')
    assert row.count() == 1
    # a failed session's bar is red where its step failed, not a full blue bar
    assert row.locator('svg.progress rect[data-segment="failed"]').count() == 1
    assert row.locator('svg.progress rect[data-segment="completed"]').count() == 0
    assert "—" in row.inner_text()  # no LLM: tokens and cost are not "0 / $0"
    page.fill("#tool", "bench.echo")
    page.wait_for_function("() => document.querySelectorAll('#sessions tbody tr').length === 0")
    page.locator('#counts button[data-filter="failed"]').click()
    page.wait_for_function("() => document.querySelectorAll('#sessions tbody tr').length === 1")
    assert page.locator(f'#sessions tr[data-sid="{done}"]').count() == 1
