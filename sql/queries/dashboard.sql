-- The operator's web page (`taskq dashboard`): the one action the CLI does not have, and the
-- audit list (the dead-letter search is dlq.sql's dlq_list, shared with the CLI). Like every
-- action, the edited requeue writes its audit row in the same statement.

-- name: dlq_requeue_edited
-- One dead letter back to PENDING with a corrected payload, through
-- taskq.dlq_requeue_edited_v1: the old payload is read under the row lock, so the audit row
-- records exactly what was replaced, and a task that stopped being a dead letter meanwhile
-- (another operator requeued it) matches nothing: the caller sees zero rows and nothing
-- changed. Like `dlq requeue`, it resolves the dead letter's handling record as requeued.
SELECT r.id
FROM taskq.dlq_requeue_edited_v1(%(id)s::bigint, %(payload)s::jsonb, %(reset)s::boolean,
                                 %(note)s::text, %(actor)s::text) AS r(id);

-- name: audit_list
-- The latest audit rows, newest first (the primary key is the order they were written in).
SELECT id, at, actor, action, task_id, task_type, note, detail
FROM taskq.audit
WHERE (%(action)s::text IS NULL OR action = %(action)s::text)
  AND (%(task_id)s::bigint IS NULL OR task_id = %(task_id)s::bigint)
  AND (%(task_type)s::text IS NULL OR task_type = %(task_type)s::text)
ORDER BY id DESC
LIMIT %(limit)s;
