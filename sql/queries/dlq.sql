-- Dead-letter operations. A selection is: explicit ids, or a task type, or everything; each
-- filter is NULL when unused. Every requeue and discard writes its audit rows in the same
-- statement, so an action cannot happen unrecorded.

-- name: dlq_list
SELECT id, task_type, queue, biz_id, retry_count, max_retry_count, finished_at, last_error
FROM taskq.tasks
WHERE status = 'DEAD_LETTER'
  AND (%(task_type)s::text IS NULL OR task_type = %(task_type)s::text)
ORDER BY finished_at DESC, id DESC
LIMIT %(limit)s;

-- name: dlq_select
-- What a requeue or discard with the same selection would touch (for --dry-run, and the
-- all-or-nothing check before acting). Locks the rows until the caller's transaction ends, so
-- two operators acting on the same dead letters do it one after the other.
SELECT id, task_type, queue, biz_id, retry_count, finished_at, last_error
FROM taskq.tasks
WHERE status = 'DEAD_LETTER'
  AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
  AND (%(task_type)s::text IS NULL OR task_type = %(task_type)s::text)
ORDER BY id
FOR UPDATE;

-- name: dlq_requeue
-- DEAD_LETTER -> PENDING, recorded, and a wake-up for the queues involved. Without a reset the
-- task keeps its retry_count, so it gets one more run before it dead-letters again; with
-- %(reset)s it starts over with the full retry budget.
WITH moved AS (
    UPDATE taskq.tasks
    SET status = 'PENDING',
        retry_count = CASE WHEN %(reset)s THEN 0 ELSE retry_count END,
        scheduled_at = now(),
        next_retry_time = NULL,
        effective_id = NULL,
        worker_id = NULL,
        started_at = NULL,
        finished_at = NULL,
        updated_at = now()
    WHERE status = 'DEAD_LETTER'
      AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
      AND (%(task_type)s::text IS NULL OR task_type = %(task_type)s::text)
    RETURNING id, task_type, queue, retry_count, last_error
), audited AS (
    INSERT INTO taskq.audit (actor, action, task_id, task_type, note, detail)
    SELECT %(actor)s, 'dlq_requeue', id, task_type, %(note)s,
           jsonb_build_object('reset_retries', %(reset)s, 'retry_count', retry_count,
                              'last_error', last_error)
    FROM moved
), woken AS (
    SELECT pg_notify('taskq_tasks', json_agg(DISTINCT queue)::text) FROM moved HAVING count(*) > 0
)
SELECT moved.id FROM moved, (SELECT count(*) FROM woken) AS w ORDER BY moved.id;

-- name: dlq_discard
-- Delete dead letters for good; the audit row keeps a copy of what was discarded.
WITH gone AS (
    DELETE FROM taskq.tasks
    WHERE status = 'DEAD_LETTER'
      AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
      AND (%(task_type)s::text IS NULL OR task_type = %(task_type)s::text)
    RETURNING id, task_type, queue, biz_id, payload, retry_count, last_error, created_at
), audited AS (
    INSERT INTO taskq.audit (actor, action, task_id, task_type, note, detail)
    SELECT %(actor)s, 'dlq_discard', id, task_type, %(note)s,
           jsonb_build_object('queue', queue, 'biz_id', biz_id, 'payload', payload,
                              'retry_count', retry_count, 'last_error', last_error,
                              'created_at', created_at)
    FROM gone
)
SELECT id FROM gone ORDER BY id;
