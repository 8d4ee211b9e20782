-- The operator's web page (`taskq dashboard`): the searches and the one action the CLI does not
-- have. Like every action, the edited requeue writes its audit row in the same statement.

-- name: dlq_search
-- Dead letters by type, error text and age, newest first. The error match is a plain substring
-- (strpos on lower-cased text) rather than ILIKE, so LIKE's wildcard characters in what the
-- operator typed mean themselves.
-- Age is the time since the task was dead-lettered. "matching" counts every row the filter
-- matches, so the page can say when the list was cut at %(limit)s.
SELECT id, task_type, queue, biz_id, retry_count, max_retry_count, finished_at, last_error,
       extract(epoch FROM now() - coalesce(finished_at, updated_at))::float8 AS age_seconds,
       count(*) OVER () AS matching
FROM taskq.tasks
WHERE status = 'DEAD_LETTER'
  AND (%(task_type)s::text IS NULL OR task_type = %(task_type)s::text)
  AND (%(error)s::text IS NULL
       OR strpos(lower(coalesce(last_error, '')), lower(%(error)s::text)) > 0)
  AND (%(older_than)s::float8 IS NULL
       OR coalesce(finished_at, updated_at)
          <= now() - make_interval(secs => %(older_than)s::float8))
  AND (%(newer_than)s::float8 IS NULL
       OR coalesce(finished_at, updated_at)
          >= now() - make_interval(secs => %(newer_than)s::float8))
ORDER BY finished_at DESC NULLS LAST, id DESC
LIMIT %(limit)s;

-- name: dlq_requeue_edited
-- One dead letter back to PENDING with a corrected payload. The old payload is read under the
-- row lock in the same statement, so the audit row records exactly what was replaced, and a
-- task that stopped being a dead letter meanwhile (another operator requeued it) matches
-- nothing: the caller sees zero rows and nothing changed.
WITH old AS (
    SELECT id, payload
    FROM taskq.tasks
    WHERE id = %(id)s AND status = 'DEAD_LETTER'
    FOR UPDATE
), moved AS (
    UPDATE taskq.tasks AS t
    SET payload = %(payload)s::jsonb,
        status = 'PENDING',
        retry_count = CASE WHEN %(reset)s THEN 0 ELSE t.retry_count END,
        scheduled_at = now(),
        next_retry_time = NULL,
        effective_id = NULL,
        worker_id = NULL,
        started_at = NULL,
        finished_at = NULL,
        updated_at = now()
    FROM old
    WHERE t.id = old.id AND t.status = 'DEAD_LETTER'
    RETURNING t.id, t.task_type, t.queue, t.retry_count, t.last_error,
              old.payload AS old_payload, t.payload AS new_payload
), audited AS (
    INSERT INTO taskq.audit (actor, action, task_id, task_type, note, detail)
    SELECT %(actor)s, 'dlq_requeue_edited', id, task_type, %(note)s,
           jsonb_build_object('reset_retries', %(reset)s, 'retry_count', retry_count,
                              'last_error', last_error, 'old_payload', old_payload,
                              'new_payload', new_payload)
    FROM moved
), woken AS (
    SELECT pg_notify('taskq_tasks', json_build_array(queue)::text) FROM moved
)
SELECT moved.id FROM moved, (SELECT count(*) FROM woken) AS w;

-- name: audit_list
-- The latest audit rows, newest first (the primary key is the order they were written in).
SELECT id, at, actor, action, task_id, task_type, note, detail
FROM taskq.audit
WHERE (%(action)s::text IS NULL OR action = %(action)s::text)
  AND (%(task_id)s::bigint IS NULL OR task_id = %(task_id)s::bigint)
  AND (%(task_type)s::text IS NULL OR task_type = %(task_type)s::text)
ORDER BY id DESC
LIMIT %(limit)s;
