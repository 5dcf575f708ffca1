"""Forking from the console in a real browser (chromium via playwright): an admin edits one
step of a finished session's plan, confirms, and only that step and what depends on it run
in the new session; the two pages link to each other. Effects are counted outside Redis, in
the effect ledger's audit file.

With ``PLANLOOP_TEST_DOCS_SHOTS=1`` the forked session's page is saved as
``docs/console-forked.png``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from planloop.config.settings import Settings
from planloop.core.effects import EffectAudit
from planloop.core.models import SessionOptions, SessionStatus
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from planloop.producer.stack import Stack
from tests.conftest import wait_for
from tests.console_users import PASSWORDS
from tests.integration.conftest import wait_ended
from tests.integration.console_process import Console, console_process
from tests.integration.test_console_browser import logged_in

pytestmark = pytest.mark.browser

DOCS = Path(__file__).resolve().parents[2] / "docs"

DIAMOND = """
goal: stock up on SKU1 after checking two suppliers
steps:
  - {id: order, tool: bench.write, params: {label: order}}
  - {id: supplier_a, tool: bench.write, params: {label: a}, dependencies: [order]}
  - {id: supplier_b, tool: bench.write, params: {label: b}, dependencies: [order]}
  - {id: reserve, tool: bench.write, params: {label: r}, dependencies: [supplier_a, supplier_b]}
  - {id: notify, tool: bench.write, params: {label: notify}, dependencies: [reserve]}
"""


@pytest.fixture(scope="module")
def admin_console(
    stack: Stack, env_overrides: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Console]:
    with console_process(env_overrides, tmp_path_factory.mktemp("console"), user="ada") as c:
        yield c


def effects_of(settings: Settings, sid: str) -> Counter[str]:
    counts = EffectAudit(Path(settings.effect_audit_path)).counts()
    return Counter({k.split(":", 1)[1]: n for k, n in counts.items() if k.startswith(sid + ":")})


def test_a_fork_from_the_console_runs_only_the_changed_steps(
    admin_console: Console, producer: Producer, test_settings: Settings, tmp_path: Path
) -> None:
    from playwright.sync_api import Page

    parent = producer.submit(parse_plan(DIAMOND))
    assert wait_ended(producer, parent).status == SessionStatus.COMPLETED
    assert effects_of(test_settings, parent) == Counter(
        dict.fromkeys(["order", "supplier_a", "supplier_b", "reserve", "notify"], 1)
    )
    shot = tmp_path / "forked.png"
    with logged_in("ada", PASSWORDS["ada"], tmp_path / "parent.png") as tab:
        assert isinstance(tab, Page)
        tab.goto(f"{admin_console.url}/sessions/{parent}")
        tab.wait_for_selector("#lineage-actions:not([hidden])", timeout=15_000)
        tab.click("#fork-edit")
        text = tab.input_value("#fork-plan")
        plan = json.loads(text)
        for step in plan["steps"]:
            if step["id"] == "supplier_b":
                step["params"]["label"] = "b, second supplier"
        tab.fill("#fork-plan", json.dumps(plan))
        tab.once("dialog", lambda dialog: dialog.accept())
        tab.click("#fork-edited")
        link = tab.wait_for_selector("#lineage-result a", timeout=15_000)
        assert link is not None
        child = link.inner_text().strip()
        assert wait_ended(producer, child).status == SessionStatus.COMPLETED

        # only the edited step and what depends on it ran again, once each
        ran = effects_of(test_settings, child)
        assert ran == Counter(dict.fromkeys(["supplier_b", "reserve", "notify"], 1)), ran
        assert sum(effects_of(test_settings, parent).values()) == 5  # the parent's, untouched

        tab.goto(f"{admin_console.url}/sessions/{child}")
        back = tab.wait_for_selector("#forked-from a", timeout=15_000)
        assert back is not None
        assert back.inner_text() == parent
        assert "carried over (not run again): order, supplier_a" in tab.inner_text("#forked-from")
        tab.wait_for_selector('svg#dag g.node[data-step="notify"][data-status="completed"]')
        # a carried step's panel shows the effect it made in the parent, under its key
        panel = tab.evaluate("url => getJSON(url)", f"/api/sessions/{child}/steps/order")
        assert panel["idempotency_key"] == f"{parent}:order"
        assert [e["idempotency_key"] for e in panel["effects"]] == [f"{parent}:order"]
        assert panel["note"] == f"carried from {parent}"
        tab.screenshot(path=str(shot), full_page=True)
        tab.goto(f"{admin_console.url}/sessions/{parent}")
        forward = tab.wait_for_selector("#forks a", timeout=15_000)
        assert forward is not None
        assert forward.inner_text() == child
    if os.environ.get("PLANLOOP_TEST_DOCS_SHOTS"):
        shutil.copy(shot, DOCS / "console-forked.png")


def test_an_operator_sees_no_fork_and_is_refused_one(
    stack: Stack,
    env_overrides: dict[str, str],
    producer: Producer,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import Page

    sid = producer.submit(parse_plan(DIAMOND))
    wait_ended(producer, sid)
    with (
        console_process(env_overrides, tmp_path, user="otto") as console,
        logged_in("otto", PASSWORDS["otto"], tmp_path / "operator.png") as tab,
    ):
        assert isinstance(tab, Page)
        tab.goto(f"{console.url}/sessions/{sid}")
        tab.wait_for_selector("#summary:has-text('goal')", timeout=15_000)
        assert tab.locator("#lineage-actions").is_hidden()
        status = tab.evaluate(
            "async (url) => (await fetch(url, {method: 'POST', headers: "
            "{'Content-Type': 'application/json'}, body: '{}'})).status",
            f"/api/sessions/{sid}/fork",
        )
        assert status == 403
        wait_for(lambda: producer.children(sid) == [], 1, "no fork recorded")


SLOW_CHAIN = """
goal: a chain its deadline cuts short
steps:
  - {id: first, tool: bench.write, params: {label: first}}
  - {id: second, tool: bench.sleep, params: {seconds: 3}, dependencies: [first]}
  - {id: third, tool: bench.write, params: {label: third}, dependencies: [second]}
"""


def test_continue_from_the_console_runs_only_what_did_not_complete(
    admin_console: Console, producer: Producer, test_settings: Settings, tmp_path: Path
) -> None:

    from playwright.sync_api import Page

    options = SessionOptions(deadline_s=1, compensate_on_failure=False)
    sid = producer.submit(parse_plan(SLOW_CHAIN), options)
    assert wait_ended(producer, sid).status == SessionStatus.FAILED
    with logged_in("ada", PASSWORDS["ada"], tmp_path / "continued.png") as tab:
        assert isinstance(tab, Page)
        tab.goto(f"{admin_console.url}/sessions/{sid}")
        tab.wait_for_selector("#continue:not([hidden])", timeout=15_000)
        tab.fill("#continue-deadline", "60")
        tab.once("dialog", lambda dialog: dialog.accept())
        tab.click("#continue")
        tab.wait_for_selector(
            'svg#dag g.node[data-step="third"][data-status="completed"]', timeout=30_000
        )
        assert tab.locator("#continue").is_hidden()  # completed: nothing to continue
    assert producer.session(sid).status == SessionStatus.COMPLETED
    assert effects_of(test_settings, sid) == Counter({"first": 1, "third": 1})
    row = producer.record.session(sid)
    assert row is not None
    assert row.continued == 1
