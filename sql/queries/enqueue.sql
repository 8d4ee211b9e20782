-- name: insert_task
-- One task, in the caller's transaction. The statement trigger sends the wake-up NOTIFY, which
-- PostgreSQL delivers only if and when the caller commits. With a unique_key, a live task
-- (PENDING, PROCESSING, FAILED) of the same type and key makes this insert nothing and return
-- no row: the caller then looks the existing one up with find_live_task.
INSERT INTO taskq.tasks (task_type, queue, biz_id, payload, priority, scheduled_at,
                         max_retry_count, timeout_seconds, trace_id, unique_key, ordering_key,
                         parent_id, concurrency_key, traceparent)
VALUES (%(task_type)s, %(queue)s, %(biz_id)s, %(payload)s::jsonb, %(priority)s,
        coalesce(%(scheduled_at)s::timestamptz, now())
            + make_interval(secs => coalesce(%(delay)s::float8, 0)),
        %(max_retry_count)s, %(timeout_seconds)s, %(trace_id)s, %(unique_key)s,
        %(ordering_key)s, %(parent_id)s, %(concurrency_key)s, %(traceparent)s)
ON CONFLICT (task_type, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('PENDING', 'PROCESSING', 'FAILED')
    DO NOTHING
RETURNING id;

-- name: insert_tasks
-- Many tasks in one statement (one round trip, one NOTIFY). Arrays are parallel, one element per
-- task; WITH ORDINALITY keeps the ids in the order the caller gave the items. Items whose
-- unique_key collides with a live task (or an earlier item) are skipped; RETURNING says which
-- (task_type, unique_key) went in, so the caller can map ids back to items.
INSERT INTO taskq.tasks (task_type, queue, biz_id, payload, priority, scheduled_at,
                         max_retry_count, timeout_seconds, trace_id, unique_key, ordering_key,
                         parent_id, concurrency_key, traceparent)
SELECT t.task_type, t.queue, t.biz_id, t.payload, t.priority,
       coalesce(t.scheduled_at, now()) + make_interval(secs => coalesce(t.delay, 0)),
       t.max_retry_count, t.timeout_seconds, t.trace_id, t.unique_key, t.ordering_key,
       t.parent_id, t.concurrency_key, t.traceparent
FROM unnest(%(task_types)s::text[], %(queues)s::text[], %(biz_ids)s::text[],
            %(payloads)s::jsonb[], %(priorities)s::smallint[], %(scheduled_ats)s::timestamptz[],
            %(delays)s::float8[], %(max_retry_counts)s::integer[], %(timeouts)s::integer[],
            %(trace_ids)s::text[], %(unique_keys)s::text[], %(ordering_keys)s::text[],
            %(parent_ids)s::bigint[], %(concurrency_keys)s::text[],
            %(traceparents)s::text[])
     WITH ORDINALITY AS t(task_type, queue, biz_id, payload, priority, scheduled_at, delay,
                          max_retry_count, timeout_seconds, trace_id, unique_key, ordering_key,
                          parent_id, concurrency_key, traceparent, ord)
ORDER BY t.ord
ON CONFLICT (task_type, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('PENDING', 'PROCESSING', 'FAILED')
    DO NOTHING
RETURNING id, task_type, unique_key;

-- name: find_live_tasks
-- The live tasks holding these (task_type, unique_key) pairs.
SELECT t.id, t.task_type, t.unique_key
FROM taskq.tasks AS t
JOIN unnest(%(task_types)s::text[], %(unique_keys)s::text[]) AS k(task_type, unique_key)
  ON t.task_type = k.task_type AND t.unique_key = k.unique_key
WHERE t.status IN ('PENDING', 'PROCESSING', 'FAILED');

-- name: reserve_task_ids
-- The ids for a COPY batch, in order, and the database clock for its scheduled times. When the
-- role may not set ids (taskq_enqueuer has no INSERT on the id column: least privilege) the
-- ids come back NULL and the caller uses insert_tasks instead. The sequence is looked up once
-- (OFFSET 0 keeps the planner from copying the lookup into the subquery): looking it up for
-- every id was three quarters of this statement's time.
SELECT CASE
           WHEN has_column_privilege('taskq.tasks', 'id', 'INSERT')
            AND has_sequence_privilege(seq.id, 'USAGE')
           THEN (SELECT array_agg(v ORDER BY v)
                 FROM (SELECT nextval(seq.id) AS v
                       FROM generate_series(1, %(n)s)) AS reserved)
       END AS ids,
       now() AS now
FROM (SELECT pg_get_serial_sequence('taskq.tasks', 'id')::regclass AS id OFFSET 0) AS seq;

-- name: copy_tasks
-- Bulk enqueue without unique keys: COPY takes PostgreSQL's multi-row insert path, about twice
-- as fast per row as INSERT ... SELECT. The statement trigger still sends one NOTIFY. {columns}
-- is the batch's column list: id, task_type, queue, payload, priority, max_retry_count,
-- timeout_seconds, trace_id, then only the optional columns some item of the batch sets.
COPY taskq.tasks ({columns}) FROM STDIN;

-- name: enqueue_savepoint
-- Before a bulk COPY whose items are checked while they stream (copy_plain_tasks): an item that
-- fails its check rolls back to here, so the caller's transaction goes on without the batch.
SAVEPOINT taskq_enqueue_many;

-- name: enqueue_savepoint_rollback
ROLLBACK TO SAVEPOINT taskq_enqueue_many;

-- name: enqueue_savepoint_release
RELEASE SAVEPOINT taskq_enqueue_many;
