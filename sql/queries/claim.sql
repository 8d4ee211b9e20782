-- name: claim_batch
-- Claim up to %(limit)s runnable tasks of one queue, of the types this worker can run, within
-- the flow limits of their types (sql/ddl/0014_flow_control.sql, taskq.claim_batch_v3): caps,
-- rates and fair share per type, and the retry lane per queue. Highest priority first, then
-- oldest runnable time, then id, in each lane. Every claim mints a fresh effective_id: the
-- attempt's token, which every later write of this attempt must present. A row that left
-- max_retry_count or timeout_seconds NULL (a bare INSERT) gets the handler's settings, passed
-- as arrays parallel to task_types. retries_only: protection level L3 (CIRCUIT_OPEN). probe: a
-- HALF_OPEN breaker's probe passes the breaker check.
-- A function, not one statement: a limited type's count, claim and token spend run under its
-- limits row lock. The last column, held_for, is set only on an extra row with a NULL id.
-- traceparent: the enqueue's trace context, for OpenTelemetry, returned by the UPDATE that
-- claims the row (read beside the function, in this statement's older snapshot, a task committed
-- during the claim came back without it).
-- isolated (taskq.claim_batch_v3, sql/ddl/0017): false claims only rows without isolate; true
-- claims at most one isolate row, for the worker's isolator, which runs it alone in its process.
-- Each lane's scan reads the runnable index by type (taskq.claim_scan_v2, sql/ddl/0023): only
-- the rows of the types in task_types, never those of a paused type or another worker's.
SELECT c.id, c.task_type, c.queue, c.biz_id, c.payload, c.priority, c.retry_count,
       c.max_retry_count, c.timeout_seconds, c.effective_id, c.trace_id, c.created_at,
       c.scheduled_at, c.started_at, c.context, c.parent_id, c.ordering_key, c.ready_at,
       c.capped, c.traceparent, c.held_for
FROM taskq.claim_batch_v3(%(queue)s, %(task_types)s::text[], %(max_retry_counts)s::integer[],
                          %(timeouts)s::integer[], %(limit)s, %(worker_id)s, %(retries_only)s,
                          %(probe)s, %(isolated)s) AS c;

-- name: claim_few
-- claim_batch after a round that came back short (taskq.claim_few_v1, sql/ddl/0031): the same
-- arguments and rows. Where the types have no flow limits and no more than %(limit)s rows are
-- runnable, it claims them all in one scan; otherwise it is claim_batch.
SELECT c.id, c.task_type, c.queue, c.biz_id, c.payload, c.priority, c.retry_count,
       c.max_retry_count, c.timeout_seconds, c.effective_id, c.trace_id, c.created_at,
       c.scheduled_at, c.started_at, c.context, c.parent_id, c.ordering_key, c.ready_at,
       c.capped, c.traceparent, c.held_for
FROM taskq.claim_few_v1(%(queue)s, %(task_types)s::text[], %(max_retry_counts)s::integer[],
                        %(timeouts)s::integer[], %(limit)s, %(worker_id)s, %(retries_only)s,
                        %(probe)s, %(isolated)s) AS c;

-- name: isolated_due
-- The queues among these with an isolate row of these types runnable now (the rows a crash
-- beside other attempts sent back, sql/ddl/0017): the isolator's cheap look before it makes
-- its process idle to claim one. Reads only tasks_isolate_idx, which is empty while no task
-- has crashed a worker.
SELECT DISTINCT t.queue
FROM taskq.tasks AS t
WHERE t.isolate
  AND t.status IN ('PENDING', 'FAILED')
  AND t.queue = ANY(%(queues)s::text[])
  AND t.task_type = ANY(%(task_types)s::text[])
  AND t.runnable_at <= now()
  AND NOT EXISTS (SELECT 1 FROM taskq.breakers AS b
                  WHERE b.task_type = t.task_type AND b.state <> 'CLOSED');

-- name: limits_declare
-- The limits a worker's code declares (@app.task(max_running=..., rate=...)), written at worker
-- start. Rows an operator set (source 'operator') are left alone. A changed rate starts with a
-- full bucket of its burst.
INSERT INTO taskq.flow_limits AS l (task_type, max_running, max_running_per_key, rate,
                                    rate_text, burst, fair, tokens, source, changed_by)
SELECT d.task_type, d.max_running, d.max_running_per_key, d.rate, d.rate_text, d.burst, d.fair,
       coalesce(d.burst, 0), 'code', %(worker_id)s
FROM unnest(%(task_types)s::text[], %(max_running)s::integer[], %(per_key)s::integer[],
            %(rates)s::float8[], %(rate_texts)s::text[], %(bursts)s::float8[],
            %(fair)s::boolean[])
     AS d(task_type, max_running, max_running_per_key, rate, rate_text, burst, fair)
ON CONFLICT (task_type) DO UPDATE
    SET max_running = excluded.max_running,
        max_running_per_key = excluded.max_running_per_key,
        rate = excluded.rate,
        rate_text = excluded.rate_text,
        burst = excluded.burst,
        fair = excluded.fair,
        tokens = CASE WHEN l.rate IS DISTINCT FROM excluded.rate
                        OR l.burst IS DISTINCT FROM excluded.burst
                      THEN excluded.tokens ELSE l.tokens END,
        changed_by = excluded.changed_by,
        changed_at = now()
    WHERE l.source = 'code'
      AND (l.max_running, l.max_running_per_key, l.rate, l.burst, l.fair)
          IS DISTINCT FROM (excluded.max_running, excluded.max_running_per_key, excluded.rate,
                            excluded.burst, excluded.fair);

-- name: limits_undeclare
-- Types this worker runs whose code declares no limits any more: drop the code's old row.
DELETE FROM taskq.flow_limits
WHERE task_type = ANY(%(task_types)s::text[]) AND source = 'code';
