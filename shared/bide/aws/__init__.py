"""AWS adapters: the DynamoDB store, Scheduler alarms, the SQS wake queue, webhooks and the
services the Lambda handlers call."""
