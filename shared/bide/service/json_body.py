"""Reading a request's JSON body strictly, so hostile JSON is a 400 and never a 500.

Python's ``json`` module turns some bodies into exceptions no caller expects
(``RecursionError`` for deep nesting, ``ValueError`` for integers past 4300 digits) and others
into values that do not survive a round trip (``NaN``, ``Infinity``, ``1e400`` becomes
``inf``) or cannot be stored at all (``"\ud800"``, a lone surrogate, is no UTF-8).
:func:`strict_json` refuses all of them, and bodies nested deeper than
:data:`~bide.engine.limits.MAX_JSON_DEPTH`, with a message that says which rule was broken.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..engine.limits import MAX_JSON_DEPTH


class JsonRefused(ValueError):
    """A body that is not JSON Bide will store; the message says why (for a 400)."""


def nesting_depth(text: str) -> int:
    """How deep arrays and objects nest in ``text`` (brackets inside strings do not count).
    Iterative, so a body of a million ``[`` costs a loop, not a stack overflow."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefused(f"the number {text[:40]} is too large for a 64-bit float")
    return value


def _no_constants(name: str) -> Any:
    raise JsonRefused(f"{name} is not JSON (numbers must be finite)")


def strict_json(text: str) -> Any:
    """Parse ``text`` as JSON, refusing what :mod:`json` would crash on or store lossily.
    Raises :class:`JsonRefused` with the reason, or :class:`json.JSONDecodeError` for text that
    is simply not JSON."""
    depth = nesting_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise JsonRefused(f"the body nests {depth} levels deep; the limit is {MAX_JSON_DEPTH}")
    try:
        value = json.loads(text, parse_float=_finite, parse_constant=_no_constants)
    except JsonRefused:
        raise
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer past Python's digit limit (sys.get_int_max_str_digits)
        raise JsonRefused("a number in the body has too many digits") from None
    if "\\u" in text:
        # JSON may escape a lone surrogate ("\ud800"), which is not Unicode text: no store
        # can encode it (it was a 500 once the value reached the store).
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise JsonRefused("a string in the body holds a lone surrogate escape") from None
    return value
