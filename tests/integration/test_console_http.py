"""The console's JSON endpoints, live stream, auth and actions, against the shared stack."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from planloop.config.settings import Settings
from planloop.console.app import create_app
from planloop.core.models import SessionStatus
from planloop.planner.plan import parse_plan
from planloop.producer.client import Producer
from planloop.producer.history import session_history
from planloop.producer.stack import Stack
from tests.conftest import wait_for
from tests.console_users import auth_header, login
from tests.integration.conftest import MakeStack, RunPlan, report_steps, wait_ended

pytestmark = pytest.mark.integration

DIAMOND = """
goal: a diamond
steps:
  - {id: a, tool: bench.echo, params: {value: 1}}
  - {id: b, tool: bench.echo, params: {value: 2}, dependencies: [a]}
  - {id: c, tool: bench.echo, params: {value: 3}, dependencies: [a]}
  - {id: d, tool: bench.echo, params: {value: 4}, dependencies: [b, c]}
"""


BASE = "http://127.0.0.1:8765"  # a Host the console serves (console/hardening.py)


@pytest.fixture
def client(test_settings: Settings, stack: Stack, producer: Producer) -> Iterator[TestClient]:
    """The console as an operator sees it (tests/console_users.py)."""
    app = create_app(test_settings, producer)
    with TestClient(app, base_url=BASE, headers=auth_header(login("otto"))) as http:
        yield http


def test_every_page_and_endpoint_asks_for_a_console_user(
    test_settings: Settings, producer: Producer
) -> None:
    http = TestClient(create_app(test_settings, producer), base_url=BASE)
    for path in ("/", "/sessions/x", "/api/sessions", "/static/session.js"):
        refused = http.get(path)
        assert refused.status_code == 401, path
        assert refused.headers["www-authenticate"].startswith("Basic")
    assert http.get("/api/sessions", headers=auth_header("otto:wrong")).status_code == 401
    assert http.post("/api/sessions/x/cancel", json={}).status_code == 401
    assert http.get("/healthz").json() == {"ok": True}  # for healthchecks only
    assert http.get("/api/sessions", headers=auth_header(login("vera"))).status_code == 200
    # Flower's login is Flower's only
    flower = test_settings.flower_basic_auth.get_secret_value()
    assert http.get("/api/sessions", headers=auth_header(flower)).status_code == 401


def test_sessions_list_and_session_detail(client: TestClient, run_plan: RunPlan) -> None:
    sid, record = run_plan(DIAMOND)
    assert record.status == SessionStatus.COMPLETED

    rows = {s["id"]: s for s in client.get("/api/sessions?limit=200").json()["sessions"]}
    row = rows[sid]
    assert (row["status"], row["steps_done"], row["steps_total"]) == ("completed", 4, 4)
    assert row["replans"] == 0
    assert row["tokens"] is None  # no LLM: nothing to count, not "0 / $0"
    assert row["cost_usd"] is None
    assert row["counts"] == {"completed": 4}
    assert row["age_s"] >= 0

    detail = client.get(f"/api/sessions/{sid}").json()
    assert detail["session"]["status"] == "completed"
    assert {i: s["status"] for i, s in detail["steps"].items()} == dict.fromkeys(
        "abcd", "completed"
    )
    (version,) = detail["versions"]
    assert set(version["steps"]) == set("abcd")
    assert sorted(map(tuple, version["edges"])) == [
        ("a", "b"),
        ("a", "c"),
        ("b", "d"),
        ("c", "d"),
    ]
    types = [e["type"] for e in detail["events"]]
    assert types.count("TASK_COMPLETED") == 4
    assert detail["report"]["status"] == "completed"
    assert client.get("/api/sessions/no-such-session").status_code == 404


def test_the_stream_of_an_ended_session_sends_its_state_and_ends(
    client: TestClient, run_plan: RunPlan
) -> None:
    sid, _ = run_plan(DIAMOND)
    messages: list[tuple[str, dict[str, Any]]] = []
    with client.stream("GET", f"/api/sessions/{sid}/stream") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        name = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                messages.append((name, json.loads(line[6:])))
    names = [n for n, _ in messages]
    assert names[-1] == "end"
    steps = next(d for n, d in messages if n == "steps")
    assert {i: s["status"] for i, s in steps.items()} == dict.fromkeys("abcd", "completed")
    assert "events" in names
    assert "session" in names


def test_actions_are_json_posts_from_the_same_origin(
    client: TestClient, producer: Producer, run_plan: RunPlan
) -> None:
    sid, _ = run_plan(DIAMOND)
    url = f"/api/sessions/{sid}/signal"
    # a cross-site form can only send form encodings: refused before anything is read
    form = client.post(url, data={"text": "x"})
    assert form.status_code == 415
    foreign = client.post(url, json={"text": "x"}, headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403
    # a sandboxed frame or a data: page sends Origin: null; text/plain is what a form or a
    # beacon can send without a preflight
    null = client.post(url, json={"text": "x"}, headers={"Origin": "null"})
    assert null.status_code == 403
    plain = client.post(url, content=b'{"text": "x"}', headers={"Content-Type": "text/plain"})
    assert plain.status_code == 415
    assert client.get(f"/api/sessions/{sid}/cancel").status_code == 405
    # same origin, JSON: it reaches the producer, which says the session has ended
    ended = client.post(f"/api/sessions/{sid}/cancel", json={}, headers={"Origin": BASE})
    assert ended.status_code == 409, ended.text
    assert client.post(f"/api/sessions/{sid}/fly", json={}).status_code == 400
    assert client.post(f"/api/sessions/{sid}/approve", json={}).status_code == 400


def test_approve_and_reject_a_step_from_the_console(client: TestClient, producer: Producer) -> None:
    plan = """
steps:
  - {id: a, tool: bench.echo, params: {value: 1}}
  - {id: b, tool: bench.echo, params: {value: 2}, dependencies: [a], requires_approval: true}
  - {id: c, tool: bench.echo, params: {value: 3}, dependencies: [b]}
"""
    approved, rejected = producer.submit(parse_plan(plan)), producer.submit(parse_plan(plan))
    for sid in (approved, rejected):
        wait_for(
            lambda sid=sid: client.get(f"/api/sessions/{sid}").json()["awaiting_approval"] == ["b"],
            20,
            f"{sid} to wait for an approval",
        )
    told = client.post(f"/api/sessions/{approved}/signal", json={"text": "budget is 5k"})
    assert told.status_code == 200, told.text
    events = client.get(f"/api/sessions/{approved}").json()["events"]
    assert [e["description"] for e in events if e["type"] == "NEW_CONSTRAINT"] == ["budget is 5k"]
    assert client.post(f"/api/sessions/{approved}/approve", json={"step": "b"}).status_code == 200
    assert client.post(f"/api/sessions/{rejected}/reject", json={"step": "b"}).status_code == 200

    done = report_steps(wait_ended(producer, approved, 30))
    assert {i: s["status"] for i, s in done.items()} == dict.fromkeys("abc", "completed")
    record = wait_ended(producer, rejected, 30)
    assert record.status == SessionStatus.COMPLETED
    statuses = {i: s["status"] for i, s in report_steps(record).items()}
    assert statuses == {"a": "completed", "b": "skipped", "c": "skipped"}


def test_retry_a_step_that_failed_for_good_and_its_branch_runs(
    client: TestClient, producer: Producer
) -> None:
    plan = """
steps:
  - {id: broken, tool: bench.sleep, params: {simulate: {fail_attempts: [1], permanent: true}}}
  - {id: after, tool: bench.echo, params: {value: 1}, dependencies: [broken]}
  - {id: slow, tool: bench.sleep, params: {seconds: 6}}
"""
    sid = producer.submit(parse_plan(plan))

    def failed() -> bool:
        steps = client.get(f"/api/sessions/{sid}").json()["steps"]
        return bool(steps["broken"]["status"] == "failed")

    # the rule policy waits (WARNING batch) while `slow` runs: the branch is still pending
    wait_for(failed, 20, "the step to fail for good")
    answer = client.post(f"/api/sessions/{sid}/retry", json={"step": "broken"})
    assert answer.status_code == 200, answer.text

    record = wait_ended(producer, sid, 30)
    assert record.status == SessionStatus.COMPLETED
    assert not record.error  # nothing failed in the end
    steps = report_steps(record)
    assert (steps["broken"]["status"], steps["broken"]["attempts"]) == ("completed", 2)
    assert steps["after"]["status"] == "completed"
    assert steps["slow"]["status"] == "completed"


def test_skip_a_failed_step(client: TestClient, producer: Producer) -> None:
    plan = """
steps:
  - {id: broken, tool: bench.sleep, params: {simulate: {fail_attempts: [1], permanent: true}}}
  - {id: slow, tool: bench.sleep, params: {seconds: 4}}
"""
    sid = producer.submit(parse_plan(plan))
    wait_for(
        lambda: client.get(f"/api/sessions/{sid}").json()["steps"]["broken"]["status"] == "failed",
        20,
        "the step to fail for good",
    )
    assert client.post(f"/api/sessions/{sid}/skip", json={"step": "broken"}).status_code == 200
    record = wait_ended(producer, sid, 30)
    assert record.status == SessionStatus.COMPLETED
    assert not record.error  # skipped by a person: not "completed around failed steps"
    assert report_steps(record)["broken"]["status"] == "skipped"


def test_retry_brings_back_the_branch_a_decision_skipped(private_stack: MakeStack) -> None:
    """With a decision at every WARNING, the failed step's branch is skipped at once; a retry
    makes it pending again and it runs once the step completes."""
    ps = private_stack(batch_react_size=1)
    plan = """
steps:
  - {id: broken, tool: bench.sleep, params: {simulate: {fail_attempts: [1], permanent: true}}}
  - {id: after, tool: bench.echo, params: {value: 1}, dependencies: [broken]}
  - {id: last, tool: bench.echo, params: {value: 2}, dependencies: [after]}
  - {id: slow, tool: bench.sleep, params: {seconds: 8}}
"""
    sid = ps.producer.submit(parse_plan(plan))

    def skipped() -> bool:
        states = ps.hot.steps(sid, ["after", "last"])
        return all(st.status.value == "skipped" for st in states.values())

    wait_for(skipped, 20, "the decision to skip the failed step's branch")
    ps.producer.retry_step(sid, "broken", "the supplier is back")

    record = wait_ended(ps.producer, sid, 30)
    assert record.status == SessionStatus.COMPLETED
    steps = report_steps(record)
    assert {i: s["status"] for i, s in steps.items()} == dict.fromkeys(
        ["broken", "after", "last", "slow"], "completed"
    )
    assert steps["broken"]["attempts"] == 2


FALLBACK = """
steps:
  - id: broken
    tool: bench.sleep
    params: {seconds: 0.01, simulate: {fail_attempts: [1], permanent: true}}
    critical: true
    fallback:
      - {id: alt, tool: bench.echo, params: {value: alternative}}
  - {id: after, tool: bench.echo, params: {value: done}, dependencies: [broken]}
"""


def test_plan_versions_carry_their_diff_and_the_decision_its_reasoning(
    client: TestClient, run_plan: RunPlan, producer: Producer
) -> None:
    sid, record = run_plan(FALLBACK)
    assert record.plan_version == 2
    detail = client.get(f"/api/sessions/{sid}").json()
    first, second = detail["versions"]
    assert (first["added"], first["removed"]) == ([], [])
    assert second["added"] == ["alt"]
    assert "after" in second["changed"]  # it now waits for the fallback
    assert set(second["steps"]) == {"broken", "alt", "after"}
    assert second["changed"]["after"] == ["dependencies"]
    assert second["diff"] == [
        "+ alt (bench.echo)",
        "~ broken: fallback changed",  # its fallback was spent
        "~ after: dependencies changed",
    ]
    # the one diff `planloop show` prints too
    shown = session_history(producer.record, sid)["plan_versions"][1]["diff"]
    assert shown == second["diff"]
    assert "fallback" in second["reason"]
    (decision,) = detail["decisions"]
    assert decision["action"] == "REPLAN_REMAINING"
    assert "broken failed for good" in decision["reasoning"]


def test_the_cli_skips_and_retries_steps_too(
    stack: Stack, producer: Producer, env_overrides: dict[str, str]
) -> None:
    from tests.integration.test_cli import planloop

    plan = """
steps:
  - {id: a, tool: bench.echo, params: {value: 1}}
  - {id: b, tool: bench.echo, params: {value: 2}, dependencies: [a], requires_approval: true}
"""
    sid = producer.submit(parse_plan(plan))
    wait_for(
        lambda: producer.state.steps(sid, ["b"])["b"].note == "awaiting approval",
        20,
        "the approval request",
    )
    done = planloop(env_overrides, "skip", sid, "b", "--note", "not this time")
    assert done.returncode == 0, done.stderr
    assert f"skip of b sent to {sid}" in done.stdout
    record = wait_ended(producer, sid, 20)
    assert report_steps(record)["b"]["status"] == "skipped"
    assert "not this time" in report_steps(record)["b"]["note"]
    unknown = planloop(env_overrides, "retry", "no-such-session", "b")
    assert unknown.returncode == 2


def test_metrics_behind_auth_leave_the_shared_gauges_to_a_supervisor(
    test_settings: Settings, client: TestClient
) -> None:
    assert TestClient(client.app, base_url=BASE).get("/metrics/").status_code == 401
    plain = client.get("/metrics", follow_redirects=False)
    assert plain.status_code == 200  # no redirect to /metrics/: a scraper need not follow
    assert "planloop_" in plain.text
    # read from shared state, exported by one supervisor: here they would count twice
    text = client.get("/metrics/").text
    assert "planloop_queue_depth{" not in text
    assert "planloop_sessions_active " not in text
