-- name: set_progress
-- Store the attempt's latest progress on the row (so a late watcher sees it) and publish it on
-- taskq_progress in the same statement. Fenced like every write of an attempt: a stale
-- attempt's progress changes nothing and publishes nothing.
WITH updated AS (
    UPDATE taskq.tasks
    SET progress = %(progress)s::jsonb, updated_at = now()
    WHERE id = %(id)s AND effective_id = %(token)s AND status = 'PROCESSING'
    RETURNING id
)
SELECT pg_notify('taskq_progress',
                 json_build_object('id', updated.id, 'progress', %(progress)s::jsonb)::text)
FROM updated;
