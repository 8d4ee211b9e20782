-- name: claim_batch
-- Claim up to %(limit)s runnable tasks of one queue, of the types this worker can run, highest
-- priority first, then oldest runnable time, then id. Every claim mints a fresh effective_id:
-- the attempt's token, which every later write of this attempt must present. A row that left
-- max_retry_count or timeout_seconds NULL (a bare INSERT) gets the handler's settings, passed
-- as arrays parallel to task_types.
-- MATERIALIZED: the LIMIT must bound the UPDATE. Written as `WHERE id IN (subquery)` the planner
-- may turn it into a semi-join that re-evaluates the LIMIT and updates more rows than asked.
-- Index: tasks_runnable_idx (queue, priority DESC, runnable_at, id) WHERE status IN (PENDING,
-- FAILED): finished rows are not in it, so the scan cost does not grow with history.
WITH picked AS MATERIALIZED (
    SELECT c.id, c.runnable_at
    FROM taskq.tasks AS c
    WHERE status IN ('PENDING', 'FAILED')
      AND queue = %(queue)s
      AND runnable_at <= now()
      AND task_type = ANY(%(task_types)s::text[])
      -- Protection level L3 (CIRCUIT_OPEN): only retries are claimed, new work waits.
      AND (NOT %(retries_only)s OR status = 'FAILED')
      -- A tripped breaker stops claims at once, everywhere: the workers' cached control state
      -- (refreshed by NOTIFY) lags by a round trip. A HALF_OPEN probe (%(probe)s) passes.
      AND (%(probe)s OR NOT EXISTS (
              SELECT 1 FROM taskq.breakers AS b
              WHERE b.task_type = c.task_type AND b.state <> 'CLOSED'))
      -- Per-key ordering: a keyed task is claimable only at the head of its key, i.e. when no
      -- earlier task with the same key is still live (a failing head blocks its key until it
      -- succeeds or is dead-lettered). Waiting tasks are not claimed, so they hold no slot.
      AND (c.ordering_key IS NULL OR NOT EXISTS (
              SELECT 1 FROM taskq.tasks AS earlier
              WHERE earlier.ordering_key = c.ordering_key
                AND earlier.id < c.id
                AND earlier.status IN ('PENDING', 'PROCESSING', 'FAILED')))
    ORDER BY priority DESC, runnable_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE taskq.tasks AS t
SET status = 'PROCESSING',
    effective_id = gen_random_uuid(),
    worker_id = %(worker_id)s,
    started_at = now(),
    finished_at = NULL,
    updated_at = now(),
    max_retry_count = coalesce(t.max_retry_count, handler.max_retry_count),
    timeout_seconds = coalesce(t.timeout_seconds, handler.timeout_seconds)
FROM picked,
     unnest(%(task_types)s::text[], %(max_retry_counts)s::integer[], %(timeouts)s::integer[])
         AS handler(task_type, max_retry_count, timeout_seconds)
WHERE t.id = picked.id
  AND handler.task_type = t.task_type
RETURNING t.id, t.task_type, t.queue, t.biz_id, t.payload, t.priority, t.retry_count,
          t.max_retry_count, t.timeout_seconds, t.effective_id, t.trace_id, t.created_at,
          t.scheduled_at, t.started_at, t.context, t.parent_id, t.ordering_key,
          picked.runnable_at AS ready_at;
