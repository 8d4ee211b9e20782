-- name: counts_by_status
-- Backlog and history by queue, task type and status. "runnable" counts the rows a worker
-- could claim right now; the rest of PENDING is scheduled for later, the rest of FAILED waits
-- for its retry time.
SELECT queue, task_type, status, count(*) AS total,
       count(*) FILTER (WHERE status IN ('PENDING', 'FAILED') AND runnable_at <= now())
           AS runnable,
       extract(epoch FROM now() - min(runnable_at)
               FILTER (WHERE status IN ('PENDING', 'FAILED') AND runnable_at <= now()))::float8
           AS oldest_runnable_seconds
FROM taskq.tasks
GROUP BY queue, task_type, status
ORDER BY queue, task_type, status;

-- name: backlog
-- The live rows by queue and task type. Written as ORs of the partial indexes' predicates so
-- the planner can read only the live rows (a BitmapOr over tasks_runnable_idx,
-- tasks_processing_idx and tasks_dead_letter_idx), never the finished history.
SELECT queue, task_type,
       count(*) FILTER (WHERE status IN ('PENDING', 'FAILED') AND runnable_at <= now())
           AS runnable,
       count(*) FILTER (WHERE status = 'PENDING' AND runnable_at > now()) AS scheduled,
       count(*) FILTER (WHERE status = 'FAILED' AND runnable_at > now()) AS retry_waiting,
       count(*) FILTER (WHERE status = 'PROCESSING') AS processing,
       count(*) FILTER (WHERE status = 'DEAD_LETTER') AS dead_letter,
       extract(epoch FROM now() - min(runnable_at)
               FILTER (WHERE status IN ('PENDING', 'FAILED') AND runnable_at <= now()))::float8
           AS oldest_runnable_seconds
FROM taskq.tasks
WHERE status IN ('PENDING', 'FAILED') OR status = 'PROCESSING' OR status = 'DEAD_LETTER'
GROUP BY queue, task_type
ORDER BY queue, task_type;

-- name: window_outcomes
-- Attempt outcomes in the last %(minutes)s minutes, from the per-minute counters.
SELECT queue, task_type, outcome, sum(n)::bigint AS n, sum(run_seconds)::float8 AS run_seconds
FROM taskq.task_stats
WHERE bucket >= date_trunc('minute', now() - make_interval(mins => %(minutes)s))
GROUP BY queue, task_type, outcome;

-- name: window_latencies
-- Percentiles over the tasks that finished successfully in the window (tasks_finished_idx):
-- dispatch latency (runnable -> started, first attempts only: a retry's runnable time is gone
-- once it ran) and run time (started -> finished of the final attempt).
SELECT queue, task_type, count(*) AS finished,
       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (
           ORDER BY extract(epoch FROM finished_at - started_at)) AS run_seconds,
       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (
           ORDER BY extract(epoch FROM started_at - greatest(scheduled_at, created_at)))
           FILTER (WHERE retry_count = 0) AS dispatch_seconds
FROM taskq.tasks
WHERE status = 'SUCCESS'
  AND finished_at >= now() - make_interval(mins => %(minutes)s)
GROUP BY queue, task_type;

-- name: window_retries
-- How many retries the tasks that finished in the window needed (0 = first try).
SELECT task_type, retry_count, count(*) AS tasks
FROM taskq.tasks
WHERE (status = 'SUCCESS' OR status = 'DEAD_LETTER')
  AND finished_at >= now() - make_interval(mins => %(minutes)s)
GROUP BY task_type, retry_count
ORDER BY task_type, retry_count;

-- name: capacity
-- Slots configured per queue by the workers whose lease is alive.
SELECT q.key AS queue, sum(q.value::int)::bigint AS slots, count(DISTINCT w.id) AS workers
FROM taskq.workers AS w, jsonb_each_text(w.queues) AS q
WHERE w.heartbeat_at + make_interval(secs => w.lease_seconds) > now()
GROUP BY q.key
ORDER BY q.key;

-- name: mean_run_seconds
-- Mean run time of successful attempts per task type over a long window, for capacity plans.
SELECT task_type, sum(n)::bigint AS n, (sum(run_seconds) / nullif(sum(n), 0))::float8 AS mean
FROM taskq.task_stats
WHERE outcome = 'success'
  AND bucket >= date_trunc('minute', now() - make_interval(secs => %(seconds)s::float8))
  AND (%(task_type)s::text IS NULL OR task_type = %(task_type)s::text)
GROUP BY task_type
ORDER BY task_type;

-- name: db_health
-- What makes a Postgres queue slow before anything fails: dead tuples the claim index must
-- skip, vacuum falling behind, an old transaction holding vacuum back, a filling NOTIFY queue.
SELECT s.n_dead_tup::bigint AS dead_tuples,
       s.n_live_tup::bigint AS live_tuples,
       extract(epoch FROM greatest(s.last_autovacuum, s.last_vacuum))::float8 AS last_vacuum_epoch,
       (SELECT extract(epoch FROM now() - min(xact_start))::float8 FROM pg_stat_activity
        WHERE xact_start IS NOT NULL AND backend_type = 'client backend')
           AS oldest_transaction_seconds,
       pg_notification_queue_usage()::float8 AS notification_queue_usage
FROM pg_stat_user_tables AS s
WHERE s.schemaname = 'taskq' AND s.relname = 'tasks';

-- name: dlq_growth
-- Dead letters added per task type in the window (from the outcome counters).
SELECT task_type, sum(n)::bigint AS n
FROM taskq.task_stats
WHERE outcome = 'dead_lettered'
  AND bucket >= date_trunc('minute', now() - make_interval(mins => %(minutes)s))
GROUP BY task_type;
