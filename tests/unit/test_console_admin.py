"""The console's admin endpoints (console/admin.py): lessons and settings for the admin role
only (a viewer and an operator get 403), each change recorded with its actor, secrets
masked in the settings. A SQLite record of the test's own; no Redis is reached."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, cast

import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient

from planloop.config.settings import Settings
from planloop.console.app import create_app
from planloop.console.users import ConsoleLogin, Role, User
from planloop.core.lessons import LessonStore
from planloop.core.record import SqlRecord, make_engine
from planloop.producer.client import Producer
from tests.console_users import cheap_hash

PASSWORDS = {"vera": "viewer-pass-1", "otto": "operator-pass-1", "ada": "admin-pass-1"}
ROLES = {"vera": Role.VIEWER, "otto": Role.OPERATOR, "ada": Role.ADMIN}
LLM_KEY = "sk-admin-view-secret-0123456789"
REDIS_PASSWORD = "orchardlanternmeadow"
LESSON = {
    "goal_pattern": "restock a warehouse",
    "root_cause": "the supplier API times out on big orders",
    "suggestion": "split orders above 500 units",
}


@pytest.fixture
def console(tmp_path: Path) -> TestClient:
    url = f"sqlite:///{tmp_path / 'record.db'}"
    SqlRecord.from_url(url)  # the schema, as a supervisor makes it
    settings = Settings(
        database_url=url,
        redis_url=f"redis://:{REDIS_PASSWORD}@127.0.0.1:1/0",  # never reached here
        llm_api_key=SecretStr(LLM_KEY),
        lessons_embedding_backend="lexical",
    )
    users = {n: User(n, ROLES[n], cheap_hash(p)) for n, p in PASSWORDS.items()}
    app = create_app(settings, producer=cast(Producer, object()), login=ConsoleLogin(users))
    return TestClient(app, base_url="http://127.0.0.1:8765")


def auth(user: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def post(http: TestClient, user: str, path: str, body: dict[str, Any]) -> Any:
    return http.post(path, json=body, headers=auth(user))


ADMIN_CALLS = [
    ("GET", "/api/admin/lessons"),
    ("POST", "/api/admin/lessons"),
    ("POST", "/api/admin/lessons/1/disable"),
    ("POST", "/api/admin/lessons/1/enable"),
    ("POST", "/api/admin/lessons/1/delete"),
    ("GET", "/api/admin/settings"),
]


@pytest.mark.parametrize("user", ["vera", "otto"])
@pytest.mark.parametrize(("method", "path"), ADMIN_CALLS, ids=[" ".join(c) for c in ADMIN_CALLS])
def test_a_viewer_or_operator_is_refused_every_admin_endpoint(
    console: TestClient, user: str, method: str, path: str
) -> None:
    answer = console.request(method, path, json=LESSON, headers=auth(user))

    assert answer.status_code == 403, answer.text
    assert f"user {user!r} is a {ROLES[user].value}" in answer.json()["error"]
    assert "it needs the admin role" in answer.json()["error"]


def test_without_a_login_every_admin_endpoint_asks_for_one(console: TestClient) -> None:
    for method, path in ADMIN_CALLS:
        assert console.request(method, path, json={}).status_code == 401, path


def test_an_admin_adds_lists_disables_enables_and_deletes_a_lesson(
    console: TestClient, tmp_path: Path
) -> None:
    added = post(console, "ada", "/api/admin/lessons", LESSON)
    assert added.status_code == 200, added.text
    lesson_id = added.json()["id"]
    assert added.json()["actor"] == "ada"

    listed = console.get("/api/admin/lessons", headers=auth("ada")).json()["lessons"]
    assert [item["id"] for item in listed] == [lesson_id]
    assert "split orders above 500 units" in listed[0]["lesson"]

    disabled = post(console, "ada", f"/api/admin/lessons/{lesson_id}/disable", {"reason": "wrong"})
    assert disabled.status_code == 200, disabled.text
    store = LessonStore(make_engine(f"sqlite:///{tmp_path / 'record.db'}"))
    row = store.get(lesson_id)
    assert row is not None
    assert not row.enabled
    assert "(by ada)" in str(row.disabled_reason)  # who disabled it, for the record

    assert post(console, "ada", f"/api/admin/lessons/{lesson_id}/enable", {}).status_code == 200
    row = store.get(lesson_id)
    assert row is not None
    assert row.enabled
    assert post(console, "ada", f"/api/admin/lessons/{lesson_id}/delete", {}).status_code == 200
    assert store.get(lesson_id) is None
    assert post(console, "ada", f"/api/admin/lessons/{lesson_id}/delete", {}).status_code == 404


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/api/admin/lessons", {**LESSON, "root_cause": "a\x1b]0;x\x07"}, 400),
        ("/api/admin/lessons", {"goal_pattern": "g"}, 400),  # says nothing to do
        ("/api/admin/lessons", {**LESSON, "owner": "x"}, 400),
        ("/api/admin/lessons/0/disable", {}, 404),
        ("/api/admin/lessons/99999999999999999999999/delete", {}, 404),
        ("/api/admin/lessons/1/explode", {}, 404),
        ("/api/admin/lessons/1/disable", {"reason": ""}, 400),
    ],
)
def test_a_bad_admin_request_is_a_4xx_in_one_line(
    console: TestClient, path: str, body: dict[str, Any], status: int
) -> None:
    answer = post(console, "ada", path, body)

    assert answer.status_code == status, answer.text
    assert len(answer.json()["error"].splitlines()) == 1


def test_an_admin_change_from_another_origin_or_not_json_is_refused(console: TestClient) -> None:
    foreign = console.post(
        "/api/admin/lessons",
        json=LESSON,
        headers={**auth("ada"), "Origin": "http://evil.example"},
    )
    form = console.post("/api/admin/lessons", data={"goal_pattern": "g"}, headers=auth("ada"))

    assert foreign.status_code == 403
    assert form.status_code == 415


def test_an_admin_reads_the_settings_with_every_secret_masked(console: TestClient) -> None:
    answer = console.get("/api/admin/settings", headers=auth("ada"))

    assert answer.status_code == 200
    assert LLM_KEY not in answer.text
    assert REDIS_PASSWORD not in answer.text
    shown = answer.json()["settings"]
    assert shown["redis_url"] == "redis://:***@127.0.0.1:1/0"
    assert shown["console_port"] == 8765
