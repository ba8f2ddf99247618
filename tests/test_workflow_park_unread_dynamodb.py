"""``test_workflow_park_unread`` on the DynamoDB store (moto and DynamoDB Local): the park's
condition that the key's signal document is absent fails as a transaction cancelled by a
``ConditionCheck`` (TransactWriteItems, "ConditionalCheckFailed" in its cancellation reasons:
https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html),
which the store hands back with the document, and the body runs again knowing it."""

from __future__ import annotations

import pytest
from aws_fixtures import aws_bench  # noqa: F401  (a fixture)
from kit import run
from test_workflow_park_unread import _go, expired, twice


@pytest.mark.parametrize(
    ("body", "first_key", "text"), [(twice, "a", "ABAC"), (expired, None, "timed outB-C")]
)
def test_a_cold_worker_resolves_a_wait_on_a_final_key_as_a_read_would(
    aws_bench,  # noqa: F811
    body,
    first_key,
    text,
):
    result, refused, reads = run(_go(body, first_key, True, aws_bench.store()))
    assert (result, refused, reads) == (text, 1, 0)
