-- Every statement that moves a row out of PROCESSING lives in this file, and nowhere else:
-- success, failure, retry, dead letter, cancel, the uncharged release, and the reaper's rescue
-- (or its cancel of an abort-requested attempt). They
-- are executed by taskq/db/store/finish.py only, called from taskq/worker/completer.py only
-- (tests/unit checks both). Whoever decided the outcome (handler, timeout, shutdown, reaper,
-- heartbeat), one writer records it.
--
-- Each is guarded by the attempt's token (effective_id) and by status = 'PROCESSING': a late or
-- duplicate worker whose attempt was taken away matches no row, and RETURNING tells the caller
-- it lost. Outcomes are written in batches (one statement per flush, whatever the batch size):
-- a failure storm must not cost a round trip per task exactly when the database struggles.
--
-- The guard is written `(status || '') = 'PROCESSING'` on purpose, here and in every fenced
-- statement: a plain `status = 'PROCESSING'` lets the planner pick tasks_processing_idx,
-- which statistics make look tiny but which fills with dead entries between vacuums (every
-- claim adds one, every completion kills one), and scanning it made a 32-row completion cost
-- milliseconds. The expression cannot use that partial index, so these statements always go
-- through the primary key: cost proportional to the batch, not to history.
--
-- The rows are found by `t.id = ANY(%(ids)s)`, an index condition on the primary key, and each
-- row's entry in the parallel arrays by `width_bucket(t.id, %(ids)s)`, a binary search:
-- taskq/db/store/finish.py sends every batch sorted by id, no id twice (an id can be in one
-- flush twice, a taken-away attempt and the row's next one on the same worker; the second goes
-- in a statement of its own). Joined to unnest(ids, tokens) instead, the rows were exposed to
-- the plan made first: psycopg prepares these statements after five runs and PostgreSQL keeps
-- one generic plan per session, replanned only after an ANALYZE (never, with autovacuum off).
-- Made on an empty or small table it read the whole table on every batch as the table grew: a
-- sequential scan (a 32-row success on 100,000 rows: 1,925 pages, 19 ms, against 0.3 ms), or
-- with sequential scans off a full scan of tasks_pkey under the join. So they are also planned
-- with enable_seqscan off (finish.py: the completer's session; SET LOCAL in an idempotent
-- handler's transaction and in the reaper's pass), and the index condition is the only way to
-- the rows.
--
-- In the same statement, so the hot path stays one round trip per batch:
--   * task_stats gets the per-minute outcome counts (throughput, failure rates) through
--     taskq.count_outcome_v1 (sql/ddl/0010_count_outcome.sql), the one definition of the upsert,
--     called once per (queue, type, outcome) of the batch, not once per row;
--   * the type's circuit breaker counts the failure, or is healed by the success (a success
--     of a HALF_OPEN type is its probe: the breaker closes), with a NOTIFY on taskq_control
--     when a breaker changes state;
--   * tasks that reported progress get a last taskq_progress message with their final status,
--     so `taskq watch` ends without polling.
-- SELECT-only CTEs run only when referenced, hence the count(*) joins in the final SELECTs.
-- A handler's own outcome (success, failure, permanent error) clears isolate
-- (sql/ddl/0017_crash_isolation.sql): the task ran to an end, so it no longer needs to run alone.

-- name: mark_success_many
-- PROCESSING -> SUCCESS for a batch of attempts, one statement. The idempotent path runs the
-- same statement for its one attempt inside the handler's own transaction, so the business
-- writes, the task_executed row and the SUCCESS commit together or not at all, and heal the
-- breaker exactly like the batched successes. %(outcome)s is the task_stats outcome: 'success',
-- or 'duplicate' when the business key was done already and the handler did not run.
WITH done AS (
    UPDATE taskq.tasks AS t
    SET status = 'SUCCESS',
        isolate = false,
        finished_at = now(),
        updated_at = now()
    WHERE t.id = ANY(%(ids)s::bigint[])
      AND t.effective_id = (%(tokens)s::uuid[])[width_bucket(t.id, %(ids)s::bigint[])]
      AND (t.status || '') = 'PROCESSING'
    RETURNING t.id, t.queue, t.task_type, t.started_at, t.finished_at, t.progress
), counted AS (
    SELECT taskq.count_outcome_v1(queue, task_type, %(outcome)s::text, count(*),
                                  sum(extract(epoch FROM finished_at - started_at)))
    FROM done GROUP BY queue, task_type
), healed AS (
    UPDATE taskq.breakers AS b
    SET consecutive_failures = 0,
        state = 'CLOSED',
        changed_at = CASE WHEN b.state <> 'CLOSED' THEN now() ELSE b.changed_at END,
        reason = CASE WHEN b.state <> 'CLOSED' THEN 'probe succeeded' ELSE b.reason END,
        probe_worker = NULL,
        probe_at = NULL,
        -- A closed breaker starts a fresh failure-rate window (see breaker_trip_by_rate).
        window_from = CASE WHEN b.state <> 'CLOSED' THEN now() ELSE b.window_from END
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
FROM done, (SELECT count(*) FROM counted) AS c, (SELECT count(*) FROM told) AS a,
     (SELECT count(*) FROM watched) AS b;

-- name: mark_failed_many
-- PROCESSING -> FAILED (retry later) or, once retry_count has reached max_retry_count,
-- PROCESSING -> DEAD_LETTER, for a batch of attempts. Parallel arrays, one entry per attempt:
-- its token, error text, Retry(after=...) seconds (NULL: use the formula), the type's retry
-- delay and jitter, and whether the failure counts against the type's circuit breaker (an
-- exception does; a taskq.Retry, a deliberate snooze, does not).
-- Every right-hand side reads the row as it was before this failure, so the backoff uses the
-- retry_count before it is incremented:
--   next_retry_time = now() + delay * 2^retry_count + random(0, jitter)
-- The exponent is capped at 30 so a large max_retry_count cannot overflow the interval.
-- Breakers: a type's counting failures in the batch are added to its consecutive failures; at
-- %(threshold)s a CLOSED breaker opens, and a failed probe re-opens a HALF_OPEN one. A threshold
-- of 0 turns breakers off: the count is kept (it shows in `taskq circuit status`) but nothing
-- opens (nullif makes every comparison NULL, which no CASE takes).
WITH failed AS (
    UPDATE taskq.tasks AS t
    SET status = CASE WHEN t.retry_count >= t.max_retry_count THEN 'DEAD_LETTER'
                      ELSE 'FAILED' END,
        retry_count = CASE WHEN t.retry_count >= t.max_retry_count THEN t.retry_count
                           ELSE t.retry_count + 1 END,
        next_retry_time = CASE
            WHEN t.retry_count >= t.max_retry_count THEN NULL
            ELSE now() + make_interval(secs => coalesce(
                (%(afters)s::float8[])[width_bucket(t.id, %(ids)s::bigint[])],
                (%(delays)s::float8[])[width_bucket(t.id, %(ids)s::bigint[])] * power(2, least(t.retry_count, 30))
                + random() * (%(jitters)s::float8[])[width_bucket(t.id, %(ids)s::bigint[])]))
        END,
        last_error = (%(errors)s::text[])[width_bucket(t.id, %(ids)s::bigint[])],
        isolate = false,
        finished_at = now(),
        updated_at = now()
    WHERE t.id = ANY(%(ids)s::bigint[])
      AND t.effective_id = (%(tokens)s::uuid[])[width_bucket(t.id, %(ids)s::bigint[])]
      AND (t.status || '') = 'PROCESSING'
    RETURNING t.id, t.status, t.retry_count, t.next_retry_time, t.queue, t.task_type,
              t.started_at, t.finished_at, t.progress,
              (%(counts)s::boolean[])[width_bucket(t.id, %(ids)s::bigint[])] AS counts
), counted AS (
    SELECT taskq.count_outcome_v1(queue, task_type, outcome, count(*), sum(run_seconds))
    FROM (SELECT queue, task_type,
                 CASE WHEN status = 'DEAD_LETTER' THEN 'dead_lettered'
                      WHEN counts THEN 'failed' ELSE 'retried' END,
                 extract(epoch FROM finished_at - started_at)
          FROM failed) AS f(queue, task_type, outcome, run_seconds)
    GROUP BY queue, task_type, outcome
), tripped AS (
    INSERT INTO taskq.breakers AS b
        (task_type, consecutive_failures, last_failure_at, state, opened_at, changed_at, reason)
    SELECT task_type, n, now(),
           CASE WHEN n >= nullif(%(threshold)s, 0) THEN 'OPEN' ELSE 'CLOSED' END,
           CASE WHEN n >= nullif(%(threshold)s, 0) THEN now() END,
           now(),
           CASE WHEN n >= nullif(%(threshold)s, 0) THEN n || ' consecutive failures' END
    FROM (SELECT task_type, count(*)::integer AS n FROM failed WHERE counts GROUP BY task_type)
         AS per_type
    ON CONFLICT (task_type) DO UPDATE
        SET consecutive_failures = b.consecutive_failures + EXCLUDED.consecutive_failures,
            last_failure_at = now(),
            state = CASE WHEN b.state = 'HALF_OPEN'
                           OR b.consecutive_failures + EXCLUDED.consecutive_failures
                              >= nullif(%(threshold)s, 0) THEN 'OPEN'
                         ELSE b.state END,
            opened_at = CASE WHEN b.state <> 'OPEN' AND (b.state = 'HALF_OPEN'
                                  OR b.consecutive_failures + EXCLUDED.consecutive_failures
                                     >= nullif(%(threshold)s, 0))
                             THEN now() ELSE b.opened_at END,
            changed_at = CASE WHEN b.state <> 'OPEN' AND (b.state = 'HALF_OPEN'
                                   OR b.consecutive_failures + EXCLUDED.consecutive_failures
                                      >= nullif(%(threshold)s, 0))
                              THEN now() ELSE b.changed_at END,
            reason = CASE WHEN b.state = 'HALF_OPEN' THEN 'probe failed'
                          WHEN b.state = 'CLOSED'
                               AND b.consecutive_failures + EXCLUDED.consecutive_failures
                                   >= nullif(%(threshold)s, 0)
                          THEN (b.consecutive_failures + EXCLUDED.consecutive_failures)
                               || ' consecutive failures'
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
SELECT failed.id, failed.status, failed.retry_count, failed.next_retry_time
FROM failed, (SELECT count(*) FROM counted) AS c, (SELECT count(*) FROM told) AS a,
     (SELECT count(*) FROM watched) AS b;

-- name: mark_dead_many
-- PROCESSING -> DEAD_LETTER at once (taskq.Permanent, or an unusable task), for a batch. A
-- permanent error says the task is bad, not that the downstream is down: it does not count
-- against the breaker, neither its consecutive failures (nothing here touches the breaker) nor
-- its failure rate (counted as its own outcome, 'permanent', which breaker_trip_by_rate does not
-- read; a failure that exhausted its retries stays 'dead_lettered', and counts).
WITH dead AS (
    UPDATE taskq.tasks AS t
    SET status = 'DEAD_LETTER',
        next_retry_time = NULL,
        last_error = (%(errors)s::text[])[width_bucket(t.id, %(ids)s::bigint[])],
        isolate = false,
        finished_at = now(),
        updated_at = now()
    WHERE t.id = ANY(%(ids)s::bigint[])
      AND t.effective_id = (%(tokens)s::uuid[])[width_bucket(t.id, %(ids)s::bigint[])]
      AND (t.status || '') = 'PROCESSING'
    RETURNING t.id, t.status, t.retry_count, t.next_retry_time, t.queue, t.task_type,
              t.started_at, t.finished_at, t.progress
), counted AS (
    SELECT taskq.count_outcome_v1(queue, task_type, 'permanent', count(*),
                                  sum(extract(epoch FROM finished_at - started_at)))
    FROM dead GROUP BY queue, task_type
), watched AS (
    SELECT pg_notify('taskq_progress',
                     json_build_object('id', id, 'status', status, 'progress', progress)::text)
    FROM dead WHERE progress IS NOT NULL
)
SELECT dead.id, dead.status, dead.retry_count, dead.next_retry_time
FROM dead, (SELECT count(*) FROM counted) AS c, (SELECT count(*) FROM watched) AS b;

-- name: mark_cancelled_many
-- PROCESSING -> CANCELLED for a batch of attempts: each was asked to abort (taskq cancel,
-- app.cancel) and stopped, or ignored the request and ran into its timeout. Final: no retry,
-- no dead letter, and not a failure for the circuit breaker (an operator's decision says
-- nothing about the downstream's health).
WITH cancelled AS (
    UPDATE taskq.tasks AS t
    SET status = 'CANCELLED',
        next_retry_time = NULL,
        finished_at = now(),
        updated_at = now()
    WHERE t.id = ANY(%(ids)s::bigint[])
      AND t.effective_id = (%(tokens)s::uuid[])[width_bucket(t.id, %(ids)s::bigint[])]
      AND (t.status || '') = 'PROCESSING'
    RETURNING t.id, t.status, t.retry_count, t.next_retry_time, t.queue, t.task_type,
              t.started_at, t.finished_at, t.progress
), counted AS (
    SELECT taskq.count_outcome_v1(queue, task_type, 'cancelled', count(*),
                                  sum(extract(epoch FROM finished_at - started_at)))
    FROM cancelled GROUP BY queue, task_type
), watched AS (
    SELECT pg_notify('taskq_progress',
                     json_build_object('id', id, 'status', status, 'progress', progress)::text)
    FROM cancelled WHERE progress IS NOT NULL
)
SELECT cancelled.id, cancelled.status, cancelled.retry_count, cancelled.next_retry_time
FROM cancelled, (SELECT count(*) FROM counted) AS c, (SELECT count(*) FROM watched) AS b;

-- name: release_many
-- PROCESSING -> PENDING without charging an attempt (the outcome RELEASED): the attempt can no
-- longer run and never finished through no fault of the task: a shutdown cancelled it, its
-- handler connection failed before the handler ran anything, or the heartbeat found the row
-- held by this worker although nothing here runs it (a claim whose reply was lost).
-- retry_count is unchanged; runnable at once, and a NOTIFY on taskq_tasks wakes an idle worker
-- now instead of at its next poll.
WITH released AS (
    UPDATE taskq.tasks AS t
    SET status = 'PENDING',
        scheduled_at = least(t.scheduled_at, now()),
        effective_id = NULL,
        worker_id = NULL,
        started_at = NULL,
        updated_at = now()
    WHERE t.id = ANY(%(ids)s::bigint[])
      AND t.effective_id = (%(tokens)s::uuid[])[width_bucket(t.id, %(ids)s::bigint[])]
      AND (t.status || '') = 'PROCESSING'
    RETURNING t.id, t.queue
), woken AS (
    SELECT pg_notify('taskq_tasks', json_agg(DISTINCT queue)::text)
    FROM released HAVING count(*) > 0
)
SELECT released.id FROM released, (SELECT count(*) FROM woken) AS w;

-- name: reap_attempts
-- The reaper's rescue (run in the reaper's one-pass transaction, with delete_dead_workers).
-- Rescue attempts that are dead: their worker stopped heart-beating for longer than its lease
-- (or its row is gone), or the attempt ran past started_at + timeout_seconds + grace (the
-- owning worker enforces the timeout itself; this is the backstop for a wedged worker).
-- A missing worker row counts only once the attempt is older than %(orphan_after)s: a worker
-- that was frozen long enough to be forgotten may claim once before its next heartbeat
-- re-registers it. A PROCESSING row without started_at (written by hand, or by a foreign
-- producer) is judged by updated_at instead, and missing settings take the defaults (1800 s,
-- 5 retries), so no PROCESSING row can escape every rule.
-- The crash judgement (sql/ddl/0017_crash_isolation.sql). A worker is one process, so the
-- attempts of a lost worker died together, and the one that killed the process is not known.
--   * An attempt that was the only PROCESSING row of its worker ran alone: it was the crash.
--     It is charged like a failure (FAILED, runnable at once: the rescue is already late), and
--     ends in DEAD_LETTER once its retries are spent, so a poison task that kills every worker
--     that runs it cannot loop forever.
--   * Attempts that ran beside others are not charged: crash_count + 1, back to PENDING
--     (uncharged, like release_many), each marked isolate so that a worker runs it alone next
--     time (taskq/worker/isolator.py): then a crash is charged to the task that caused it.
--     Only crash_count below the crash limit is free; from there on a crowded crash is charged
--     too, so a crasher that never gets run alone (a worker of the previous release claims
--     isolate rows in batches) still ends.
-- Every lost-worker rescue adds to crash_count and sets isolate; a handler's own outcome (the
-- mark_ statements above) clears isolate. An attempt past its timeout on a live worker is no
-- crash: charged as before ('TimedOut'), isolate and crash_count unchanged.
-- "Alone" counts every PROCESSING row of the worker, rescued in this pass or not (a concurrent
-- pass may hold some). An outcome the dead worker had decided but not yet written leaves its
-- row PROCESSING: it counts as running, the safe side (nobody is charged for it).
-- The old token stays on a FAILED row until the next claim replaces it; status is no longer
-- PROCESSING, so the stale worker's writes match nothing.
-- An attempt an operator asked to abort (abort_requested_at) whose worker is gone or wedged
-- ends CANCELLED, as it would have on a live worker: never rescued into another run.
-- The UPDATE reads the judgement from verdict, one row of id arrays (all, crowded, lost), and
-- finds its rows by `t.id = ANY(v.ids)`: joined to judged by `t.id = j.id`, a pass planned on
-- an empty table with sequential scans off scanned all of tasks_pkey under the join, on every
-- pass from then on (see the header). The pass runs with the completions' planner settings.
WITH victims AS (
    SELECT t.id,
           t.worker_id,
           (w.id IS NULL OR w.heartbeat_at + make_interval(secs => w.lease_seconds) <= now())
               AS lost
    FROM taskq.tasks AS t
    LEFT JOIN taskq.workers AS w ON w.id = t.worker_id
    WHERE t.status = 'PROCESSING'
      AND ((w.id IS NULL
            AND coalesce(t.started_at, t.updated_at)
                + make_interval(secs => %(orphan_after)s::float8) <= now())
           OR w.heartbeat_at + make_interval(secs => w.lease_seconds) <= now()
           OR coalesce(t.started_at, t.updated_at)
              + make_interval(secs => coalesce(t.timeout_seconds, 1800) + %(grace)s::float8)
              <= now())
    FOR UPDATE OF t SKIP LOCKED
), judged AS (
    SELECT v.id, v.worker_id, v.lost,
           v.lost AND v.worker_id IS NOT NULL AND EXISTS (
               SELECT 1 FROM taskq.tasks AS o
               WHERE o.worker_id = v.worker_id AND o.id <> v.id AND o.status = 'PROCESSING'
           ) AS crowded
    FROM victims AS v
), verdict AS (
    -- The judged ids as arrays, read by the UPDATE below with no join (see above).
    SELECT array_agg(id) AS ids,
           coalesce(array_agg(id) FILTER (WHERE crowded), '{}') AS crowded,
           coalesce(array_agg(id) FILTER (WHERE lost), '{}') AS lost
    FROM judged
), rescued AS (
    UPDATE taskq.tasks AS t
    SET status = CASE WHEN t.abort_requested_at IS NOT NULL THEN 'CANCELLED'
                      WHEN t.id = ANY(v.crowded) AND t.crash_count < %(crash_limit)s::integer
                      THEN 'PENDING'
                      WHEN t.retry_count >= coalesce(t.max_retry_count, 5) THEN 'DEAD_LETTER'
                      ELSE 'FAILED' END,
        retry_count = CASE WHEN t.retry_count >= coalesce(t.max_retry_count, 5)
                             OR t.abort_requested_at IS NOT NULL
                             OR (t.id = ANY(v.crowded) AND t.crash_count < %(crash_limit)s::integer)
                           THEN t.retry_count ELSE t.retry_count + 1 END,
        next_retry_time = CASE WHEN t.id = ANY(v.crowded)
                                    AND t.crash_count < %(crash_limit)s::integer
                                    AND t.abort_requested_at IS NULL THEN t.next_retry_time
                               WHEN t.retry_count >= coalesce(t.max_retry_count, 5)
                                 OR t.abort_requested_at IS NOT NULL THEN NULL
                               ELSE now() END,
        scheduled_at = CASE WHEN t.id = ANY(v.crowded) AND t.crash_count < %(crash_limit)s::integer
                                 AND t.abort_requested_at IS NULL
                            THEN least(t.scheduled_at, now()) ELSE t.scheduled_at END,
        crash_count = CASE WHEN t.id = ANY(v.lost) AND t.abort_requested_at IS NULL
                           THEN t.crash_count + 1 ELSE t.crash_count END,
        isolate = (t.id = ANY(v.lost) AND t.abort_requested_at IS NULL) OR t.isolate,
        last_error = CASE
            WHEN NOT t.id = ANY(v.lost)
            THEN 'TimedOut: attempt ran past its timeout of '
                 || coalesce(t.timeout_seconds, 1800) || 's; rescued by the reaper'
            WHEN NOT t.id = ANY(v.crowded)
            THEN 'WorkerLost: the process died while running this task alone (worker '
                 || coalesce(t.worker_id, '?') || ' stopped heart-beating); attempt rescued'
                 || ' by the reaper'
            WHEN t.crash_count < %(crash_limit)s::integer
            THEN 'WorkerLost: worker ' || t.worker_id || ' stopped heart-beating while this'
                 || ' task ran beside others; not charged, it runs alone next (crash '
                 || (t.crash_count + 1) || ' of ' || %(crash_limit)s::integer || ' uncharged)'
            ELSE 'WorkerLost: worker ' || t.worker_id || ' stopped heart-beating while this'
                 || ' task ran beside others, crash ' || (t.crash_count + 1)
                 || ': charged past the limit of ' || %(crash_limit)s::integer || ' uncharged crashes'
        END,
        effective_id = CASE WHEN t.id = ANY(v.crowded)
                                 AND t.crash_count < %(crash_limit)s::integer
                                 AND t.abort_requested_at IS NULL
                            THEN NULL ELSE t.effective_id END,
        started_at = CASE WHEN t.id = ANY(v.crowded) AND t.crash_count < %(crash_limit)s::integer
                               AND t.abort_requested_at IS NULL
                          THEN NULL ELSE t.started_at END,
        worker_id = CASE WHEN t.id = ANY(v.crowded) AND t.crash_count < %(crash_limit)s::integer
                              AND t.abort_requested_at IS NULL
                         THEN NULL ELSE t.worker_id END,
        finished_at = CASE WHEN t.id = ANY(v.crowded) AND t.crash_count < %(crash_limit)s::integer
                                AND t.abort_requested_at IS NULL
                           THEN NULL ELSE now() END,
        updated_at = now()
    FROM verdict AS v
    WHERE t.id = ANY(v.ids) AND (t.status || '') = 'PROCESSING'
    RETURNING t.id, t.task_type, t.queue, t.status, t.retry_count, t.last_error,
              t.crash_count, t.isolate
), counted AS (
    SELECT taskq.count_outcome_v1(queue, task_type, outcome, count(*))
    FROM (SELECT queue, task_type,
                 CASE WHEN status = 'DEAD_LETTER' THEN 'dead_lettered'
                      WHEN status = 'CANCELLED' THEN 'cancelled' ELSE 'rescued' END
          FROM rescued WHERE status <> 'PENDING') AS r(queue, task_type, outcome)
    GROUP BY queue, task_type, outcome
), woken AS (
    SELECT pg_notify('taskq_tasks', json_agg(DISTINCT queue)::text)
    FROM rescued WHERE status IN ('FAILED', 'PENDING') HAVING count(*) > 0
)
SELECT rescued.*, judged.worker_id
FROM rescued JOIN judged USING (id), (SELECT count(*) FROM counted) AS c,
     (SELECT count(*) FROM woken) AS w;

-- name: record_business_key
-- Exactly-once business effects: inside the handler's transaction, take the task's
-- (task_type, biz_id) key through taskq.record_business_key_v1, which refuses (SQLSTATE 55000)
-- unless the caller holds the attempt (PROCESSING with this token). False means another
-- delivery of the same business key already committed its effects (or holds the key right
-- now: the call waits for it to finish).
SELECT taskq.record_business_key_v1(%(id)s::bigint, %(token)s::uuid) AS taken;
