"""A promise's rejection carries a failure type (issue 13): ``reject`` takes a
``SignalFailure`` (type, message, data) or a message and ``type=``; a bare message keeps
working and is typed ``Rejected``. A malformed failure is refused naming the field, with
nothing written."""

from __future__ import annotations

import pytest
from kit import run
from test_promises import call, session, start

from bide import SignalFailure
from bide.engine.failures import MalformedFailure
from bide.promises import Promises
from bide.tools import result_of


def test_a_typed_rejection_reaches_the_awaiting_call_with_its_type_and_data():
    async def go():
        k, registry = session()
        await k.h.open()
        pid = await start(k, registry, "render")
        waiter = await call(k, registry, "promise_await", {"promise_id": pid})
        await k.h.run_until_parked()
        failure = SignalFailure("OutOfMemory", "the render died", {"frame": 812})
        assert await Promises(k.h).reject(pid, failure) == "settled"
        doc = Promises(k.h).get(pid)
        assert (doc.status, doc.error, doc.error_type, doc.error_data) == (
            "rejected",
            "the render died",
            "OutOfMemory",
            {"frame": 812},
        )
        await k.h.run_until_parked()
        result = result_of(k.h.outcome(waiter))
        assert result.is_error
        assert result.text == f"promise {pid} rejected: OutOfMemory: the render died"
        assert result.details["error_type"] == "OutOfMemory"
        assert result.details["error_data"] == {"frame": 812}

    run(go())


def test_a_bare_message_is_typed_rejected_and_type_may_be_named():
    async def go():
        k, registry = session()
        await k.h.open()
        old = await start(k, registry, "old")
        named = await start(k, registry, "named")
        await k.h.run_until_parked()
        assert await Promises(k.h).reject(old, "the job crashed") == "settled"
        assert await Promises(k.h).reject(named, "too slow", type="Timeout") == "settled"
        assert Promises(k.h).get(old).error_type == "Rejected"
        assert Promises(k.h).get(named).error_type == "Timeout"
        # First outcome stands: a later typed rejection changes nothing.
        late = await Promises(k.h).reject(old, SignalFailure("Other", "later"))
        assert late == "ignored" and Promises(k.h).get(old).error_type == "Rejected"

    run(go())


@pytest.mark.parametrize(
    ("failure", "field"),
    [(SignalFailure("", "m"), "type"), (SignalFailure("T", 3), "message")],  # type: ignore[arg-type]
)
def test_a_malformed_rejection_names_the_field_and_writes_nothing(failure, field):
    async def go():
        k, registry = session()
        await k.h.open()
        pid = await start(k, registry, "job")
        await k.h.run_until_parked()
        with pytest.raises(MalformedFailure) as caught:
            await Promises(k.h).reject(pid, failure)
        assert caught.value.field == field
        assert Promises(k.h).get(pid).status == "open"

    run(go())
