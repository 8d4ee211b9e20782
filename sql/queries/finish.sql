-- Every statement here ends one attempt. Each is guarded by the attempt's token
-- (effective_id) and by status = 'PROCESSING': a late or duplicate worker whose attempt was
-- taken away matches no row, and RETURNING tells the caller it lost.

-- name: mark_success_many
-- PROCESSING -> SUCCESS for a batch of attempts, one statement.
UPDATE taskq.tasks AS t
SET status = 'SUCCESS',
    finished_at = now(),
    updated_at = now()
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS done(id, token)
WHERE t.id = done.id
  AND t.effective_id = done.token
  AND t.status = 'PROCESSING'
RETURNING t.id;

-- name: mark_failed
-- PROCESSING -> FAILED (retry later) or, once retry_count has reached max_retry_count,
-- PROCESSING -> DEAD_LETTER. Every right-hand side reads the row as it was before this
-- failure, so the backoff uses the retry_count before it is incremented:
--   next_retry_time = now() + delay * 2^retry_count + random(0, jitter)
-- %(after)s (seconds), when given, replaces the formula (taskq.Retry(after=...)).
-- The exponent is capped at 30 so a large max_retry_count cannot overflow the interval.
UPDATE taskq.tasks
SET status = CASE WHEN retry_count >= max_retry_count THEN 'DEAD_LETTER' ELSE 'FAILED' END,
    retry_count = CASE WHEN retry_count >= max_retry_count THEN retry_count
                       ELSE retry_count + 1 END,
    next_retry_time = CASE
        WHEN retry_count >= max_retry_count THEN NULL
        ELSE now() + make_interval(secs => coalesce(
            %(after)s::float8,
            %(delay)s::float8 * power(2, least(retry_count, 30)) + random() * %(jitter)s::float8))
    END,
    last_error = %(error)s,
    finished_at = now(),
    updated_at = now()
WHERE id = %(id)s
  AND effective_id = %(token)s
  AND status = 'PROCESSING'
RETURNING status, retry_count, next_retry_time;

-- name: mark_dead
-- PROCESSING -> DEAD_LETTER at once (taskq.Permanent, or an unusable task).
UPDATE taskq.tasks
SET status = 'DEAD_LETTER',
    next_retry_time = NULL,
    last_error = %(error)s,
    finished_at = now(),
    updated_at = now()
WHERE id = %(id)s
  AND effective_id = %(token)s
  AND status = 'PROCESSING'
RETURNING status, retry_count, next_retry_time;

-- name: release_many
-- PROCESSING -> PENDING without charging an attempt: the worker is shutting down and gives the
-- task back unrun (or interrupted). retry_count is unchanged; runnable at once.
UPDATE taskq.tasks AS t
SET status = 'PENDING',
    scheduled_at = least(t.scheduled_at, now()),
    effective_id = NULL,
    worker_id = NULL,
    started_at = NULL,
    updated_at = now()
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS rel(id, token)
WHERE t.id = rel.id
  AND t.effective_id = rel.token
  AND t.status = 'PROCESSING'
RETURNING t.id;

-- name: record_business_key
-- Exactly-once business effects: inside the handler's transaction, take the (task_type, biz_id)
-- key. No row back means another delivery of the same business key already committed its
-- effects (or holds the key right now: this statement waits for it to finish).
INSERT INTO taskq.task_executed (task_type, biz_id, task_id)
VALUES (%(task_type)s, %(biz_id)s, %(id)s)
ON CONFLICT (task_type, biz_id) DO NOTHING
RETURNING task_id;

-- name: mark_success
-- PROCESSING -> SUCCESS for one attempt, inside the idempotent handler's own transaction, so
-- the business writes, the task_executed row and the SUCCESS commit together or not at all.
UPDATE taskq.tasks
SET status = 'SUCCESS', finished_at = now(), updated_at = now()
WHERE id = %(id)s AND effective_id = %(token)s AND status = 'PROCESSING'
RETURNING id;
