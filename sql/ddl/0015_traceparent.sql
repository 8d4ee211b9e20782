-- The W3C trace context (traceparent) current when the task was enqueued, when the producer
-- runs OpenTelemetry: the worker's attempt span becomes its child. NULL otherwise. Not part of
-- the contract's columns; other languages may leave it NULL or write their own traceparent.
ALTER TABLE taskq.tasks ADD COLUMN traceparent text;
