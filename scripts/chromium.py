"""Headless Chromium for the console's browser test and screenshots, driven by Playwright.

The browser is the machine's own Chromium (Debian's ``chromium`` package: ``make chromium``),
never one Playwright downloads. It starts with a fresh profile in a temporary folder, with
everything that would reach the network on its own (updates, sync, QUIC, background
requests) turned off: the pages it opens are on 127.0.0.1.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("BIDE_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INSTALL_HINT = "run `make chromium` (as root: apt-get install -y chromium)"


def missing() -> str | None:
    """Why the browser cannot be started, or None when it can."""
    if not Path(CHROMIUM).is_file() or not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM}: {INSTALL_HINT}"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "the playwright package is not installed: run `make venv`"
    return None


@contextmanager
def browser_page(
    *, width: int = 1280, height: int = 900, origin: str | None = None
) -> Iterator[Any]:
    """A Playwright page in a fresh headless Chromium; ``origin`` (``http://127.0.0.1:port``)
    may read and write the clipboard. Closes the browser and its profile on exit."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="bide-chromium-") as profile, sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=ARGS,
            viewport={"width": width, "height": height},
        )
        try:
            if origin is not None:
                context.grant_permissions(["clipboard-read", "clipboard-write"], origin=origin)
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()
