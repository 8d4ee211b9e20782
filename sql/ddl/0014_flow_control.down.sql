DROP FUNCTION taskq.queue_limits_set_v1(text, text, real, text);
DROP FUNCTION taskq.limits_reset_v1(text, text, text);
DROP FUNCTION taskq.limits_set_v1(text, text, integer, integer, double precision, text,
                                  double precision, boolean, text[], text);
DROP FUNCTION taskq.claim_batch_v1(text, text[], integer[], integer[], integer, text, boolean,
                                   boolean);
DROP FUNCTION taskq.claim_keys_v1(text, text, text, integer);
DROP FUNCTION taskq.claim_key_v1(text, text, text, boolean, boolean, bigint[]);
DROP FUNCTION taskq.claim_scan_v1(text, text[], text[], text, integer, boolean, bigint[]);
DROP FUNCTION taskq.claim_lanes_v1(text, text[], text[], integer, real, boolean, boolean,
                                   bigint[]);
DROP TABLE taskq.queue_limits;
DROP TABLE taskq.flow_limits;
DROP FUNCTION taskq.enqueue(text, jsonb, text, text, integer, timestamptz, interval, integer,
                            integer, text, text, text, bigint, text);
DROP INDEX IF EXISTS taskq.tasks_concurrency_idx;
DROP INDEX IF EXISTS taskq.tasks_retry_idx;
ALTER TABLE taskq.tasks DROP COLUMN concurrency_key;
-- 0009_edges's function, as it was.
CREATE FUNCTION taskq.enqueue(
    task_type       text,
    payload         jsonb       DEFAULT '{}',
    queue           text        DEFAULT NULL,  -- NULL: the type's registered queue, else 'default'
    biz_id          text        DEFAULT NULL,
    priority        integer     DEFAULT 0,
    scheduled_at    timestamptz DEFAULT NULL,
    delay           interval    DEFAULT NULL,
    max_retry_count integer     DEFAULT NULL,  -- NULL: the type's registered setting
    timeout_seconds integer     DEFAULT NULL,  -- NULL: the type's registered setting
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
            enqueue.queue,
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
