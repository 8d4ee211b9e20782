ALTER TABLE taskq.tasks DROP COLUMN traceparent;
