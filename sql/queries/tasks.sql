-- name: get_task
SELECT id, task_type, queue, biz_id, payload, status, priority, scheduled_at, retry_count,
       max_retry_count, next_retry_time, last_error, timeout_seconds, started_at, finished_at,
       effective_id, worker_id, progress, trace_id, created_at, updated_at, unique_key,
       ordering_key, parent_id, context, abort_requested_at
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

-- name: task_tree
-- A task and every task it enqueued, recursively (child tasks carry parent_id).
WITH RECURSIVE tree AS (
    SELECT t.id, t.parent_id, t.task_type, t.status, t.biz_id, t.trace_id, t.retry_count,
           t.created_at, t.finished_at, 0 AS depth
    FROM taskq.tasks AS t WHERE t.id = %(id)s
    UNION ALL
    SELECT c.id, c.parent_id, c.task_type, c.status, c.biz_id, c.trace_id, c.retry_count,
           c.created_at, c.finished_at, tree.depth + 1
    FROM taskq.tasks AS c JOIN tree ON c.parent_id = tree.id
    WHERE tree.depth < 50
)
SELECT * FROM tree ORDER BY depth, id;

-- name: tasks_without_task
-- Reconciliation: which of these business keys have no task of this type at all (in any
-- status)? A key that already ran, or is waiting, is not missing; nor is one whose finished
-- task was pruned (its done marker in task_executed outlives the row). In the reconciler's
-- order: an anti-join may hash, and a hash gives no order.
SELECT k.biz_id
FROM unnest(%(biz_ids)s::text[]) WITH ORDINALITY AS k(biz_id, n)
WHERE NOT EXISTS (
    SELECT 1 FROM taskq.tasks AS t WHERE t.task_type = %(task_type)s AND t.biz_id = k.biz_id
)
  AND NOT EXISTS (
    SELECT 1 FROM taskq.task_executed AS e
    WHERE e.task_type = %(task_type)s AND e.biz_id = k.biz_id
)
ORDER BY k.n;
