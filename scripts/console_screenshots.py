"""Take the README's screenshots of the dev console (docs/images/console-*.png).

Starts the local stack in-process with ``examples/console_app.py`` on a fresh SQLite file,
makes three sessions through the sessions API (a deploy asking a question, a branch deletion
waiting for an approval, a CI run parked on its webhook), opens the console in headless
Chromium (``make chromium``) and photographs it; then answers the question on the page and
photographs the finished run.

    python scripts/console_screenshots.py            # --port 8787 --out docs/images
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "shared"), str(ROOT)]
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")

from bide.local import LocalStack  # noqa: E402  (needs shared/ on the path)
from bide.local.client import ApiClient  # noqa: E402
from bide.local.thread import BackgroundStack  # noqa: E402
from examples.console_app import build_app  # noqa: E402
from scripts.chromium import browser_page, missing  # noqa: E402

SESSIONS = {
    "fix-flaky-test": "Fix the flaky test and run CI on main",
    "delete-old-branch": "Please delete feature-x",
    "deploy-api": "Please deploy api",
}


def start_sessions(url: str) -> None:
    client = ApiClient(url)
    for session_id, text in SESSIONS.items():
        created = client.request("POST", "/sessions", {"session_id": session_id})
        body = {"content": text, "request_id": f"{session_id}-1"}
        submitted = client.request("POST", f"/sessions/{session_id}/inputs", body)
        if not (created.ok and submitted.ok):
            raise SystemExit(f"cannot start {session_id}: {created.message} {submitted.message}")


def shoot(url: str, out: Path) -> list[Path]:
    written: list[Path] = []
    with browser_page(width=1360, height=1000, origin=url) as page:

        def save(name: str) -> None:
            path = out / name
            page.wait_for_timeout(300)  # let the relative times settle on a whole second
            page.screenshot(path=str(path), full_page=True)
            written.append(path)

        page.goto(f"{url}/_console#deploy-api")
        page.locator(".card.ask").wait_for()
        page.locator(".progress").wait_for()
        save("console-question.png")

        page.goto(f"{url}/_console#fix-flaky-test")
        page.locator(".hook-url").wait_for()
        save("console-webhook.png")

        page.goto(f"{url}/_console#delete-old-branch")
        page.locator(".card.approval").wait_for()
        save("console-approval.png")

        page.goto(f"{url}/_console#deploy-api")
        card = page.locator(".card.ask")
        card.locator("input.answer-text").fill("go ahead, I am watching the dashboards")
        card.get_by_role("button", name="Deploy").click()
        page.locator(".transcript li", has_text="Done:").wait_for()
        page.get_by_text("No live tasks").wait_for()
        save("console-answered.png")
    return written


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8787, help="port on 127.0.0.1 (0: any)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args(argv)
    why = missing()
    if why is not None:
        print(f"console_screenshots: {why}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        stack = LocalStack(build_app(), str(Path(folder) / "dev.sqlite"), port=args.port)
        with BackgroundStack(stack) as running:
            start_sessions(running.url)
            if not running.settle(10):
                raise SystemExit("the sessions did not park within 10 seconds")
            for path in shoot(running.url, args.out):
                print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
