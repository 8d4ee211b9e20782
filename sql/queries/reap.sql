-- The reaper. Run in a transaction that first takes pg_try_advisory_xact_lock(reaper_lock):
-- every worker runs the reaper, but one pass at a time does the work.

-- name: reaper_lock
SELECT pg_try_advisory_xact_lock(7620312047) AS acquired;

-- name: reap_attempts
-- Rescue attempts that are dead: their worker stopped heart-beating for longer than its lease
-- (or its row is gone), or the attempt ran past started_at + timeout_seconds + grace (the
-- owning worker enforces the timeout itself; this is the backstop for a wedged worker).
-- A missing worker row counts only once the attempt is older than %(orphan_after)s: a worker
-- that was frozen long enough to be forgotten may claim once before its next heartbeat
-- re-registers it.
-- A rescue counts as a failed attempt, so a poison task that kills every worker that runs it
-- ends in DEAD_LETTER after max_retry_count rescues instead of looping forever. A rescued task
-- is runnable at once: the crash was not the task's fault, and the rescue is already late.
-- The old token stays on the row until the next claim replaces it; status is no longer
-- PROCESSING, so the stale worker's writes match nothing.
WITH victims AS (
    SELECT t.id,
           CASE WHEN w.id IS NULL
                     OR w.heartbeat_at + make_interval(secs => w.lease_seconds) <= now()
                THEN 'WorkerLost: worker ' || coalesce(t.worker_id, '?')
                     || ' stopped heart-beating; attempt rescued by the reaper'
                ELSE 'TimedOut: attempt ran past its timeout of ' || t.timeout_seconds
                     || 's; rescued by the reaper'
           END AS reason
    FROM taskq.tasks AS t
    LEFT JOIN taskq.workers AS w ON w.id = t.worker_id
    WHERE t.status = 'PROCESSING'
      AND ((w.id IS NULL
            AND t.started_at + make_interval(secs => %(orphan_after)s::float8) <= now())
           OR w.heartbeat_at + make_interval(secs => w.lease_seconds) <= now()
           OR t.started_at + make_interval(secs => t.timeout_seconds + %(grace)s::float8) <= now())
    FOR UPDATE OF t SKIP LOCKED
), rescued AS (
    UPDATE taskq.tasks AS t
    SET status = CASE WHEN t.retry_count >= t.max_retry_count THEN 'DEAD_LETTER' ELSE 'FAILED' END,
        retry_count = CASE WHEN t.retry_count >= t.max_retry_count THEN t.retry_count
                           ELSE t.retry_count + 1 END,
        next_retry_time = CASE WHEN t.retry_count >= t.max_retry_count THEN NULL ELSE now() END,
        last_error = victims.reason,
        finished_at = now(),
        updated_at = now()
    FROM victims
    WHERE t.id = victims.id AND (t.status || '') = 'PROCESSING'
    RETURNING t.id, t.task_type, t.queue, t.status, t.retry_count, t.worker_id, t.last_error
), counted AS (
    INSERT INTO taskq.task_stats AS s (bucket, queue, task_type, outcome, n)
    SELECT date_trunc('minute', now()), queue, task_type,
           CASE WHEN status = 'DEAD_LETTER' THEN 'dead_lettered' ELSE 'rescued' END, count(*)
    FROM rescued GROUP BY 1, 2, 3, 4
    ON CONFLICT (bucket, queue, task_type, outcome) DO UPDATE SET n = s.n + EXCLUDED.n
), woken AS (
    SELECT pg_notify('taskq_tasks', json_agg(DISTINCT queue)::text)
    FROM rescued WHERE status = 'FAILED' HAVING count(*) > 0
)
SELECT rescued.* FROM rescued, (SELECT count(*) FROM woken) AS w;

-- name: delete_dead_workers
-- Forget workers presumed dead that hold nothing any more. A worker that was only frozen
-- re-registers with its next heartbeat.
DELETE FROM taskq.workers AS w
WHERE w.heartbeat_at + make_interval(secs => w.lease_seconds) <= now()
  AND NOT EXISTS (
      SELECT 1 FROM taskq.tasks AS t WHERE t.status = 'PROCESSING' AND t.worker_id = w.id
  )
RETURNING w.id;
