"""Strict reading and exact writing of the engine's stored forms (task records, states,
signal slots), without a validation library: records are read on every load of a session, and
the import of one is a large part of a Lambda function's cold start (docs/performance.md).

Reading refuses what is not the shape it must be, naming the field: an unknown field, a
missing one, or a value of the wrong type (:class:`FormError`). Integers are accepted where a
number is (JSON has one number type), booleans never are.

Writing is compact JSON, non-ASCII kept as is, floats spelled as the stores have always written
them (pydantic's spelling, so a record written now is byte-identical to one written before:
``0.000025`` rather than Python's ``2.5e-05``, ``1e-7`` rather than ``1e-07``; a float JSON
cannot hold, an infinity or NaN, is written ``null``).
"""

from __future__ import annotations

import json
import json.encoder
import json.scanner
import math
from collections.abc import Callable, Iterable
from typing import Any

_ENCODER = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False
)


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# The C encoder behind ``_ENCODER.encode``, made once: a record is written on every commit of
# its task, and building it per call is a good part of a small record's write.
_C_ENCODE: Callable[[Any, int], Any] | None = (
    json.encoder.c_make_encoder(  # type: ignore[attr-defined]
        None, _not_json, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
    if json.encoder.c_make_encoder is not None  # type: ignore[attr-defined]
    else None
)


class FormError(ValueError):
    """A stored form (or a state built by a phase) is not what it must be. ``field`` names
    where (a dotted path from the top of the form), ``why`` what is wrong. Nothing that reads
    it goes on: a record that fails here is refused whole."""

    def __init__(self, field: str, why: str) -> None:
        self.field = field
        self.why = why
        super().__init__(f"{field}: {why}")

    def within(self, outer: str) -> FormError:
        """The same error, its field seen from the form that holds ``outer``."""
        return FormError(f"{outer}.{self.field}", self.why)


def _got(value: Any) -> str:
    return f"got {type(value).__name__}"


def text(value: Any, field: str) -> str:
    """``value`` as a string."""
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str.__str__(value)  # a str subclass (a StrEnum): its plain value
    raise FormError(field, f"must be a string, {_got(value)}")


def maybe_text(value: Any, field: str) -> str | None:
    """``value`` as a string, or None."""
    return None if value is None else text(value, field)


def integer(value: Any, field: str) -> int:
    """``value`` as an integer (not a boolean, not a float)."""
    if type(value) is int:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    raise FormError(field, f"must be an integer, {_got(value)}")


def maybe_integer(value: Any, field: str) -> int | None:
    """``value`` as an integer, or None."""
    return None if value is None else integer(value, field)


def number(value: Any, field: str) -> float:
    """``value`` as a float (an integer is accepted; a boolean is not)."""
    if type(value) is float:
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise FormError(field, f"must be a number, {_got(value)}")


def maybe_number(value: Any, field: str) -> float | None:
    """``value`` as a float, or None."""
    return None if value is None else number(value, field)


def flag(value: Any, field: str) -> bool:
    """``value`` as a boolean (``true`` or ``false`` only)."""
    if value is True or value is False:
        return value
    raise FormError(field, f"must be true or false, {_got(value)}")


def names(value: Any, field: str) -> tuple[str, ...]:
    """``value`` (a list or tuple of strings) as a tuple."""
    if not isinstance(value, list | tuple):
        raise FormError(field, f"must be a list of strings, {_got(value)}")
    return tuple(text(item, f"{field}.{i}") for i, item in enumerate(value))


def mapping(value: Any, field: str) -> dict[str, Any]:
    """``value`` as an object with string keys."""
    if type(value) is not dict:
        raise FormError(field, f"must be an object, {_got(value)}")
    for key in value:
        if type(key) is not str:
            raise FormError(field, f"has a key that is not a string ({key!r})")
    return value


def shape(data: Any, what: str, known: frozenset[str], required: Iterable[str] = ()) -> None:
    """Check that ``data`` is an object with no field outside ``known`` and every field of
    ``required``; ``what`` names it in the error."""
    if type(data) is not dict:
        raise FormError(what, f"must be an object, {_got(data)}")
    if not data.keys() <= known:
        unknown = sorted(str(k) for k in data.keys() - known)
        raise FormError(unknown[0], f"unknown field of {what} (known: {', '.join(sorted(known))})")
    for name in required:
        if name not in data:
            raise FormError(name, f"missing (required in {what})")


def dumps(data: Any) -> str:
    """``data`` (JSON values: dicts, lists, tuples, strings, numbers, booleans, None) as the
    stores write it: compact, non-ASCII kept, floats in the stored spelling."""
    try:
        out = "".join(_C_ENCODE(data, 0)) if _C_ENCODE is not None else _ENCODER.encode(data)
    except ValueError:  # an infinity or NaN: written null, as the stored forms always had it
        return _spelled(data)
    # Python spells floats under 1e-4 with a padded exponent (2.5e-05, 1e-07); a float
    # written that way, rare in records, sends the whole form through the slow writer.
    return _spelled(data) if "e-0" in out else out


def _spelled(value: Any) -> str:
    if isinstance(value, float):
        return float_text(value)
    if isinstance(value, dict):
        items = (f"{_ENCODER.encode(_key(k))}:{_spelled(v)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_spelled(v) for v in value) + "]"
    return _ENCODER.encode(value)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, float):
        return float_text(key)
    return _ENCODER.encode(key)  # an int, a boolean or None, as json names them


def float_text(value: float) -> str:
    """A float as the stores write it: Python's shortest round-trip digits, plain for
    magnitudes from 1e-5 up, an unpadded exponent below that (``1e-7``), ``null`` when JSON
    cannot hold it."""
    if not math.isfinite(value):
        return "null"
    spelled = repr(float(value))
    if "e-0" not in spelled:
        return spelled
    mantissa, exponent = spelled.split("e-")
    if exponent != "05":
        return f"{mantissa}e-{int(exponent)}"
    sign = "-" if mantissa.startswith("-") else ""
    digits = mantissa.lstrip("-").replace(".", "")
    return f"{sign}0.0000{digits}"


def loads(data: str | bytes) -> Any:
    """Parse stored JSON; malformed text is a :class:`FormError`."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
        if _C_SCAN is None:
            return json.loads(text)
        # The C scanner json.loads runs, called directly: a stored form is one compact value,
        # so the decoder's whitespace matching around it is skipped unless text follows it.
        value, end = _C_SCAN(text, 0)
        if end != len(text) and text[end:].strip():
            raise ValueError(f"extra data at character {end}")
        return value
    except StopIteration:  # no value at all (empty text)
        raise FormError("(document)", "is not JSON (no value)") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, too deep
        raise FormError("(document)", f"is not JSON ({exc})") from None


_C_SCAN: Callable[[str, int], tuple[Any, int]] | None = (
    json.scanner.c_make_scanner(json.JSONDecoder())  # type: ignore[attr-defined]
    if json.scanner.c_make_scanner is not None  # type: ignore[attr-defined]
    else None
)
