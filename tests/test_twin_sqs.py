"""The SQS FIFO twin: each rule of AWS's FIFO queues, and where moto is more forgiving, the
same scenario on moto showing the difference."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from aws_fixtures import aws_client, fake_aws_environment
from botocore.exceptions import ClientError

from bide.testing.aws import SimClock, SqsTwin

FIFO = {"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "60"}


def twin(**attributes: str) -> tuple[SqsTwin, str]:
    sqs = SqsTwin(SimClock(), random.Random(1))
    url = sqs.create_queue(QueueName="q.fifo", Attributes={**FIFO, **attributes})["QueueUrl"]
    return sqs, url


def receive(sqs: Any, url: str, n: int = 10) -> list[dict[str, Any]]:
    found = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=n, AttributeNames=["All"], VisibilityTimeout=60
    )
    return list(found.get("Messages", []))


def bodies(messages: list[dict[str, Any]]) -> list[str]:
    return [m["Body"] for m in messages]


def error_code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def test_content_based_duplicate_is_accepted_and_never_delivered_within_5_minutes() -> None:
    sqs, url = twin()
    first = sqs.send_message(QueueUrl=url, MessageBody="wake", MessageGroupId="g")
    sqs.clock.advance(299)
    second = sqs.send_message(QueueUrl=url, MessageBody="wake", MessageGroupId="g")
    assert second["MessageId"] == first["MessageId"]  # accepted, answered like the first
    assert bodies(receive(sqs, url)) == ["wake"]
    sqs.clock.advance(1)  # 300 s after the first send: a new message
    sqs.send_message(QueueUrl=url, MessageBody="wake", MessageGroupId="g")
    assert len(sqs.bodies(url)) == 2


def test_deduplication_outlives_deletion_where_moto_forgets_it() -> None:
    """FIFO-key-terms.html: SQS keeps tracking a deduplication id after the message was
    received and deleted. moto drops the id with the message and delivers the duplicate."""

    def send_delete_send(sqs: Any, url: str) -> list[str]:
        sqs.send_message(QueueUrl=url, MessageBody="alarm", MessageGroupId="g")
        for message in receive(sqs, url):
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        sqs.send_message(QueueUrl=url, MessageBody="alarm", MessageGroupId="g")
        return bodies(receive(sqs, url))

    sqs, url = twin()
    assert send_delete_send(sqs, url) == []
    from moto import mock_aws

    with fake_aws_environment(), mock_aws():
        moto = aws_client("sqs")
        moto_url = moto.create_queue(QueueName="q.fifo", Attributes=FIFO)["QueueUrl"]
        assert send_delete_send(moto, moto_url) == ["alarm"]  # moto: delivered twice


def test_explicit_deduplication_id_overrides_the_content_hash() -> None:
    sqs, url = twin()
    sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g", MessageDeduplicationId="1")
    sqs.send_message(QueueUrl=url, MessageBody="b", MessageGroupId="g", MessageDeduplicationId="1")
    sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g", MessageDeduplicationId="2")
    assert sqs.bodies(url) == ["a", "a"]


def test_deduplication_scope_message_group_where_moto_dedups_across_groups() -> None:
    """API_SetQueueAttributes.html (DeduplicationScope): with messageGroup, the same body in
    two groups is two messages. moto ignores the scope and drops the second."""

    def two_groups(sqs: Any, url: str) -> list[str]:
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="s1")
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="s2")
        return sorted(m["Attributes"]["MessageGroupId"] for m in receive(sqs, url))

    per_group = {"DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"}
    sqs, url = twin(**per_group)
    assert two_groups(sqs, url) == ["s1", "s2"]
    sqs, url = twin(DeduplicationScope="queue")
    assert two_groups(sqs, url) == ["s1"]
    from moto import mock_aws

    with fake_aws_environment(), mock_aws():
        moto = aws_client("sqs")
        moto_url = moto.create_queue(QueueName="q.fifo", Attributes={**FIFO, **per_group})
        assert two_groups(moto, moto_url["QueueUrl"]) == ["s1"]  # moto: one group lost


def test_bad_sends_fail_with_the_codes_moto_also_answers() -> None:
    """moto gets these codes right; the twin answers the same ones."""
    from moto import mock_aws

    def codes(sqs: Any, url: str) -> list[str]:
        found = []
        for kwargs in (
            {"MessageBody": "x"},  # no MessageGroupId
            {"MessageBody": "x", "MessageGroupId": "g"},  # no dedup id, no content dedup
        ):
            with pytest.raises(ClientError) as exc:
                sqs.send_message(QueueUrl=url, **kwargs)
            found.append(error_code(exc))
        with pytest.raises(ClientError) as exc:
            sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=11)
        found.append(error_code(exc))
        with pytest.raises(ClientError) as exc:
            sqs.get_queue_url(QueueName="missing.fifo")
        found.append(error_code(exc))
        return found

    attributes = {"FifoQueue": "true"}
    sqs = SqsTwin(SimClock(), random.Random(1))
    url = sqs.create_queue(QueueName="q.fifo", Attributes=attributes)["QueueUrl"]
    ours = codes(sqs, url)
    assert ours == [
        "MissingParameter",
        "InvalidParameterValue",
        "InvalidParameterValue",
        "AWS.SimpleQueueService.NonExistentQueue",
    ]
    with fake_aws_environment(), mock_aws():
        moto = aws_client("sqs")
        assert (
            codes(moto, moto.create_queue(QueueName="q.fifo", Attributes=attributes)["QueueUrl"])
            == ours
        )


def test_groups_in_order_and_a_group_blocked_while_in_flight() -> None:
    sqs, url = twin()
    for body, group in (("a1", "A"), ("b1", "B"), ("a2", "A"), ("b2", "B")):
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group)
    first = receive(sqs, url, 1)
    assert bodies(first) == ["a1"]
    # A is blocked while a1 is in flight: only B comes, as much of it as fits, in order.
    assert bodies(receive(sqs, url)) == ["b1", "b2"]
    assert receive(sqs, url) == []
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"])
    assert bodies(receive(sqs, url)) == ["a2"]


def test_one_receive_takes_as_many_of_one_group_as_it_can_then_the_next() -> None:
    sqs, url = twin()
    for body, group in (("a1", "A"), ("b1", "B"), ("a2", "A"), ("a3", "A")):
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group)
    assert bodies(receive(sqs, url)) == ["a1", "a2", "a3", "b1"]


def test_visibility_timeout_and_receive_count() -> None:
    sqs, url = twin()
    sqs.send_message(QueueUrl=url, MessageBody="m", MessageGroupId="g")
    first = receive(sqs, url)[0]
    assert first["Attributes"]["ApproximateReceiveCount"] == "1"
    sqs.clock.advance(59.9)
    assert receive(sqs, url) == []
    sqs.clock.advance(0.1)
    again = receive(sqs, url)[0]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    # The old handle no longer deletes (API_DeleteMessage.html: most recent handle only).
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    assert sqs.bodies(url) == ["m"]
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=again["ReceiptHandle"], VisibilityTimeout=0
    )
    third = receive(sqs, url)[0]
    assert third["Attributes"]["ApproximateReceiveCount"] == "3"
    sqs.clock.advance(61)
    with pytest.raises(ClientError) as exc:
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=third["ReceiptHandle"], VisibilityTimeout=10
        )
    assert error_code(exc) == "MessageNotInflight"
    with pytest.raises(ClientError) as exc:
        sqs.delete_message(QueueUrl=url, ReceiptHandle="not-a-handle")
    assert error_code(exc) == "ReceiptHandleIsInvalid"


def test_redrive_to_the_dead_letter_queue_after_max_receive_count() -> None:
    sqs = SqsTwin(SimClock(), random.Random(1))
    dlq = sqs.create_queue(QueueName="dlq.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq)["Attributes"]["QueueArn"]
    redrive = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 3})
    url = sqs.create_queue(QueueName="q.fifo", Attributes={**FIFO, "RedrivePolicy": redrive})[
        "QueueUrl"
    ]
    sqs.send_message(QueueUrl=url, MessageBody="poison", MessageGroupId="g")
    sqs.send_message(QueueUrl=url, MessageBody="next", MessageGroupId="g")
    for count in ("1", "2", "3"):
        (message,) = receive(sqs, url, 1)
        assert (message["Body"], message["Attributes"]["ApproximateReceiveCount"]) == (
            "poison",
            count,
        )
        sqs.clock.advance(60)
    # A fourth receive would exceed maxReceiveCount: the message moves, the group goes on.
    assert bodies(receive(sqs, url)) == ["next"]
    assert sqs.bodies(dlq) == ["poison"]


def test_batch_size_is_one_to_ten() -> None:
    sqs, url = twin()
    for i in range(12):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}", MessageGroupId=f"g{i}")
    assert len(receive(sqs, url, 10)) == 10
    for bad in (0, 11):
        with pytest.raises(ClientError) as exc:
            sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=bad)
        assert error_code(exc) == "InvalidParameterValue"
