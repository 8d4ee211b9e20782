-- The reaper. One pass is one transaction, run by the maintenance leader (taskq.leaders).
-- Two passes at once (a hand-run "taskq reap", a lease hand-over) are safe: victims are
-- locked with SKIP LOCKED and every rescue is guarded on status.
-- The rescue itself moves rows out of PROCESSING, so it lives with every other such
-- statement: reap_attempts in finish.sql.

-- name: delete_dead_workers
-- Forget workers presumed dead that hold nothing any more. A worker that was only frozen
-- re-registers with its next heartbeat.
DELETE FROM taskq.workers AS w
WHERE w.heartbeat_at + make_interval(secs => w.lease_seconds) <= now()
  AND NOT EXISTS (
      SELECT 1 FROM taskq.tasks AS t WHERE t.status = 'PROCESSING' AND t.worker_id = w.id
  )
RETURNING w.id;
