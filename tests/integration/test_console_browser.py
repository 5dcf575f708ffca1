"""The console in a real browser: Debian's chromium driven by playwright (executable_path).

The live DAG must follow a running session without a reload (over server-sent events), and
a step waiting for approval must go on when Approve is clicked on the page.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from planloop.config.settings import Settings
from planloop.core.models import SessionStatus
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from planloop.producer.stack import Stack
from tests.conftest import wait_for
from tests.console_users import PASSWORDS
from tests.integration.conftest import report_steps, wait_ended
from tests.integration.console_process import Console, console_process
from tests.integration.test_console_http import FALLBACK

pytestmark = pytest.mark.browser


def chromium() -> str:
    """The system chromium, or skip saying why (scripts/ensure-browser.sh installs it)."""
    path = (
        os.environ.get("PLANLOOP_TEST_CHROMIUM")
        or shutil.which("chromium")
        or shutil.which("chromium-browser")
    )
    if not path:
        pytest.skip(
            "chromium is not installed and scripts/ensure-browser.sh could not install it "
            "(needs root or sudo and apt-get): apt-get install -y chromium"
        )
    return path


@pytest.fixture(scope="module")
def console(
    stack: Stack, env_overrides: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Console]:
    """`planloop console` as a process of its own, on a free port, for the test stack."""
    with console_process(env_overrides, tmp_path_factory.mktemp("console")) as running:
        yield running


@contextmanager
def logged_in(user: str, password: str, shot: Path) -> Iterator[object]:
    """A chromium tab logged in to the console as ``user``; a screenshot at ``shot`` after."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium(),
            # root in a container: chromium's sandbox needs user namespaces it may not have
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        context = browser.new_context(
            http_credentials={"username": user, "password": password},
            viewport={"width": 1280, "height": 900},
        )
        tab = context.new_page()
        try:
            yield tab
        finally:
            tab.screenshot(path=str(shot), full_page=True)
            context.close()
            browser.close()


@pytest.fixture
def page(console: Console, tmp_path: Path) -> Iterator[object]:
    with logged_in(console.user, console.password, tmp_path / "console.png") as tab:
        yield tab


def node(step: str, status: str) -> str:
    return f'svg#dag g.node[data-step="{step}"][data-status="{status}"]'


# Long enough for the page to open while the first step runs, on a loaded machine too (a
# session's first dispatch comes within milliseconds of the submit).
CHAIN = """
goal: a chain the page follows live
steps:
  - {id: fetch, tool: bench.sleep, params: {seconds: 4}}
  - {id: enrich, tool: bench.sleep, params: {seconds: 2}, dependencies: [fetch]}
  - {id: side, tool: bench.echo, params: {value: 1}, dependencies: [fetch]}
  - {id: report, tool: bench.sleep, params: {seconds: 0.5}, dependencies: [enrich, side]}
"""


def test_the_dag_follows_a_running_session_without_a_reload(
    page: object, console: Console, producer: Producer
) -> None:
    from playwright.sync_api import Page

    assert isinstance(page, Page)
    sid = producer.submit(parse_plan(CHAIN))
    page.goto(f"{console.url}/sessions/{sid}")
    page.wait_for_selector("svg#dag g.node", timeout=15_000)
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads

    page.wait_for_selector(node("fetch", "running"), timeout=15_000)
    running = page.eval_on_selector(
        'g.node[data-step="fetch"] rect', "r => getComputedStyle(r).fill"
    )
    page.wait_for_selector(node("enrich", "running"), timeout=15_000)
    assert page.locator(node("fetch", "completed")).count() == 1
    done = page.eval_on_selector('g.node[data-step="fetch"] rect', "r => getComputedStyle(r).fill")
    assert running != done  # the colour itself changed, not only an attribute
    page.wait_for_selector(node("report", "completed"), timeout=20_000)
    page.wait_for_selector('#status[data-status="completed"]', timeout=10_000)

    assert page.evaluate("window.__sameDocument") is True
    edges = page.locator("svg#dag path.edge").count()
    assert edges == 4
    # each completion was appended to the timeline as it came
    assert page.locator("#events tbody tr", has_text="TASK_COMPLETED").count() == 4
    assert wait_ended(producer, sid, 10).status == SessionStatus.COMPLETED

    page.goto(f"{console.url}/")  # the sessions list links to it, with its progress
    row = page.locator(f'#sessions tr[data-sid="{sid}"]')
    row.wait_for(timeout=10_000)
    assert "completed" in row.inner_text()
    assert "4/4" in row.inner_text()
    row.locator("a").click()
    page.wait_for_selector(node("report", "completed"), timeout=10_000)


def test_approve_from_the_page_lets_the_session_go_on(
    page: object, console: Console, producer: Producer, test_settings: Settings
) -> None:
    from playwright.sync_api import Page

    assert isinstance(page, Page)
    plan = """
goal: a write that needs a person's approval
steps:
  - {id: quote, tool: bench.echo, params: {value: 1}}
  - {id: order, tool: bench.echo, params: {value: 2}, dependencies: [quote],
     requires_approval: true}
  - {id: confirm, tool: bench.echo, params: {value: 3}, dependencies: [order]}
"""
    sid = producer.submit(parse_plan(plan))
    page.goto(f"{console.url}/sessions/{sid}")
    approve = page.locator('button[data-action="approve"][data-step="order"]')
    approve.wait_for(timeout=20_000)
    assert page.locator(node("quote", "completed")).count() == 1
    assert page.locator(node("order", "pending")).count() == 1
    assert not producer.session(sid).status.ended  # it waits for the person

    page.once("dialog", lambda dialog: dialog.dismiss())  # asked first: "no" sends nothing
    approve.click()
    page.wait_for_selector("#action-result:has-text('approve not sent')", timeout=5_000)
    assert page.locator(node("order", "pending")).count() == 1
    page.once("dialog", lambda dialog: dialog.accept())
    approve.click()
    page.wait_for_selector(node("confirm", "completed"), timeout=20_000)
    page.wait_for_selector('#status[data-status="completed"]', timeout=10_000)
    record = wait_ended(producer, sid, 10)
    assert record.status == SessionStatus.COMPLETED
    assert report_steps(record)["order"]["status"] == "completed"
    assert page.locator('button[data-action="approve"]').count() == 0


def test_plan_versions_switch_on_the_page_with_the_diff_outlined(
    page: object, console: Console, producer: Producer
) -> None:
    from playwright.sync_api import Page

    assert isinstance(page, Page)
    sid = producer.submit(parse_plan(FALLBACK))
    wait_ended(producer, sid, 30)
    page.goto(f"{console.url}/sessions/{sid}")
    page.wait_for_selector('svg#dag g.node.added[data-step="alt"]', timeout=10_000)
    assert page.locator("#version").input_value() == "2"  # the newest version first
    assert "+alt" in page.locator("#diff").inner_text()

    page.select_option("#version", "1")
    page.wait_for_selector('svg#dag g.node[data-step="alt"]', state="detached", timeout=5_000)
    assert page.locator("svg#dag g.node").count() == 2
    assert page.locator("svg#dag g.node.added").count() == 0
    assert page.locator(node("broken", "failed")).count() == 1


APPROVAL = """
goal: a write that needs a person's approval
steps:
  - {id: quote, tool: bench.echo, params: {value: 1}}
  - {id: order, tool: bench.echo, params: {value: 2}, dependencies: [quote],
     requires_approval: true}
"""


def test_a_viewer_sees_no_actions_and_is_refused_one_an_operator_takes(
    console: Console, producer: Producer, tmp_path: Path
) -> None:
    from playwright.sync_api import Page

    sid = producer.submit(parse_plan(APPROVAL))
    wait_for(
        lambda: producer.state.steps(sid, ["order"])["order"].note == "awaiting approval",
        30,
        "the approval request",
    )
    with logged_in("vera", PASSWORDS["vera"], tmp_path / "viewer.png") as tab:
        assert isinstance(tab, Page)
        tab.goto(f"{console.url}/sessions/{sid}")
        tab.wait_for_selector('#me:has-text("vera (viewer)")', timeout=15_000)
        tab.wait_for_selector('[data-approval="order"]', state="attached", timeout=15_000)
        assert not tab.locator('button[data-action="approve"]').is_visible()
        assert not tab.locator("#cancel").is_visible()
        # the page's own script, as the viewer, asking anyway: the server refuses it
        status = tab.evaluate(
            """async (sid) => (await fetch(`/api/sessions/${sid}/approve`, {method: "POST",
                 headers: {"Content-Type": "application/json"},
                 body: JSON.stringify({step: "order"})})).status""",
            sid,
        )
        assert status == 403
    assert not producer.session(sid).status.ended
    with logged_in(console.user, console.password, tmp_path / "operator.png") as tab:
        assert isinstance(tab, Page)
        tab.goto(f"{console.url}/sessions/{sid}")
        tab.wait_for_selector('#me:has-text("otto (operator)")', timeout=15_000)
        tab.once("dialog", lambda dialog: dialog.accept())  # the page asks first
        tab.locator('button[data-action="approve"][data-step="order"]').click()
        tab.wait_for_selector(node("order", "completed"), timeout=20_000)
        row = tab.locator("#events tbody tr", has_text="EXTERNAL_SIGNAL")
        row.first.wait_for(timeout=10_000)
        assert row.first.locator("td.actor").inner_text() == "otto"
    assert wait_ended(producer, sid, 20).status == SessionStatus.COMPLETED
