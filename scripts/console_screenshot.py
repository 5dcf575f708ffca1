"""Take the console's screenshots in docs/: the session page of examples/supply_chain.yaml
re-planned around its failed supplier (console.png, console-replanned.png with the step
panel open), a session while its step runs (console-running.png) and one that failed
(console-failed.png).

Runs a private stack (own key prefix, queue and SQLite file; Redis at PLANLOOP_REDIS_URL or an
embedded one), the console on a free port, and the system chromium through playwright.

    .venv/bin/python scripts/console_screenshot.py [OUT_DIR]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planloop.config.settings import Settings  # noqa: E402
from planloop.core.credentials import CONSOLE_PASSWORD_FILE, GENERATED_CONSOLE_USER  # noqa: E402
from planloop.planner.plan import load_plan, parse_plan  # noqa: E402
from planloop.producer.client import Producer  # noqa: E402
from planloop.producer.stack import free_port, local_stack, wait_until  # noqa: E402
from planloop.producer.up import stack_settings, with_bench_tools  # noqa: E402

RUNNING = """
goal: a chain whose middle step takes a while
steps:
  - {id: fetch, tool: bench.echo, params: {value: 1}}
  - {id: crunch, tool: bench.sleep, params: {seconds: 20}, dependencies: [fetch]}
  - {id: publish, tool: bench.echo, params: {value: 2}, dependencies: [crunch]}
"""

FAILED = """
goal: a critical payment step that fails for good
steps:
  - {id: quote, tool: bench.echo, params: {value: 42}}
  - id: charge
    tool: bench.sleep
    params: {seconds: 0.2, simulate: {fail_attempts: [1, 2], permanent: false}}
    dependencies: [quote]
    critical: true
    max_retries: 1
  - {id: receipt, tool: bench.echo, params: {value: done}, dependencies: [charge]}
"""


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=1) as answer:  # noqa: S310
            return bool(answer.status == 200)
    except OSError:
        return False


def main() -> None:
    out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs"
    out_dir.mkdir(parents=True, exist_ok=True)
    prefix = f"shot{uuid.uuid4().hex[:6]}"
    work = Path(tempfile.mkdtemp(prefix="planloop-shot-"))
    settings = with_bench_tools(
        Settings(
            key_prefix=prefix,
            queue=prefix,
            database_url=f"sqlite:///{work / 'planloop.db'}",
            secrets_dir=str(work / "secrets"),
        )
    )
    with local_stack(settings.to_env(), log_dir=work) as stack:
        running = stack_settings(settings, stack)
        env = {**stack.env, **running.to_env()}
        port = free_port()
        console = subprocess.Popen(
            [sys.executable, "-m", "planloop.producer.cli", "console", "--port", str(port)], env=env
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until(lambda: healthy(url), 30, "the console to answer")
            producer = Producer.from_settings(running)
            sid = producer.submit(load_plan(ROOT / "examples" / "supply_chain.yaml"))
            # no users configured: the console generated an admin password and kept it
            user = GENERATED_CONSOLE_USER
            password = (Path(running.secrets_dir) / CONSOLE_PASSWORD_FILE).read_text().strip()
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=shutil.which("chromium"), args=["--no-sandbox"]
                )
                context = browser.new_context(
                    http_credentials={"username": user, "password": password},
                    viewport={"width": 1360, "height": 1000},
                )
                page = context.new_page()
                page.goto(f"{url}/sessions/{sid}")
                page.wait_for_selector('#status[data-status="completed"]', timeout=60_000)
                page.wait_for_selector(
                    "#version option[value='2']", state="attached", timeout=10_000
                )
                page.screenshot(path=str(out_dir / "console.png"), full_page=False)
                page.locator('svg#dag g.node[data-step="order_alternative"]').click()
                page.wait_for_selector("#step-panel [data-resolved] pre", timeout=10_000)
                page.locator("#step-panel").scroll_into_view_if_needed()
                time.sleep(0.3)
                page.screenshot(path=str(out_dir / "console-replanned.png"), full_page=True)

                live = producer.submit(parse_plan(RUNNING))
                page.goto(f"{url}/sessions/{live}")
                page.wait_for_selector("#steps td.elapsed[data-running]", timeout=30_000)
                time.sleep(2.5)  # the elapsed time and the running bar have moved
                page.screenshot(path=str(out_dir / "console-running.png"), full_page=True)
                producer.cancel(live, "screenshot taken")

                failed = producer.submit(parse_plan(FAILED))
                page.goto(f"{url}/sessions/{failed}")
                page.wait_for_selector('#status[data-status="failed"]', timeout=60_000)
                page.locator('svg#dag g.node[data-step="charge"]').click()
                page.wait_for_selector("#step-panel [data-error-kind]", timeout=10_000)
                time.sleep(0.3)
                page.screenshot(path=str(out_dir / "console-failed.png"), full_page=True)
                browser.close()
            print(f"wrote console*.png in {out_dir} (sessions {sid}, {live}, {failed})")
        finally:
            console.terminate()
            console.wait(10)
            client = Producer.from_settings(running).state.r
            for key in client.scan_iter(f"{prefix}:*"):
                client.delete(key)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    main()
