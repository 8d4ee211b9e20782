-- name: get_task
SELECT id, task_type, queue, biz_id, payload, status, priority, scheduled_at, retry_count,
       max_retry_count, next_retry_time, last_error, timeout_seconds, started_at, finished_at,
       effective_id, worker_id, progress, trace_id, created_at, updated_at
FROM taskq.tasks
WHERE id = %(id)s;

-- name: audit_for_task
SELECT at, actor, action, note, detail
FROM taskq.audit
WHERE task_id = %(id)s
ORDER BY at, id;

-- name: running_tasks
-- Attempts in flight, oldest first, with their latest progress.
SELECT id, task_type, queue, biz_id, worker_id, retry_count, started_at, progress
FROM taskq.tasks
WHERE status = 'PROCESSING'
  AND (%(task_type)s::text IS NULL OR task_type = %(task_type)s::text)
ORDER BY started_at, id
LIMIT %(limit)s;
