"""Poison wakes: the worker sets a wake aside on its last attempt with the reason, and
``bide redrive`` lists dead-lettered wakes and sends them back, on SQS (moto) and on the local
stack's dead-letter table."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from aws_fixtures import aws_client, fake_aws_environment, unique

from bide.aws.sqs import SqsDeadLetters
from bide.cli import EXIT_USAGE, main
from bide.local import LocalStack
from bide.local.redrive import LocalRedrive
from bide.service import worker_batch
from bide.service.redrive import SqsRedrive
from examples.agent_app import build_app


def reason(error: str, receives: int = 5) -> dict[str, object]:
    return {"error_type": "RuntimeError", "error": error, "receives": receives, "at": 1.0}


def wake(sid: str, why: str = "signal") -> str:
    return json.dumps({"session_id": sid, "reason": why})


@pytest.fixture(name="sqs")
def sqs_fixture():
    from moto import mock_aws

    with fake_aws_environment(), mock_aws():
        client = aws_client("sqs")
        fifo = {"FifoQueue": "true"}
        dlq = client.create_queue(QueueName=f"{unique('dead')}.fifo", Attributes=fifo)
        queue = client.create_queue(
            QueueName=f"{unique('wakes')}.fifo",
            Attributes={**fifo, "ContentBasedDeduplication": "true"},
        )
        yield client, dlq["QueueUrl"], queue["QueueUrl"]


def received(client: Any, url: str) -> list[dict[str, Any]]:
    found = client.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"], VisibilityTimeout=0
    )
    return found.get("Messages", [])


def letters_left(client: Any, url: str) -> int:
    """Messages in the queue, visible or in flight (a letter not deleted stays counted)."""
    attributes = client.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return sum(int(v) for v in attributes.values())


def test_sqs_redrive_lists_reasons_and_sends_back_one_session_or_all(sqs, capsys) -> None:
    client, dlq_url, queue_url = sqs
    letters = SqsDeadLetters(client, dlq_url)
    letters.dead_letter("a", wake("a"), reason("DynamoDB said no"))
    letters.dead_letter("b", wake("b", "alarm"), reason("bad model output", 3))
    # A wake SQS moved itself (an invocation died): the original body, no reason.
    client.send_message(
        QueueUrl=dlq_url, MessageBody=wake("c"), MessageGroupId="c", MessageDeduplicationId="x"
    )
    redrive = SqsRedrive(client, dlq_url, queue_url)
    listed = {d.session_id: d for d in redrive.letters()}
    assert set(listed) == {"a", "b", "c"}
    assert listed["a"].reason is not None and listed["a"].reason["error"] == "DynamoDB said no"
    assert listed["c"].reason is None and listed["c"].wake == wake("c")
    assert "RuntimeError: bad model output (after 3 deliveries)" in listed["b"].describe()
    assert len(redrive.letters()) == 3  # listing leaves them where they are

    # Through the CLI: list, then send back session a.
    args = ["redrive", "--dlq-url", dlq_url, "--queue-url", queue_url]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "a  RuntimeError: DynamoDB said no" in out and "3 wake(s) dead-lettered" in out
    assert main([*args, "a"]) == 0
    assert "1 wake(s) sent back" in capsys.readouterr().out
    (back,) = received(client, queue_url)
    assert back["Body"] == wake("a") and back["Attributes"]["MessageGroupId"] == "a"
    assert {d.session_id for d in redrive.letters()} == {"b", "c"}
    assert letters_left(client, dlq_url) == 2
    client.delete_message(QueueUrl=queue_url, ReceiptHandle=back["ReceiptHandle"])

    # --all: the rest, each with a fresh deduplication id (b's alarm body is never dropped
    # by the content-deduplicating wake queue, even if it was seen minutes ago).
    client.send_message(QueueUrl=queue_url, MessageBody=wake("b", "alarm"), MessageGroupId="b")
    for m in received(client, queue_url):
        client.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
    assert main([*args, "--all", "--json"]) == 0
    assert {d["session_id"] for d in json.loads(capsys.readouterr().out)} == {"b", "c"}
    assert sorted(m["Body"] for m in received(client, queue_url)) == sorted(
        [wake("b", "alarm"), wake("c")]
    )
    assert redrive.letters() == [] and letters_left(client, dlq_url) == 0


def test_redrive_usage_errors(tmp_path: Path, capsys) -> None:
    assert main(["redrive", "--db", str(tmp_path / "none.sqlite")]) == EXIT_USAGE
    assert "no local stack file" in capsys.readouterr().err
    assert main(["redrive", "--all", "s1", "--db", "x"]) == EXIT_USAGE
    assert main(["redrive", "--dlq-url", "https://sqs.example/q", "--queue-url", ""]) == EXIT_USAGE


def test_the_local_worker_dead_letters_a_poison_wake_and_redrive_sends_it_back(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    db = str(tmp_path / "dev.sqlite")
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    real = worker_batch.run_session
    poisoned = {"bad"}
    attempts: list[str] = []

    async def flaky(deps, session_id, **kw):
        attempts.append(session_id)
        if session_id in poisoned:
            raise RuntimeError("the model returned garbage")
        return await real(deps, session_id, **kw)

    async def no_wait(seconds: float) -> None:
        if seconds > 60:  # the invocation's deadline: far away
            await asyncio.Event().wait()

    monkeypatch.setattr(worker_batch, "run_session", flaky)

    async def scenario() -> None:
        async with LocalStack(build_app(), db, port=0, sleep=no_wait) as stack:
            stack.queue.retry_base_seconds = 0.0  # redeliver at once
            stack.deps.queue.wake("bad", "signal")
            for _ in range(500):
                if stack.status()["dead_letters"]:
                    break
                await asyncio.sleep(0.01)
            assert await stack.settle(5)
            assert stack.status()["dead_letters"] == 1
            # Retried in-process (3 tries) on each of the queue's 5 deliveries, then set aside.
            assert attempts.count("bad") == 3 * stack.queue.max_receives
            (letter,) = LocalRedrive(stack._db).letters()  # type: ignore[arg-type]
            assert letter.session_id == "bad" and letter.reason is not None
            assert letter.reason["error"] == "the model returned garbage"
            assert letter.reason["receives"] == stack.queue.max_receives

            assert main(["redrive", "--db", db]) == 0
            out = capsys.readouterr().out
            assert "bad  RuntimeError: the model returned garbage (after 5 deliveries)" in out
            poisoned.clear()  # the cause is fixed
            assert main(["redrive", "bad", "--db", db]) == 0
            assert "1 wake(s) sent back" in capsys.readouterr().out
            stack.queue._poke()  # the CLI wrote to the file: look now, not at the next poll
            before = attempts.count("bad")
            for _ in range(500):
                if attempts.count("bad") > before:
                    break
                await asyncio.sleep(0.01)
            assert await stack.settle(5)
            assert attempts.count("bad") == before + 1  # ran again, and succeeded
            assert stack.status()["dead_letters"] == 0

    asyncio.run(scenario())


def test_a_redriven_signal_wake_runs_the_whole_session(sqs) -> None:
    # A signal's wake names its task (the worker runs it alone); sent back after it was dead-
    # lettered, it is a wake of the whole session: whatever failed may lie elsewhere.
    from bide.aws.sqs import wake_body

    client, dlq_url, queue_url = sqs
    SqsDeadLetters(client, dlq_url).dead_letter(
        "a", wake_body("a", "signal", task="t-1", owner="t-0"), reason("boom")
    )
    redrive = SqsRedrive(client, dlq_url, queue_url)
    assert [d.session_id for d in redrive.redrive(lambda d: True)] == ["a"]
    (back,) = received(client, queue_url)
    assert json.loads(back["Body"]) == {"session_id": "a", "reason": "signal"}
