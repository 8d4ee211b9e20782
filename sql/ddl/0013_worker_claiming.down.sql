ALTER TABLE taskq.workers
    DROP COLUMN claiming_stopped_at,
    DROP COLUMN claiming_stopped_reason;
