"""The public Python API (``import planloop``) against the shared real stack."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

import planloop
from planloop.config.settings import Settings
from planloop.producer.stack import Stack
from tests.conftest import wait_for
from tests.shipped import shipped

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "producer_script.py"


def _client(test_settings: Settings) -> planloop.Client:
    return planloop.Client(test_settings)


def test_the_readme_producer_script_runs(
    stack: Stack, env_overrides: dict[str, str], tmp_path: Path
) -> None:
    # run as a user would: its own process, settings from PLANLOOP_* variables, another cwd
    env = shipped().env({**os.environ, **env_overrides})
    done = subprocess.run(
        [str(shipped().python), str(EXAMPLE)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "TASK_COMPLETED restock" in done.stdout
    assert "completed in" in done.stdout
    assert "units sold: " in done.stdout
    assert "reservation: {" in done.stdout


def test_wait_returns_full_outputs_beyond_the_report_preview(
    stack: Stack, test_settings: Settings
) -> None:
    big = "x" * 5_000  # longer than the report's preview: the report truncates it
    plan = planloop.Plan(
        goal="sdk outputs",
        steps=[
            planloop.Step(id="big", tool="bench.echo", params={"value": big}),
            planloop.Step(id="small", tool="bench.echo", params={"value": 7}),
        ],
    )
    with _client(test_settings) as client:
        sid = client.submit(plan)
        report = client.wait(sid, timeout_s=60)
    assert report.ok
    assert report.status is planloop.SessionStatus.COMPLETED
    assert report.raw["steps"][0]["output"]["truncated"] is True
    assert report.outputs["big"] == {"value": big}
    assert report.step("small").output == {"value": 7}
    assert report.step("small").attempts == 1


def test_events_iterate_live_until_the_session_ends(stack: Stack, test_settings: Settings) -> None:
    plan = {
        "goal": "sdk events",
        "steps": [
            {"id": "a", "tool": "bench.sleep", "params": {"seconds": 0.2}},
            {"id": "b", "tool": "bench.sleep", "params": {"seconds": 0.1}, "dependencies": ["a"]},
        ],
    }
    with _client(test_settings) as client:
        sid = client.submit(plan)
        seen = [(e.event.type, e.event.step_id) for e in client.events(sid)]
        assert client.status(sid).status.ended  # the iterator stopped because it ended
        assert seen == [("TASK_COMPLETED", "a"), ("TASK_COMPLETED", "b")]
        # a finished stream replays without following
        assert len(list(client.events(sid, follow=False))) == 2


def test_cancel_and_wait_timeout(stack: Stack, test_settings: Settings) -> None:
    plan = {
        "goal": "sdk cancel",
        "steps": [{"id": "long", "tool": "bench.sleep", "params": {"seconds": 20}}],
    }
    with _client(test_settings) as client:
        sid = client.submit(plan)
        wait_for(lambda: client.status(sid).status == "running", 30, "the session to run")
        with pytest.raises(planloop.WaitTimeoutError, match="still running"):
            client.wait(sid, timeout_s=0.2)
        client.cancel(sid, "sdk test")
        report = client.wait(sid, timeout_s=60)
        assert report.status is planloop.SessionStatus.CANCELLED
        assert not report.ok
        with pytest.raises(planloop.SessionEndedError):
            client.cancel(sid)
        with pytest.raises(planloop.SessionNotFoundError):
            client.status("no-such-session")


def test_invalid_plan_is_refused_before_anything_is_submitted(
    stack: Stack, test_settings: Settings
) -> None:
    with _client(test_settings) as client, pytest.raises(planloop.PlanError, match=r"no\.such"):
        client.submit({"steps": [{"id": "a", "tool": "no.such"}]})


def test_async_client_approves_a_step_and_streams(stack: Stack, test_settings: Settings) -> None:
    plan = planloop.Plan(
        goal="sdk approve",
        steps=[
            planloop.Step(
                id="gate", tool="bench.echo", params={"value": 1}, requires_approval=True
            ),
        ],
    )

    async def scenario() -> tuple[planloop.Report, list[str]]:
        async with planloop.AsyncClient(test_settings) as client:
            sid = await client.submit(plan)
            for _ in range(300):
                if (await client.status(sid)).awaiting:
                    break
                await asyncio.sleep(0.05)
            await client.approve(sid, step="gate", note="looks fine")
            types = [item.event.type.value async for item in client.events(sid)]
            return await client.wait(sid, timeout_s=60), types

    report, types = asyncio.run(scenario())
    assert report.ok, report.raw
    assert report.outputs == {"gate": {"value": 1}}
    assert "EXTERNAL_SIGNAL" in types
    assert "TASK_COMPLETED" in types
