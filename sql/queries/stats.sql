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
           AS oldest_runnable_seconds,
       -- The retry lane: due retries (part of runnable) and how long the oldest has waited.
       count(*) FILTER (WHERE status = 'FAILED' AND runnable_at <= now()) AS retry_due,
       extract(epoch FROM now() - min(runnable_at)
               FILTER (WHERE status = 'FAILED' AND runnable_at <= now()))::float8
           AS oldest_retry_seconds
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
-- dispatch latency of the final attempt (runnable -> started: a first attempt was runnable at
-- its scheduled time, a retry at its next_retry_time, which the claim leaves on the row) and
-- run time (started -> finished of the final attempt).
SELECT queue, task_type, count(*) AS finished,
       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (
           ORDER BY extract(epoch FROM finished_at - started_at)) AS run_seconds,
       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (
           ORDER BY extract(epoch FROM started_at - CASE WHEN retry_count = 0
               THEN greatest(scheduled_at, created_at) ELSE next_retry_time END))
           FILTER (WHERE retry_count = 0 OR next_retry_time IS NOT NULL) AS dispatch_seconds
FROM taskq.tasks
WHERE status = 'SUCCESS'
  AND finished_at >= now() - make_interval(mins => %(minutes)s)
GROUP BY queue, task_type;

-- name: window_retries
-- How many retries the tasks that finished in the window needed (0 = first try), per queue and
-- task type: a type served in two queues has two different stories.
SELECT queue, task_type, retry_count, count(*) AS tasks
FROM taskq.tasks
WHERE (status = 'SUCCESS' OR status = 'DEAD_LETTER')
  AND finished_at >= now() - make_interval(mins => %(minutes)s)
GROUP BY queue, task_type, retry_count
ORDER BY queue, task_type, retry_count;

-- name: capacity
-- Slots configured per queue by the workers whose lease is alive.
SELECT q.key AS queue, sum(q.value::int)::bigint AS slots, count(DISTINCT w.id) AS workers
FROM taskq.workers AS w, jsonb_each_text(w.queues) AS q
WHERE w.heartbeat_at + make_interval(secs => w.lease_seconds) > now()
GROUP BY q.key
ORDER BY q.key;

-- name: workers_not_claiming
-- Live workers that have stopped claiming (their memory guard refuses to claim), and why.
SELECT id AS worker_id, host, pid, claiming_stopped_reason AS reason,
       extract(epoch FROM now() - claiming_stopped_at)::float8 AS seconds
FROM taskq.workers
WHERE claiming_stopped_at IS NOT NULL
  AND heartbeat_at + make_interval(secs => lease_seconds) > now()
ORDER BY claiming_stopped_at, id;

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
-- Dead letters added per queue and task type in the window (from the outcome counters): the
-- failures that exhausted their retries and the permanent errors.
SELECT queue, task_type, sum(n)::bigint AS n
FROM taskq.task_stats
WHERE outcome IN ('dead_lettered', 'permanent')
  AND bucket >= date_trunc('minute', now() - make_interval(mins => %(minutes)s))
GROUP BY queue, task_type;

-- name: replication
-- The standbys streaming from this server and how far behind each one is (none on a standby
-- or a server without replicas). The bytes not yet replayed are what an asynchronous failover
-- can lose; NULL columns mean the role lacks pg_monitor.
SELECT application_name,
       state,
       sync_state,
       extract(epoch FROM replay_lag)::float8 AS replay_lag_seconds,
       CASE WHEN pg_is_in_recovery() THEN NULL
            ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint END AS replay_lag_bytes
FROM pg_stat_replication
ORDER BY application_name;

-- name: in_recovery
-- True on a hot standby: everything that only reads works there, nothing that writes does.
SELECT pg_is_in_recovery() AS in_recovery;

-- name: blocked_ordering_keys
-- Ordering keys whose head (the oldest live task with the key) holds followers back: it is
-- waiting for a retry, or has been runnable for more than %(min_wait_seconds)s without being
-- claimed (often: no running worker handles its type, or serves its queue). Keys are global
-- across task types, so a head of any type blocks every later task with its key.
-- unregistered: no worker has ever registered the head's type (taskq.task_types);
-- unserved: no live worker serves the head's queue.
-- Index: tasks_ordering_idx (ordering_key, id) over the live rows.
WITH heads AS (
    SELECT DISTINCT ON (ordering_key) ordering_key, id, task_type, queue, status, runnable_at
    FROM taskq.tasks
    WHERE ordering_key IS NOT NULL AND status IN ('PENDING', 'PROCESSING', 'FAILED')
    ORDER BY ordering_key, id
)
SELECT h.ordering_key, h.id AS head_id, h.task_type AS head_task_type, h.queue AS head_queue,
       h.status AS head_status,
       extract(epoch FROM now() - h.runnable_at)::float8 AS head_waiting_seconds,
       followers.n AS waiting,
       NOT EXISTS (SELECT 1 FROM taskq.task_types AS r
                   WHERE r.task_type = h.task_type AND r.queue IS NOT NULL) AS unregistered,
       NOT EXISTS (SELECT 1 FROM taskq.workers AS w
                   WHERE w.queues ? h.queue
                     AND w.heartbeat_at + make_interval(secs => w.lease_seconds) > now())
           AS unserved
FROM heads AS h
CROSS JOIN LATERAL (
    SELECT count(*) AS n FROM taskq.tasks AS f
    WHERE f.ordering_key = h.ordering_key AND f.id > h.id
      AND f.status IN ('PENDING', 'PROCESSING', 'FAILED')
) AS followers
WHERE h.status <> 'PROCESSING'
  AND followers.n > 0
  AND (h.status = 'FAILED'
       OR h.runnable_at <= now() - make_interval(secs => %(min_wait_seconds)s::float8))
ORDER BY h.runnable_at, h.ordering_key
LIMIT %(limit)s;
