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
