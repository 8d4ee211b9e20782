-- name: worker_health
-- The freshest worker row matching the health check's selection (a NULL filter is unused),
-- with its silence on the database clock. The freshest, because a container that restarted
-- keeps its hostname (and its worker is PID 1 again): the dead incarnation's stale row may still
-- be there until the reaper forgets it, and must not make the live one look unhealthy.
SELECT id, host, pid, lease_seconds, heartbeat_at,
       extract(epoch FROM now() - heartbeat_at)::float8 AS silent_seconds,
       claiming_stopped_reason,
       extract(epoch FROM now() - claiming_stopped_at)::float8 AS claiming_stopped_seconds
FROM taskq.workers
WHERE (%(id)s::text IS NULL OR id = %(id)s::text)
  AND (%(host)s::text IS NULL OR host = %(host)s::text)
  AND (%(pid)s::integer IS NULL OR pid = %(pid)s::integer)
ORDER BY heartbeat_at DESC, id
LIMIT 1;
