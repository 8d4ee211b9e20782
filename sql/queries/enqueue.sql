-- name: insert_task
-- One task, in the caller's transaction. The statement trigger sends the wake-up NOTIFY, which
-- PostgreSQL delivers only if and when the caller commits.
INSERT INTO taskq.tasks (task_type, queue, biz_id, payload, priority, scheduled_at,
                         max_retry_count, timeout_seconds, trace_id)
VALUES (%(task_type)s, %(queue)s, %(biz_id)s, %(payload)s::jsonb, %(priority)s,
        coalesce(%(scheduled_at)s::timestamptz, now())
            + make_interval(secs => coalesce(%(delay)s::float8, 0)),
        %(max_retry_count)s, %(timeout_seconds)s, %(trace_id)s)
RETURNING id;

-- name: insert_tasks
-- Many tasks in one statement (one round trip, one NOTIFY). Arrays are parallel, one element per
-- task; WITH ORDINALITY keeps the ids in the order the caller gave the items.
INSERT INTO taskq.tasks (task_type, queue, biz_id, payload, priority, scheduled_at,
                         max_retry_count, timeout_seconds, trace_id)
SELECT t.task_type, t.queue, t.biz_id, t.payload, t.priority,
       coalesce(t.scheduled_at, now()) + make_interval(secs => coalesce(t.delay, 0)),
       t.max_retry_count, t.timeout_seconds, t.trace_id
FROM unnest(%(task_types)s::text[], %(queues)s::text[], %(biz_ids)s::text[],
            %(payloads)s::jsonb[], %(priorities)s::smallint[], %(scheduled_ats)s::timestamptz[],
            %(delays)s::float8[], %(max_retry_counts)s::integer[], %(timeouts)s::integer[],
            %(trace_ids)s::text[])
     WITH ORDINALITY AS t(task_type, queue, biz_id, payload, priority, scheduled_at, delay,
                          max_retry_count, timeout_seconds, trace_id, ord)
ORDER BY t.ord
RETURNING id;
