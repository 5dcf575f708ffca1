"""Pages on another origin against the console, in Debian's chromium (playwright,
executable_path), with the console's login cached in the browser as a person's would be.

A framing page cannot load the console (clickjacking); a cross-origin page cannot trigger an
action by form, fetch, beacon or a click through a frame; markup in every field the pages
render (goal, params written and resolved, outputs, notes and errors, signals, the LLM calls'
prompts and responses) stays text. The attacker's pages are
served by an HTTP server of their own on loopback, under another origin (``localhost`` and
its own port, where the console is ``127.0.0.1``): on loopback, chromium's local-network
protections stay out of the way, so what stops each attack is the console itself.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import planloop.console
from planloop.config.settings import Settings
from planloop.core.record import SqlRecord
from planloop.planner.plan import Plan, parse_plan
from planloop.producer.client import Producer
from planloop.producer.stack import Stack
from tests.conftest import wait_for
from tests.integration.conftest import report_steps, wait_ended
from tests.integration.console_process import Console, console_process
from tests.integration.test_console_browser import chromium
from tests.integration.test_console_guards import refused_count
from tests.integration.test_console_inspect import open_browser
from tests.integration.test_planning_loop import THREE_STEPS, decision, run
from tests.llm_server import ScriptedLLMServer

pytestmark = pytest.mark.browser

WAITS = """
goal: waits for an approval only a person gives
steps:
  - {id: quote, tool: bench.echo, params: {value: 1}}
  - {id: order, tool: bench.echo, params: {value: 2}, dependencies: [quote],
     requires_approval: true}
"""
# Markup that would run if a field were ever written as HTML (or a URL) instead of text.
XSS = (
    '<img src=x onerror="window.__xss=1"> <script>window.__xss=2</script> '
    '"><svg onload="window.__xss=3"> <a href="javascript:window.__xss=4">x</a> '
    "<iframe srcdoc='<script>parent.__xss=5</script>'></iframe>"
)
WATCH_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__violations.push(e.violatedDirective + " " + e.blockedURI));
"""


@pytest.fixture(scope="module")
def console(
    stack: Stack, env_overrides: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Console]:
    with console_process(env_overrides, tmp_path_factory.mktemp("attacks")) as running:
        yield running


@pytest.fixture
def browser_context(console: Console, tmp_path: Path) -> Iterator[Any]:
    """A browser that holds the console's login, and the attacker's site beside it."""
    from playwright.sync_api import sync_playwright

    pages: dict[str, str] = {}

    class AttackerPages(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, "nothing here").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    site = ThreadingHTTPServer(("127.0.0.1", 0), AttackerPages)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    with site, sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium(), args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        context = browser.new_context(
            http_credentials={"username": console.user, "password": console.password},
            viewport={"width": 1280, "height": 900},
        )
        context.attacker_pages = pages  # type: ignore[attr-defined]
        context.attacker = f"http://localhost:{site.server_address[1]}"  # type: ignore[attr-defined]
        try:
            yield context
        finally:
            site.shutdown()
            for index, tab in enumerate(context.pages):
                tab.screenshot(path=str(tmp_path / f"tab{index}.png"), full_page=True)
            context.close()
            browser.close()


@pytest.fixture
def waiting(producer: Producer) -> Iterator[str]:
    sid = producer.submit(parse_plan(WAITS))
    wait_for(lambda: awaits(producer, sid), 30, "the approval request")
    yield sid
    if not producer.session(sid).status.ended:
        producer.cancel(sid, "test over")


def awaits(producer: Producer, sid: str) -> bool:
    state = producer.state.steps(sid, ["order"])["order"]
    return state.note == "awaiting approval" and state.status.value == "pending"


def refusals(console: Console) -> float:
    """Actions the console refused: as foreign or not JSON, or unauthenticated."""
    reasons = ("cross_origin", "not_json", "status_401")
    return sum(refused_count(console, reason) for reason in reasons)


def console_posts(responses: list[Any]) -> list[tuple[str, int]]:
    return [(r.request.method, r.status) for r in responses if r.request.method == "POST"]


def test_a_framing_page_cannot_load_the_console(
    browser_context: Any, console: Console, waiting: str
) -> None:
    for target in ("/", f"/sessions/{waiting}"):
        browser_context.attacker_pages["/frame.html"] = (
            f'<iframe id="f" src="{console.url}{target}" width="1200" height="800" '
            'style="opacity:0.1"></iframe>'
        )
        tab = browser_context.new_page()
        with tab.expect_response(lambda r, t=target: r.url == f"{console.url}{t}") as framed:
            tab.goto(f"{browser_context.attacker}/frame.html")
        assert framed.value.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in framed.value.headers["content-security-policy"]
        frame = tab.frame_locator("#f")
        # chromium shows its own error page in the frame instead of the console
        assert frame.locator("#sessions, #dag, header").count() == 0
        tab.close()


def test_a_cross_origin_page_cannot_trigger_an_action(
    browser_context: Any, console: Console, producer: Producer, waiting: str
) -> None:
    approve = f"{console.url}/api/sessions/{waiting}/approve"
    signal = f"{console.url}/api/sessions/{waiting}/signal"
    responses: list[Any] = []
    browser_context.on(
        "response", lambda r: responses.append(r) if r.url.startswith(console.url) else None
    )
    pages = browser_context.attacker_pages
    # 1. a form: the classic text/plain body that looks like JSON
    pages["/form.html"] = (
        f'<form id="f" method="POST" action="{approve}" enctype="text/plain">'
        '<input name=\'{"step": "order", "x": "\' value=\'"}\'></form>'
        "<script>document.getElementById('f').submit()</script>"
    )
    tab = browser_context.new_page()
    with tab.expect_response(approve) as answered:
        tab.goto(f"{browser_context.attacker}/form.html")
    assert answered.value.status in (403, 415)

    # 2. fetch: with JSON it needs a preflight the console never grants; without, it is text
    tab.goto(f"{browser_context.attacker}/blank.html")
    outcomes = tab.evaluate(
        """async ([approve, signal]) => {
          const out = [];
          for (const init of [
            {method: "POST", credentials: "include", headers: {"Content-Type": "application/json"},
             body: JSON.stringify({step: "order"})},
            {method: "POST", credentials: "include", mode: "no-cors",
             headers: {"Content-Type": "text/plain"}, body: JSON.stringify({step: "order"})},
            {method: "POST", credentials: "include", mode: "no-cors",
             body: new Blob([JSON.stringify({text: "from a fetch"})], {type: "text/plain"})},
          ]) {
            try { const r = await fetch(init.body instanceof Blob ? signal : approve, init);
                  out.push(r.type + " " + r.status); }
            catch (e) { out.push("refused " + e.name); }
          }
          return out;
        }""",
        [approve, signal],
    )
    assert outcomes[0] == "refused TypeError"  # the preflight failed: no POST was sent
    # sent as text and refused; the answer is opaque, or withheld (Cross-Origin-Resource-Policy)
    assert set(outcomes[1:]) <= {"opaque 0", "refused TypeError"}, outcomes

    # 3. a beacon (fire and forget, credentials included): the console counts its refusal
    before = refusals(console)
    sent = tab.evaluate(
        "(url) => navigator.sendBeacon(url, JSON.stringify({text: 'from a beacon'}))", signal
    )
    assert sent is True
    wait_for(lambda: refusals(console) > before, 15, "the console to refuse the beacon")

    # 4. a click through a nearly transparent frame over a decoy
    pages["/click.html"] = (
        '<button id="decoy" style="position:absolute;left:0;top:0;width:1200px;height:800px">'
        f'win a prize</button><iframe src="{console.url}/sessions/{waiting}" width="1200" '
        'height="800" style="position:absolute;left:0;top:0;opacity:0.05"></iframe>'
    )
    tab.goto(f"{browser_context.attacker}/click.html")
    for x in range(50, 1200, 150):
        for y in range(50, 800, 100):
            tab.mouse.click(x, y)

    refused = console_posts(responses)
    assert refused, "the console saw none of the attacks"
    assert all(status in (401, 403, 415) for _, status in refused), refused
    assert awaits(producer, waiting)  # still waiting for a person
    types = [event.type.value for _, event in producer.state.events(waiting, after="-")]
    assert "NEW_CONSTRAINT" not in types
    assert "EXTERNAL_SIGNAL" not in types


def test_markup_in_every_rendered_field_stays_text(
    browser_context: Any, console: Console, producer: Producer
) -> None:
    text = json.dumps(XSS)  # a YAML double-quoted scalar
    plan = f"""
goal: {text}
steps:
  - {{id: shown, tool: bench.echo, params: {{value: {text}}}}}
  - {{id: held, tool: bench.echo, params: {{value: 2}}, dependencies: [shown],
     requires_approval: true}}
"""
    sid = producer.submit(parse_plan(plan))
    wait_for(
        lambda: producer.state.steps(sid, ["held"])["held"].note == "awaiting approval",
        30,
        "the approval request",
    )
    producer.signal(sid, XSS, constraint=True)
    producer.skip_step(sid, "held", XSS)  # a person's note, shown as the step's note
    record = wait_ended(producer, sid, 30)
    assert report_steps(record)["held"]["status"] == "skipped"

    tab = browser_context.new_page()
    tab.add_init_script(WATCH_VIOLATIONS)
    tab.goto(f"{console.url}/sessions/{sid}")
    tab.wait_for_selector('#status[data-status="completed"]', timeout=15_000)
    tab.locator('#events tbody tr:has-text("NEW_CONSTRAINT")').wait_for(timeout=10_000)
    tab.click('svg#dag g.node[data-step="shown"]')  # the step's params
    shown = tab.inner_text("body")
    tab.goto(f"{console.url}/")
    tab.locator(f'#sessions tr[data-sid="{sid}"]').wait_for(timeout=10_000)
    listed = tab.inner_text("#sessions")

    assert shown.count('<img src=x onerror="window.__xss=1">') >= 4  # goal, params, note, signal
    assert '<img src=x onerror="window.__xss=1">' in listed
    for url in (f"{console.url}/sessions/{sid}", f"{console.url}/"):
        tab.goto(url)
        tab.wait_for_load_state("networkidle")
        assert_inert(tab, session_page="/sessions/" in url)


def assert_inert(tab: Any, *, session_page: bool) -> None:
    """Nothing of the markup ran, or even tried to, and the page holds no element it made."""
    found = tab.evaluate(
        """() => ({xss: window.__xss ?? null, violations: window.__violations,
                   imgs: document.querySelectorAll("img, iframe, a[href^=javascript]").length,
                   scripts: [...document.scripts].map((s) => s.getAttribute("src"))})"""
    )
    assert found["xss"] is None
    assert found["violations"] == []  # nothing even tried to run
    assert found["imgs"] == 0
    # only the console's own files (the page scripts and the vendored dagre), as shipped
    page = "session.html" if session_page else "index.html"
    assert found["scripts"] == shipped_scripts(page)


def shipped_scripts(page: str) -> list[str]:
    """The ``<script src>`` tags of the console's ``page`` as the wheel ships it."""
    html = (Path(planloop.console.__file__).parent / "static" / page).read_text()
    return re.findall(r'<script src="([^"]+)"></script>', html)


MARKUP = '<img src=x onerror="window.__xss=1">'


def test_markup_in_the_step_panel_stays_text(
    browser_context: Any, console: Console, producer: Producer
) -> None:
    """A tool's output, the params resolved from it, and a tool's error text (quoting a
    resolved param), shown by the step panel."""
    plan = Plan.model_validate(
        {
            "goal": "the step panel shows what tools said",
            "steps": [
                {"id": "shown", "tool": "bench.echo", "params": {"value": XSS}},
                {
                    "id": "resolved",
                    "tool": "bench.echo",
                    "params": {"value": "{{shown.output.value}}"},
                    "dependencies": ["shown"],
                },
                {  # its error names the supplier: the markup
                    "id": "broken",
                    "tool": "supply_chain.verify_supplier",
                    "params": {
                        "sku": "SKU12345",
                        "supplier_id": "{{resolved.output.value}}",
                        "available": False,
                    },
                    "dependencies": ["resolved"],
                    "max_retries": 0,
                },
            ],
        }
    )
    sid = producer.submit(plan)
    record = wait_ended(producer, sid, 30)
    assert report_steps(record)["broken"]["status"] == "failed"

    tab = browser_context.new_page()
    tab.add_init_script(WATCH_VIOLATIONS)
    tab.goto(f"{console.url}/sessions/{sid}")
    tab.wait_for_selector('svg#dag g.node[data-step="broken"][data-status="failed"]')
    panel = tab.locator("#step-panel")
    tab.click('svg#dag g.node[data-step="shown"]')
    panel.locator('[data-output="complete"] pre').wait_for(timeout=10_000)
    output = json.loads(panel.locator('[data-output="complete"] pre').inner_text())
    assert output == {"value": XSS}  # the output, shown whole as text
    tab.click('svg#dag g.node[data-step="resolved"]')
    tab.wait_for_selector('#step-detail[data-shown="resolved"]', timeout=10_000)
    assert "{{shown.output.value}}" in panel.locator("pre.json").first.inner_text()
    resolved = json.loads(panel.locator("[data-resolved] pre").inner_text())
    assert resolved == {"value": XSS}  # as the worker got it
    tab.click('svg#dag g.node[data-step="broken"]')
    error = tab.locator('#step-panel [data-error-kind="permanent"]')
    error.wait_for(timeout=10_000)
    assert MARKUP in error.inner_text()  # the error text quotes the supplier
    assert MARKUP in panel.locator("tr[data-attempt]").first.inner_text()  # and the attempt's
    assert_inert(tab, session_page=True)


def test_markup_in_llm_prompts_and_responses_stays_text(
    llm: ScriptedLLMServer,
    llm_producer: Producer,
    llm_record: SqlRecord,
    llm_settings: Settings,
    tmp_path: Path,
) -> None:
    """The prompt viewer shows a call's kept prompt (quoting the goal) and response (the
    decider's reasoning) as text; so do the decisions below it."""
    llm.script("decider", decision("ABORT", f"give up: {XSS}"))
    plan = THREE_STEPS.replace(
        "goal: three steps, the second one fails for good", f"goal: {json.dumps(XSS)}"
    )
    sid, _session = run(llm_producer, llm_record, plan)
    with console_process(llm_settings.to_env(), tmp_path) as llm_console:
        for tab in open_browser(llm_console):
            tab.add_init_script(WATCH_VIOLATIONS)
            tab.goto(f"{llm_console.url}/sessions/{sid}")
            button = tab.locator("#llm tr[data-call] button[data-action=transcript]").first
            button.wait_for(timeout=15_000)
            button.click()
            tab.wait_for_selector("#transcript pre[data-prompt]", timeout=5_000)
            # the goal in the prompt, the reasoning in the response (as JSON: quotes escaped)
            assert "<img src=x onerror=" in tab.locator("#transcript pre[data-prompt]").inner_text()
            kept = tab.locator("#transcript pre[data-response]").inner_text()
            assert "<img src=x onerror=" in kept
            assert "give up:" in tab.inner_text("body")  # the decision's reasoning
            assert_inert(tab, session_page=True)
