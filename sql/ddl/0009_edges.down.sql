DROP TRIGGER IF EXISTS tasks_done_markers ON taskq.tasks;
DROP FUNCTION IF EXISTS taskq.keep_done_markers_v1();
DROP TRIGGER IF EXISTS tasks_payload_size_insert ON taskq.tasks;
DROP FUNCTION IF EXISTS taskq.check_payload_size_v1();
DROP TABLE IF EXISTS taskq.settings;
DROP TRIGGER IF EXISTS tasks_route_insert ON taskq.tasks;
DROP FUNCTION IF EXISTS taskq.route_task_v1();
ALTER TABLE taskq.tasks ALTER COLUMN queue SET DEFAULT 'default';
DROP TABLE IF EXISTS taskq.task_types;

CREATE OR REPLACE FUNCTION taskq.enqueue(
    task_type       text,
    payload         jsonb       DEFAULT '{}',
    queue           text        DEFAULT 'default',
    biz_id          text        DEFAULT NULL,
    priority        integer     DEFAULT 0,
    scheduled_at    timestamptz DEFAULT NULL,
    delay           interval    DEFAULT NULL,
    max_retry_count integer     DEFAULT NULL,
    timeout_seconds integer     DEFAULT NULL,
    trace_id        text        DEFAULT NULL,
    unique_key      text        DEFAULT NULL,
    ordering_key    text        DEFAULT NULL,
    parent_id       bigint      DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
BEGIN
    INSERT INTO taskq.tasks (task_type, payload, queue, biz_id, priority, scheduled_at,
                             max_retry_count, timeout_seconds, trace_id, unique_key,
                             ordering_key, parent_id)
    VALUES (enqueue.task_type,
            coalesce(enqueue.payload, '{}'),
            coalesce(enqueue.queue, 'default'),
            enqueue.biz_id,
            enqueue.priority,
            coalesce(enqueue.scheduled_at, now()) + coalesce(enqueue.delay, interval '0'),
            enqueue.max_retry_count,
            enqueue.timeout_seconds,
            coalesce(enqueue.trace_id, replace(gen_random_uuid()::text, '-', '')),
            enqueue.unique_key,
            enqueue.ordering_key,
            enqueue.parent_id)
    ON CONFLICT (task_type, unique_key)
        WHERE unique_key IS NOT NULL AND status IN ('PENDING', 'PROCESSING', 'FAILED')
        DO NOTHING
    RETURNING id INTO new_id;
    IF new_id IS NULL THEN
        SELECT t.id INTO new_id FROM taskq.tasks AS t
        WHERE t.task_type = enqueue.task_type AND t.unique_key = enqueue.unique_key
          AND t.status IN ('PENDING', 'PROCESSING', 'FAILED');
    END IF;
    RETURN new_id;
END
$$;
