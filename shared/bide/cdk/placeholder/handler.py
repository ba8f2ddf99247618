"""Stand-in asset used only when a template is synthesized with ``bide:skipBundling``.

Such a template is for tests and reviews; a function deployed from it fails loudly.
"""

from __future__ import annotations

from typing import Any


def handler(event: Any, context: Any) -> Any:
    raise RuntimeError(
        "this function was synthesized with bide:skipBundling=true; "
        "deploy without that flag so its code is bundled"
    )
