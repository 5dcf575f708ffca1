"""Console users and roles over real HTTP: a viewer reads but may not act, an operator acts,
and every action names its actor in the event stream, the SQL record and `planloop show`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient

from planloop.config.settings import Settings
from planloop.console.app import create_app
from planloop.core.models import EventType
from planloop.core.record import SqlRecord
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from planloop.producer.stack import Stack
from tests.conftest import wait_for
from tests.console_users import auth_header, login
from tests.integration.conftest import wait_ended
from tests.integration.test_console_http import BASE
from tests.shipped import shipped

pytestmark = pytest.mark.integration

APPROVAL = """
goal: a write that needs a person
steps:
  - {id: a, tool: bench.echo, params: {value: 1}}
  - {id: b, tool: bench.echo, params: {value: 2}, dependencies: [a], requires_approval: true}
"""
ACTIONS = {
    "approve": {"step": "b"},
    "reject": {"step": "b"},
    "signal": {"text": "budget is 5k"},
    "retry": {"step": "a"},
    "skip": {"step": "a"},
    "cancel": {},
}


@pytest.fixture
def app(test_settings: Settings, stack: Stack, producer: Producer) -> Iterator[TestClient]:
    with TestClient(create_app(test_settings, producer), base_url=BASE) as http:
        yield http


def waiting_for_approval(producer: Producer) -> str:
    sid = producer.submit(parse_plan(APPROVAL))
    wait_for(
        lambda: producer.state.steps(sid, ["b"])["b"].note == "awaiting approval",
        30,
        "the approval request",
    )
    return sid


def test_each_user_is_told_their_role(app: TestClient) -> None:
    for name, role in (("vera", "viewer"), ("otto", "operator"), ("ada", "admin")):
        me = app.get("/api/me", headers=auth_header(login(name))).json()
        assert (me["user"], me["role"]) == (name, role)
        assert me["may_act"] is (role != "viewer")


def test_a_viewer_reads_but_every_action_is_refused(app: TestClient, producer: Producer) -> None:
    sid = waiting_for_approval(producer)
    viewer = auth_header(login("vera"))
    assert app.get(f"/api/sessions/{sid}", headers=viewer).status_code == 200
    before = len(producer.state.events(sid))
    for action, body in ACTIONS.items():
        refused = app.post(f"/api/sessions/{sid}/{action}", json=body, headers=viewer)
        assert refused.status_code == 403, (action, refused.text)
        assert "needs the operator role" in refused.json()["error"]
    # an unknown action is refused a viewer the same way: nothing is said about it
    assert app.post(f"/api/sessions/{sid}/fork", json={}, headers=viewer).status_code == 403
    assert len(producer.state.events(sid)) == before  # nothing was appended
    assert not producer.session(sid).status.ended
    producer.cancel(sid, "test over")


def test_prompts_and_responses_are_for_operators_and_admins_only(
    app: TestClient, producer: Producer
) -> None:
    sid = producer.submit(parse_plan(APPROVAL))
    for name, may_read in (("vera", False), ("otto", True), ("ada", True)):
        who = auth_header(login(name))
        detail = app.get(f"/api/sessions/{sid}", headers=who).json()
        assert detail["may_read_transcripts"] is may_read, name
        answer = app.get(f"/api/sessions/{sid}/llm/1", headers=who)
        # a viewer is refused before anything is looked up; the others learn there is none
        assert answer.status_code == (404 if may_read else 403), (name, answer.text)
    producer.cancel(sid, "test over")


def test_an_operators_approval_runs_and_names_them_everywhere(
    app: TestClient, producer: Producer, record: SqlRecord, env_overrides: dict[str, str]
) -> None:
    sid = waiting_for_approval(producer)
    operator = auth_header(login("otto"))
    answer = app.post(f"/api/sessions/{sid}/approve", json={"step": "b"}, headers=operator)
    assert answer.status_code == 200, answer.text
    assert wait_ended(producer, sid, 30).status.value == "completed"

    # the event stream
    approvals = [e for _, e in producer.state.events(sid) if e.payload.get("command") == "approve"]
    assert [e.actor for e in approvals] == ["otto"]
    assert approvals[0].occurred_at > 0
    assert producer.state.steps(sid, ["b"])["b"].requested_by == "otto"  # its task args name them
    # the SQL record
    rows = [r for r in record.events(sid) if r.type == EventType.EXTERNAL_SIGNAL]
    assert [(r.actor, r.occurred_at > 0) for r in rows] == [("otto", True)]
    # the console page's data and `planloop show`
    detail = app.get(f"/api/sessions/{sid}", headers=operator).json()
    assert [e["actor"] for e in detail["events"] if e["type"] == "EXTERNAL_SIGNAL"] == ["otto"]
    shown = subprocess.run(
        [*shipped().cli(), "show", sid],
        env=shipped().env({**os.environ, **env_overrides}),
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "by otto:" in shown.stdout


def test_the_cli_records_the_os_user_or_its_as_name(
    producer: Producer, stack: Stack, env_overrides: dict[str, str]
) -> None:
    sid = waiting_for_approval(producer)
    env = shipped().env({**os.environ, **env_overrides, "USER": "carol", "LOGNAME": "carol"})

    def cli(*args: str) -> None:
        done = subprocess.run(
            [*shipped().cli(), *args],
            env=env,
            cwd=shipped().home,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr

    cli("signal", sid, "a plain note", "--signal")
    cli("approve", sid, "--step", "b", "--as", "dave")
    wait_ended(producer, sid, 30)
    actors = {
        e.payload.get("command") or e.type.value: e.actor
        for _, e in producer.state.events(sid)
        if e.actor
    }
    assert actors == {"EXTERNAL_SIGNAL": "carol", "approve": "dave"}


def test_a_trusted_proxys_user_header_is_believed_from_that_proxy_only(
    test_settings: Settings, producer: Producer
) -> None:
    settings = test_settings.model_copy(
        update={
            "console_proxy_user_header": "X-Forwarded-User",
            "console_trusted_proxies": ["testclient"],  # the TestClient's client host
        }
    )
    with TestClient(create_app(settings, producer), base_url=BASE) as http:
        me = http.get("/api/me", headers={"X-Forwarded-User": "otto"}).json()
        assert (me["user"], me["role"]) == ("otto", "operator")  # a listed user's role
        me = http.get("/api/me", headers={"X-Forwarded-User": "someone"}).json()
        assert (me["user"], me["role"]) == ("someone", "viewer")  # console_proxy_role
    untrusted = settings.model_copy(update={"console_trusted_proxies": ["10.9.9.9"]})
    with TestClient(create_app(untrusted, producer), base_url=BASE) as http:
        assert http.get("/api/me", headers={"X-Forwarded-User": "otto"}).status_code == 401


def test_nothing_accepts_the_old_default_pair(
    test_settings: Settings, producer: Producer, tmp_path: object
) -> None:
    bare = test_settings.model_copy(
        update={
            "console_users": SecretStr(""),
            "flower_basic_auth": SecretStr(""),
            "secrets_dir": str(tmp_path),
        }
    )
    with TestClient(create_app(bare, producer), base_url=BASE) as http:
        for pair in ("admin:planloop", "admin:admin", "admin:", "planloop:planloop"):
            assert http.get("/api/me", headers=auth_header(pair)).status_code == 401, pair
