"""Take docs/console.png: the console's session page for examples/supply_chain.yaml.

Runs a private stack (own key prefix, queue and SQLite file; Redis at PLANLOOP_REDIS_URL or an
embedded one), the console on a free port, and the system chromium through playwright.

    .venv/bin/python scripts/console_screenshot.py [OUT.png]
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
from planloop.planner.plan import load_plan  # noqa: E402
from planloop.producer.client import Producer  # noqa: E402
from planloop.producer.stack import free_port, local_stack, wait_until  # noqa: E402
from planloop.producer.up import stack_settings, with_bench_tools  # noqa: E402


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=1) as answer:  # noqa: S310
            return bool(answer.status == 200)
    except OSError:
        return False


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "console.png"
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
                page.locator('svg#dag g.node[data-step="verify_primary"]').click()
                time.sleep(0.5)
                out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(out), full_page=False)
                browser.close()
            print(f"wrote {out} (session {sid})")
        finally:
            console.terminate()
            console.wait(10)
            client = Producer.from_settings(running).state.r
            for key in client.scan_iter(f"{prefix}:*"):
                client.delete(key)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    main()
