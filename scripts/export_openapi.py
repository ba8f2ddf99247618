"""Write the sessions API's OpenAPI document to docs/openapi.json (or check it is current).

``python scripts/export_openapi.py`` writes it; with ``--check`` it exits 1 when the committed
file is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "shared"))

from bide.service.http import openapi_json  # noqa: E402  (needs shared/ on the path)

TARGET = ROOT / "docs" / "openapi.json"


def main(argv: list[str]) -> int:
    document = openapi_json() + "\n"
    if "--check" in argv:
        current = TARGET.read_text() if TARGET.exists() else ""
        if current != document:
            print(f"{TARGET.relative_to(ROOT)} is stale: run python scripts/export_openapi.py")
            return 1
        print(f"{TARGET.relative_to(ROOT)} is current")
        return 0
    TARGET.write_text(document)
    print(f"wrote {TARGET.relative_to(ROOT)} ({len(document)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
