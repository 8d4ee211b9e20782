-- name: drain_clock
-- The database clock at the start of a drain: what happened after it is the drain's doing.
SELECT now() AS now;

-- name: drain_make_retries_due
-- taskq.testing.drain(run_retries=True): a failed attempt's backoff is not waited out in a
-- test. The retry keeps its retry_count and last_error; only its next_retry_time moves.
UPDATE taskq.tasks
SET next_retry_time = now(), updated_at = now()
WHERE status = 'FAILED'
  AND task_type = ANY(%(task_types)s::text[])
  AND next_retry_time > now();

-- name: drain_pending
-- The tasks a drain still waits for: due or running, of the app's types (and, for a drain of
-- only what was due at its start, of those ids). With retries run at once, every FAILED task
-- counts: one may have failed after drain_make_retries_due ran, its backoff not yet moved.
SELECT count(*) AS n
FROM taskq.tasks
WHERE task_type = ANY(%(task_types)s::text[])
  AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
  AND (status = 'PROCESSING'
       OR (status = 'FAILED' AND %(retries)s)
       OR (status IN ('PENDING', 'FAILED') AND runnable_at <= now()));

-- name: drain_due_ids
-- The tasks due at the start of a drain (until_empty=False runs these and no later ones).
SELECT id
FROM taskq.tasks
WHERE task_type = ANY(%(task_types)s::text[])
  AND status IN ('PENDING', 'FAILED')
  AND runnable_at <= now();

-- name: drain_outcomes
-- Every task of the app's types that a drain touched, as it ended.
SELECT id, task_type, status, retry_count, last_error, biz_id, payload
FROM taskq.tasks
WHERE task_type = ANY(%(task_types)s::text[])
  AND updated_at >= %(since)s
ORDER BY id;

-- name: enqueued_of_type
-- taskq.testing.assert_enqueued: the live (not yet finished) tasks of one type, oldest first.
SELECT id, task_type, queue, biz_id, payload, priority, status, scheduled_at, trace_id,
       unique_key, ordering_key, parent_id, retry_count
FROM taskq.tasks
WHERE task_type = %(task_type)s
  AND status IN ('PENDING', 'PROCESSING', 'FAILED')
ORDER BY id;
