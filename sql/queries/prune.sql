-- Retention. Finished rows are deleted in batches (never one giant DELETE: short transactions,
-- bounded WAL and lock time), oldest first. Each statement names its status literally so the
-- planner uses that status's partial index on finished_at.

-- name: prune_success_batch
WITH doomed AS (
    SELECT id FROM taskq.tasks
    WHERE status = 'SUCCESS'
      AND finished_at < now() - make_interval(secs => %(older_than)s::float8)
    ORDER BY finished_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM taskq.tasks AS t USING doomed WHERE t.id = doomed.id
RETURNING t.id;

-- name: prune_dead_letter_batch
-- Dead letters are kept unless asked: an operator may still want to replay them.
WITH doomed AS (
    SELECT id FROM taskq.tasks
    WHERE status = 'DEAD_LETTER'
      AND finished_at < now() - make_interval(secs => %(older_than)s::float8)
    ORDER BY finished_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM taskq.tasks AS t USING doomed WHERE t.id = doomed.id
RETURNING t.id;

-- name: prune_stats
-- Outcome counters are kept 30 days longer than the rows they describe.
DELETE FROM taskq.task_stats
WHERE bucket < now() - make_interval(secs => %(older_than)s::float8) - interval '30 days';
