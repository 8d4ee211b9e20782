-- Every statement here ends one attempt. Each is guarded by the attempt's token
-- (effective_id) and by status = 'PROCESSING': a late or duplicate worker whose attempt was
-- taken away matches no row, and RETURNING tells the caller it lost.
--
-- The guard is written `(status || '') = 'PROCESSING'` on purpose, here and in every fenced
-- statement: a plain `status = 'PROCESSING'` lets the planner pick tasks_processing_idx,
-- which statistics make look tiny but which fills with dead entries between vacuums (every
-- claim adds one, every completion kills one), and scanning it made a 32-row completion cost
-- milliseconds. The expression cannot use that partial index, so these statements always go
-- through the primary key: cost proportional to the batch, not to history.
--
-- In the same statement, so the hot path stays one round trip per batch:
--   * task_stats gets the per-minute outcome counts (throughput, failure rates);
--   * the type's circuit breaker counts the failure, or is healed by the success (a success
--     of a HALF_OPEN type is its probe: the breaker closes), with a NOTIFY on taskq_control
--     when a breaker changes state;
--   * tasks that reported progress get a last taskq_progress message with their final status,
--     so `taskq watch` ends without polling.
-- SELECT-only CTEs run only when referenced, hence the count(*) joins in the final SELECTs.

-- name: mark_success_many
-- PROCESSING -> SUCCESS for a batch of attempts, one statement.
WITH done AS (
    UPDATE taskq.tasks AS t
    SET status = 'SUCCESS',
        finished_at = now(),
        updated_at = now()
    FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS d(id, token)
    WHERE t.id = d.id
      AND t.effective_id = d.token
      AND (t.status || '') = 'PROCESSING'
    RETURNING t.id, t.queue, t.task_type, t.started_at, t.finished_at, t.progress
), counted AS (
    INSERT INTO taskq.task_stats AS s (bucket, queue, task_type, outcome, n, run_seconds)
    SELECT date_trunc('minute', now()), queue, task_type, 'success', count(*),
           sum(extract(epoch FROM finished_at - started_at))
    FROM done GROUP BY queue, task_type
    ON CONFLICT (bucket, queue, task_type, outcome) DO UPDATE
        SET n = s.n + EXCLUDED.n, run_seconds = s.run_seconds + EXCLUDED.run_seconds
), healed AS (
    UPDATE taskq.breakers AS b
    SET consecutive_failures = 0,
        state = 'CLOSED',
        changed_at = CASE WHEN b.state <> 'CLOSED' THEN now() ELSE b.changed_at END,
        reason = CASE WHEN b.state <> 'CLOSED' THEN 'probe succeeded' ELSE b.reason END,
        probe_worker = NULL,
        probe_at = NULL
    WHERE b.task_type IN (SELECT task_type FROM done)
      AND (b.consecutive_failures > 0 OR b.state = 'HALF_OPEN')
      AND b.state <> 'OPEN'
    RETURNING b.task_type, b.changed_at = now() AS changed
), told AS (
    SELECT pg_notify('taskq_control', 'breakers') FROM healed WHERE changed HAVING count(*) > 0
), watched AS (
    SELECT pg_notify('taskq_progress',
                     json_build_object('id', id, 'status', 'SUCCESS', 'progress', progress)::text)
    FROM done WHERE progress IS NOT NULL
)
SELECT done.id
FROM done, (SELECT count(*) FROM told) AS a, (SELECT count(*) FROM watched) AS b;

-- name: mark_failed
-- PROCESSING -> FAILED (retry later) or, once retry_count has reached max_retry_count,
-- PROCESSING -> DEAD_LETTER. Every right-hand side reads the row as it was before this
-- failure, so the backoff uses the retry_count before it is incremented:
--   next_retry_time = now() + delay * 2^retry_count + random(0, jitter)
-- %(after)s (seconds), when given, replaces the formula (taskq.Retry(after=...)).
-- The exponent is capped at 30 so a large max_retry_count cannot overflow the interval.
-- %(breaker)s says whether this failure counts against the type's circuit breaker (an
-- exception does; a taskq.Retry, a deliberate snooze, does not): at %(threshold)s consecutive
-- failures a CLOSED breaker opens, and a failed probe re-opens a HALF_OPEN one.
WITH failed AS (
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
      AND (status || '') = 'PROCESSING'
    RETURNING id, status, retry_count, next_retry_time, queue, task_type, started_at,
              finished_at, progress
), counted AS (
    INSERT INTO taskq.task_stats AS s (bucket, queue, task_type, outcome, n, run_seconds)
    SELECT date_trunc('minute', now()), queue, task_type,
           CASE WHEN status = 'DEAD_LETTER' THEN 'dead_lettered'
                WHEN %(breaker)s THEN 'failed' ELSE 'retried' END,
           1, extract(epoch FROM finished_at - started_at)
    FROM failed
    ON CONFLICT (bucket, queue, task_type, outcome) DO UPDATE
        SET n = s.n + EXCLUDED.n, run_seconds = s.run_seconds + EXCLUDED.run_seconds
), tripped AS (
    INSERT INTO taskq.breakers AS b (task_type, consecutive_failures, last_failure_at)
    SELECT task_type, 1, now() FROM failed WHERE %(breaker)s
    ON CONFLICT (task_type) DO UPDATE
        SET consecutive_failures = b.consecutive_failures + 1,
            last_failure_at = now(),
            state = CASE WHEN b.state = 'HALF_OPEN'
                           OR b.consecutive_failures + 1 >= %(threshold)s THEN 'OPEN'
                         ELSE b.state END,
            opened_at = CASE WHEN b.state <> 'OPEN' AND (b.state = 'HALF_OPEN'
                                  OR b.consecutive_failures + 1 >= %(threshold)s)
                             THEN now() ELSE b.opened_at END,
            changed_at = CASE WHEN b.state <> 'OPEN' AND (b.state = 'HALF_OPEN'
                                   OR b.consecutive_failures + 1 >= %(threshold)s)
                              THEN now() ELSE b.changed_at END,
            reason = CASE WHEN b.state = 'HALF_OPEN' THEN 'probe failed'
                          WHEN b.state = 'CLOSED'
                               AND b.consecutive_failures + 1 >= %(threshold)s
                          THEN (b.consecutive_failures + 1) || ' consecutive failures'
                          ELSE b.reason END,
            probe_worker = NULL,
            probe_at = NULL
    RETURNING b.state, b.changed_at = now() AS changed
), told AS (
    SELECT pg_notify('taskq_control', 'breakers') FROM tripped WHERE changed HAVING count(*) > 0
), watched AS (
    SELECT pg_notify('taskq_progress',
                     json_build_object('id', id, 'status', status, 'progress', progress)::text)
    FROM failed WHERE progress IS NOT NULL
)
SELECT failed.status, failed.retry_count, failed.next_retry_time
FROM failed, (SELECT count(*) FROM told) AS a, (SELECT count(*) FROM watched) AS b;

-- name: mark_dead
-- PROCESSING -> DEAD_LETTER at once (taskq.Permanent, or an unusable task). A permanent error
-- says the task is bad, not that the downstream is down: it does not count against the breaker.
WITH dead AS (
    UPDATE taskq.tasks
    SET status = 'DEAD_LETTER',
        next_retry_time = NULL,
        last_error = %(error)s,
        finished_at = now(),
        updated_at = now()
    WHERE id = %(id)s
      AND effective_id = %(token)s
      AND (status || '') = 'PROCESSING'
    RETURNING id, status, retry_count, next_retry_time, queue, task_type, started_at,
              finished_at, progress
), counted AS (
    INSERT INTO taskq.task_stats AS s (bucket, queue, task_type, outcome, n, run_seconds)
    SELECT date_trunc('minute', now()), queue, task_type, 'dead_lettered', 1,
           extract(epoch FROM finished_at - started_at)
    FROM dead
    ON CONFLICT (bucket, queue, task_type, outcome) DO UPDATE
        SET n = s.n + EXCLUDED.n, run_seconds = s.run_seconds + EXCLUDED.run_seconds
), watched AS (
    SELECT pg_notify('taskq_progress',
                     json_build_object('id', id, 'status', status, 'progress', progress)::text)
    FROM dead WHERE progress IS NOT NULL
)
SELECT dead.status, dead.retry_count, dead.next_retry_time
FROM dead, (SELECT count(*) FROM watched) AS b;

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
  AND (t.status || '') = 'PROCESSING'
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
-- Counted like mark_success_many (%(outcome)s: 'success', or 'duplicate' when the business key
-- was done already and the handler did not run).
WITH done AS (
    UPDATE taskq.tasks
    SET status = 'SUCCESS', finished_at = now(), updated_at = now()
    WHERE id = %(id)s AND effective_id = %(token)s AND (status || '') = 'PROCESSING'
    RETURNING id, queue, task_type, started_at, finished_at
), counted AS (
    INSERT INTO taskq.task_stats AS s (bucket, queue, task_type, outcome, n, run_seconds)
    SELECT date_trunc('minute', now()), queue, task_type, %(outcome)s, 1,
           extract(epoch FROM finished_at - started_at)
    FROM done
    ON CONFLICT (bucket, queue, task_type, outcome) DO UPDATE
        SET n = s.n + EXCLUDED.n, run_seconds = s.run_seconds + EXCLUDED.run_seconds
)
SELECT id FROM done;
