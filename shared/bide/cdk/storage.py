"""Where a BideService keeps its data: the sessions table and the buckets.

DynamoDB holds the sessions (one partition each), its keys and local index taken from the
store's own CreateTable request; S3 holds values too large for a record, next to a bucket for
that bucket's access logs. These are the stateful resources: they are created directly in the
BideService's scope (not in a child construct) so their logical ids, and with them the
deployed table and buckets, survive a change of how this code is laid out.
"""

from __future__ import annotations

import math
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_s3 as s3
from constructs import Construct

from ..aws.dynamodb import table_definition
from ..aws.retention import ENDED_TAG_KEY, ENDED_TAG_VALUE, EXPIRES_AT

#: Days an ended session's offloaded values outlive its retention (lifecycle days count from
#: the object's (re)write at or after the end, rounded up to midnight UTC, so they never go
#: before the session's items; the margin covers clock skew between the writer and S3).
VALUE_MARGIN_DAYS = 1

_ATTRIBUTE_TYPES = {
    "S": dynamodb.AttributeType.STRING,
    "N": dynamodb.AttributeType.NUMBER,
    "B": dynamodb.AttributeType.BINARY,
}


class Storage:
    """The table (``Table``), the value bucket (``Bucket``) and its access logs (``AccessLogs``).

    ``retain`` keeps the data when the stack is deleted (``removal``) and turns on the table's
    deletion protection; without it the buckets empty themselves on deletion.
    ``value_expiration`` deletes offloaded values that long after they were written (None:
    kept, the default: a session still holding one cannot load without it).
    ``session_retention`` (None: ended sessions kept forever) adds the lifecycle rule that
    deletes the values of ended sessions (tagged by the store) after the retention and
    :data:`VALUE_MARGIN_DAYS`. The table's TTL attribute is on either way: only items of
    ended sessions carry it (:mod:`bide.aws.retention`).
    """

    def __init__(
        self,
        scope: Construct,
        *,
        removal: cdk.RemovalPolicy,
        retain: bool,
        value_expiration: cdk.Duration | None = None,
        session_retention: cdk.Duration | None = None,
    ) -> None:
        #: Names of the table's local secondary indexes (the functions are granted on them).
        self.indexes: list[str] = []
        self.table = self._table(scope, removal, retain)
        self.access_log_bucket, self.bucket = self._buckets(
            scope, removal, retain, value_expiration, session_retention
        )

    def _table(self, scope: Construct, removal: cdk.RemovalPolicy, retain: bool) -> dynamodb.Table:
        # Keys and the local index come from the store's own CreateTable request, so the
        # deployed table and bide.aws.dynamodb cannot disagree.
        definition = table_definition("bide")
        types = {a["AttributeName"]: a["AttributeType"] for a in definition["AttributeDefinitions"]}

        def attribute(name: str) -> dynamodb.Attribute:
            return dynamodb.Attribute(name=name, type=_ATTRIBUTE_TYPES[types[name]])

        keys = {k["KeyType"]: k["AttributeName"] for k in definition["KeySchema"]}
        table = dynamodb.Table(
            scope,
            "Table",
            partition_key=attribute(keys["HASH"]),
            sort_key=attribute(keys["RANGE"]),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=retain,
            removal_policy=removal,
            # Items of ended sessions carry their expiry here (epoch seconds); DynamoDB deletes
            # them some time after it, and the store treats them as gone from that moment
            # (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/TTL.html).
            time_to_live_attribute=EXPIRES_AT,
        )
        for index in definition.get("LocalSecondaryIndexes", []):
            sort_key = next(
                k["AttributeName"] for k in index["KeySchema"] if k["KeyType"] == "RANGE"
            )
            projection = index["Projection"].get("ProjectionType", "ALL")
            table.add_local_secondary_index(
                index_name=index["IndexName"],
                sort_key=attribute(sort_key),
                projection_type=dynamodb.ProjectionType(projection),
            )
            self.indexes.append(index["IndexName"])
        return table

    @staticmethod
    def _buckets(
        scope: Construct,
        removal: cdk.RemovalPolicy,
        retain: bool,
        value_expiration: cdk.Duration | None,
        session_retention: cdk.Duration | None,
    ) -> tuple[s3.Bucket, s3.Bucket]:
        common: dict[str, Any] = {
            "encryption": s3.BucketEncryption.S3_MANAGED,
            "block_public_access": s3.BlockPublicAccess.BLOCK_ALL,
            "enforce_ssl": True,
            "minimum_tls_version": 1.2,
            "removal_policy": removal,
            "auto_delete_objects": not retain,
        }
        # Object ownership left to CDK: with the feature flag
        # @aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy (set by infra/app.py) log delivery
        # is granted by bucket policy and ACLs stay disabled; without it CDK uses the log
        # delivery ACL, which needs ObjectWriter ownership.
        access_logs = s3.Bucket(
            scope,
            "AccessLogs",
            lifecycle_rules=[s3.LifecycleRule(expiration=cdk.Duration.days(90))],
            **common,
        )
        # Objects are content-addressed and referenced from task records for as long as the
        # session lives, so no expiry rule by default: deleting one would break a parked
        # session. A deployment whose sessions never outlive N days may expire values after
        # N days. Writes are single PutObjects; an interrupted multipart upload (none expected)
        # is cleaned up after a day either way.
        rules = [s3.LifecycleRule(abort_incomplete_multipart_upload_after=cdk.Duration.days(1))]
        if value_expiration is not None:
            rules.append(s3.LifecycleRule(expiration=value_expiration))
        if session_retention is not None:
            # Only values the store tagged: those of ended sessions, (re)written at or after
            # the end (bide.aws.retention). The bucket is not versioned, so there are no
            # noncurrent versions to expire.
            days = math.ceil(session_retention.to_seconds() / 86_400) + VALUE_MARGIN_DAYS
            rules.append(
                s3.LifecycleRule(
                    id="ended-session-values",
                    tag_filters={ENDED_TAG_KEY: ENDED_TAG_VALUE},
                    expiration=cdk.Duration.days(days),
                )
            )
        bucket = s3.Bucket(
            scope,
            "Bucket",
            lifecycle_rules=rules,
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix="values/",
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            **common,
        )
        return access_logs, bucket
