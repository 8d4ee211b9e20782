-- taskq 0003: the SQL API for callers that prefer a function to a bare INSERT.
--   SELECT taskq.enqueue('sms.notify', '{"to": "+4912345"}', biz_id => 'order-42', priority => 5);
-- Integer parameters are declared integer (not smallint) so that a bare literal like
-- priority => 5 resolves without a cast; the column's own type checks the range.
CREATE FUNCTION taskq.enqueue(
    task_type       text,
    payload         jsonb       DEFAULT '{}',
    queue           text        DEFAULT 'default',
    biz_id          text        DEFAULT NULL,
    priority        integer     DEFAULT 0,
    scheduled_at    timestamptz DEFAULT NULL,
    delay           interval    DEFAULT NULL,
    max_retry_count integer     DEFAULT NULL,  -- NULL: the handler's setting
    timeout_seconds integer     DEFAULT NULL,  -- NULL: the handler's setting
    trace_id        text        DEFAULT NULL
) RETURNS bigint
LANGUAGE sql AS $$
    INSERT INTO taskq.tasks (task_type, payload, queue, biz_id, priority, scheduled_at,
                             max_retry_count, timeout_seconds, trace_id)
    VALUES (enqueue.task_type,
            coalesce(enqueue.payload, '{}'),
            coalesce(enqueue.queue, 'default'),
            enqueue.biz_id,
            enqueue.priority,
            coalesce(enqueue.scheduled_at, now()) + coalesce(enqueue.delay, interval '0'),
            enqueue.max_retry_count,
            enqueue.timeout_seconds,
            coalesce(enqueue.trace_id, replace(gen_random_uuid()::text, '-', '')))
    RETURNING id
$$;
