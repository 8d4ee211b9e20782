-- The observation panel: series over time for the charts, the task browser, the workers page.

-- name: sample_backlog
-- The leader's per-minute backlog sample per queue: the latest count within the minute wins.
-- The counts are the backlog gauge's (`backlog`), summed per queue by the caller, so each
-- interval reads the live rows once: a second count here cost as much as the gauge itself
-- (~75 ms per interval with 100,000 rows queued).
INSERT INTO taskq.backlog_samples AS s
       (bucket, queue, runnable, scheduled, retry_waiting, processing)
SELECT date_trunc('minute', now()), q.queue, q.runnable, q.scheduled, q.retry_waiting,
       q.processing
FROM unnest(%(queues)s::text[], %(runnable)s::bigint[], %(scheduled)s::bigint[],
            %(retry_waiting)s::bigint[], %(processing)s::bigint[])
     AS q(queue, runnable, scheduled, retry_waiting, processing)
ON CONFLICT (bucket, queue) DO UPDATE
    SET runnable = EXCLUDED.runnable, scheduled = EXCLUDED.scheduled,
        retry_waiting = EXCLUDED.retry_waiting, processing = EXCLUDED.processing;

-- name: prune_backlog_samples
-- Samples are kept as long as the outcome counters (30 days past the rows' retention).
DELETE FROM taskq.backlog_samples
WHERE bucket < now() - make_interval(secs => %(older_than)s::float8) - interval '30 days';

-- name: chart_outcomes
-- Attempts finished per minute by outcome, from the per-minute counters.
SELECT bucket, outcome, sum(n)::bigint AS n
FROM taskq.task_stats
WHERE bucket >= date_trunc('minute', now()) - make_interval(mins => %(minutes)s)
  AND (%(task_type)s::text IS NULL OR task_type = %(task_type)s::text)
GROUP BY bucket, outcome
ORDER BY bucket;

-- name: chart_backlog
-- The backlog samples per minute, summed over queues.
SELECT bucket, sum(runnable)::bigint AS runnable, sum(scheduled)::bigint AS scheduled,
       sum(retry_waiting)::bigint AS retry_waiting, sum(processing)::bigint AS processing
FROM taskq.backlog_samples
WHERE bucket >= date_trunc('minute', now()) - make_interval(mins => %(minutes)s)
GROUP BY bucket
ORDER BY bucket;

-- name: chart_latency
-- Dispatch latency (runnable -> started, of the final attempt) and run time per minute, p50 and
-- p95, over the tasks that finished successfully (tasks_finished_idx).
SELECT date_trunc('minute', finished_at) AS bucket,
       percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (
           ORDER BY extract(epoch FROM started_at - CASE WHEN retry_count = 0
               THEN greatest(scheduled_at, created_at) ELSE next_retry_time END))
           FILTER (WHERE retry_count = 0 OR next_retry_time IS NOT NULL) AS dispatch_seconds,
       percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (
           ORDER BY extract(epoch FROM finished_at - started_at)) AS run_seconds
FROM taskq.tasks
WHERE status = 'SUCCESS'
  AND finished_at >= date_trunc('minute', now()) - make_interval(mins => %(minutes)s)
  AND (%(task_type)s::text IS NULL OR task_type = %(task_type)s::text)
GROUP BY 1
ORDER BY 1;

-- name: chart_retries
-- How many retries the tasks that finished in the window needed: 0, 1, ... 5, and 6+ as 6.
SELECT least(retry_count, 6) AS retries, count(*)::bigint AS tasks
FROM taskq.tasks
WHERE (status = 'SUCCESS' OR status = 'DEAD_LETTER')
  AND finished_at >= now() - make_interval(mins => %(minutes)s)
  AND (%(task_type)s::text IS NULL OR task_type = %(task_type)s::text)
GROUP BY 1
ORDER BY 1;

-- name: browse_tasks
-- One page of the task browser, newest first, keyset-paged by id (never OFFSET). Every filter
-- is optional; the indexes that keep it fast: the primary key (id ranges, and SUCCESS, most of
-- the table, read newest first), the partial indexes of the other states (sql/ddl/0011_panel.sql),
-- tasks_biz_browse_idx (biz_id, id), and for a trace the task ids taskq.task_traces holds
-- (sql/ddl/0020_trace_lookup.sql), read then by primary key.
SELECT id, task_type, queue, biz_id, status, priority, retry_count, trace_id, worker_id,
       created_at, started_at, finished_at, progress,
       extract(epoch FROM now() - created_at)::float8 AS age_seconds
FROM taskq.tasks
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(task_type)s::text IS NULL OR task_type = %(task_type)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(biz_id)s::text IS NULL OR biz_id = %(biz_id)s::text)
  AND (%(trace_id)s::text IS NULL
       OR id = ANY(ARRAY(SELECT x.task_id FROM taskq.task_traces AS x
                         WHERE x.trace_id = %(trace_id)s::text)))
  AND id < coalesce(%(before_id)s::bigint, 9223372036854775807)
  AND id >= coalesce(%(min_id)s::bigint, 0)
  AND (%(max_age_seconds)s::float8 IS NULL
       OR created_at >= now() - make_interval(secs => %(max_age_seconds)s::float8))
ORDER BY id DESC
LIMIT %(limit)s;

-- name: workers_overview
-- Every registered worker with what it runs now; dead ones (lease expired, not yet cleaned
-- away by the reaper) with how many of the tasks they held were rescued.
SELECT w.id, w.host, w.pid, w.queues, w.version, w.started_at, w.heartbeat_at, w.rss_bytes,
       extract(epoch FROM now() - w.heartbeat_at)::float8 AS silent_seconds,
       w.heartbeat_at + make_interval(secs => w.lease_seconds) > now() AS alive,
       (SELECT count(*) FROM taskq.tasks AS t
        WHERE t.status = 'PROCESSING' AND t.worker_id = w.id)::bigint AS running,
       (SELECT count(*) FROM taskq.tasks AS t
        WHERE (t.status IN ('PENDING', 'FAILED') OR t.status = 'DEAD_LETTER') AND t.worker_id = w.id
          AND t.last_error LIKE 'WorkerLost%%')::bigint AS rescued
FROM taskq.workers AS w
ORDER BY alive DESC, w.started_at, w.id;

-- name: report_memory
-- A worker's resident memory, reported with its heartbeat (for the workers page).
UPDATE taskq.workers SET rss_bytes = %(rss)s WHERE id = %(id)s;
