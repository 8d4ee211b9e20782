-- taskq 0006: task semantics beyond run-and-retry.
--   unique_key    refuses a second *live* task (PENDING, PROCESSING, FAILED) of the same type
--                 with the same key: a partial unique index, so it holds under concurrency.
--   ordering_key  tasks sharing a key run one at a time, in enqueue (id) order.
--   parent_id     the task that enqueued this one (child tasks inherit its trace_id).
--   context       stage checkpoints: {"stage": <last completed>, "data": {...}}; a retry or a
--                 rescued attempt starts from it and skips finished stages.
ALTER TABLE taskq.tasks
    ADD COLUMN unique_key   text,
    ADD COLUMN ordering_key text,
    ADD COLUMN parent_id    bigint,
    ADD COLUMN context      jsonb;

CREATE UNIQUE INDEX tasks_unique_live_idx ON taskq.tasks (task_type, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('PENDING', 'PROCESSING', 'FAILED');

-- The claim asks "is there an earlier live task with my ordering key?" for keyed rows only.
CREATE INDEX tasks_ordering_idx ON taskq.tasks (ordering_key, id)
    WHERE ordering_key IS NOT NULL AND status IN ('PENDING', 'PROCESSING', 'FAILED');

CREATE INDEX tasks_parent_idx ON taskq.tasks (parent_id) WHERE parent_id IS NOT NULL;

-- The SQL API grows the new arguments. With unique_key, a second call while a live task with
-- that key exists returns the existing task's id instead of inserting.
DROP FUNCTION taskq.enqueue(text, jsonb, text, text, integer, timestamptz, interval, integer,
                            integer, text);

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
