DROP FUNCTION taskq.enqueue(text, jsonb, text, text, integer, timestamptz, interval, integer,
                            integer, text, text, text, bigint);
DROP INDEX IF EXISTS taskq.tasks_parent_idx;
DROP INDEX IF EXISTS taskq.tasks_ordering_idx;
DROP INDEX IF EXISTS taskq.tasks_unique_live_idx;
ALTER TABLE taskq.tasks
    DROP COLUMN context,
    DROP COLUMN parent_id,
    DROP COLUMN ordering_key,
    DROP COLUMN unique_key;
-- 0003's function, as it was.
CREATE FUNCTION taskq.enqueue(
    task_type       text,
    payload         jsonb       DEFAULT '{}',
    queue           text        DEFAULT 'default',
    biz_id          text        DEFAULT NULL,
    priority        integer     DEFAULT 0,
    scheduled_at    timestamptz DEFAULT NULL,
    delay           interval    DEFAULT NULL,
    max_retry_count integer     DEFAULT NULL,
    timeout_seconds integer     DEFAULT NULL,
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
