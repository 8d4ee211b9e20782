-- Cancel and abort. The writes go through taskq.cancel_v1 (SECURITY DEFINER, audited with
-- actor = session_user), so service code may cancel inside its own transaction with no UPDATE
-- right on the table.

-- name: cancel_tasks
-- PENDING/FAILED -> CANCELLED, PROCESSING -> abort requested (NOTIFY taskq_abort); all or
-- nothing: a SUCCESS, DEAD_LETTER or unknown id raises and changes nothing.
SELECT task_id, status_from, status_to
FROM taskq.cancel_v1(%(ids)s::bigint[], %(with_children)s::boolean, %(note)s::text, %(by)s::text);

-- name: cancel_candidates
-- The unfinished tasks of a type and/or business key, for `taskq cancel --task-type/--biz-id`
-- and its --dry-run. (OR of the partial indexes' predicates: only live rows are read.)
SELECT id, task_type, queue, biz_id, status, worker_id, parent_id
FROM taskq.tasks
WHERE (status IN ('PENDING', 'FAILED') OR status = 'PROCESSING')
  AND (%(task_type)s::text IS NULL OR task_type = %(task_type)s::text)
  AND (%(biz_id)s::text IS NULL OR biz_id = %(biz_id)s::text)
ORDER BY id
LIMIT %(limit)s;

-- name: tasks_by_ids
-- The status of named tasks (the dry run of `taskq cancel ID...`).
SELECT id, task_type, queue, biz_id, status, worker_id, parent_id
FROM taskq.tasks
WHERE id = ANY(%(ids)s::bigint[])
ORDER BY id;

-- name: aborts_requested
-- Of the attempts a worker holds, those an operator asked to abort: the fallback for a lost
-- NOTIFY taskq_abort (the heartbeat asks). Found by id alone, as the heartbeat's other look-ups
-- (sql/queries/presence.sql); a token names one attempt of one row.
SELECT t.id
FROM taskq.tasks AS t
WHERE t.id = ANY(%(ids)s::bigint[])
  AND t.effective_id = ANY(%(tokens)s::uuid[])
  AND (t.status || '') = 'PROCESSING'
  AND t.abort_requested_at IS NOT NULL;
