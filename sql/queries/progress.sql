-- name: set_progress
-- Store the attempt's latest progress on the row (so a late watcher sees it) and publish it on
-- taskq_progress in the same statement. Fenced like every write of an attempt: a stale
-- attempt's progress changes nothing and publishes nothing.
WITH updated AS (
    UPDATE taskq.tasks
    SET progress = %(progress)s::jsonb, updated_at = now()
    WHERE id = %(id)s AND effective_id = %(token)s AND (status || '') = 'PROCESSING'
    RETURNING id
)
SELECT pg_notify('taskq_progress',
                 json_build_object('id', updated.id, 'progress', %(progress)s::jsonb)::text)
FROM updated;

-- name: save_checkpoint
-- Record that a stage finished: context becomes {"stage": <stage>, "data": <earlier data merged
-- with this stage's>}. Fenced by the attempt's token: a stale attempt cannot move the stage.
UPDATE taskq.tasks
SET context = jsonb_build_object(
        'stage', %(stage)s::text,
        'data', coalesce(context -> 'data', '{}'::jsonb) || %(data)s::jsonb),
    updated_at = now()
WHERE id = %(id)s AND effective_id = %(token)s AND (status || '') = 'PROCESSING'
RETURNING context;
