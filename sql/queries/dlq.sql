-- Dead-letter operations. A selection is: explicit ids and/or filters (type, business key,
-- error text, age, error group, handling state); each filter is NULL when unused. Every
-- requeue and discard writes its audit rows in the same statement, so an action cannot
-- happen unrecorded.
--
-- Every dead letter has a handling record (taskq.dead_letters, keyed by the task and the time
-- it died, coalesce(finished_at, created_at): a row written as DEAD_LETTER by hand may have no
-- finished_at): none yet means state 'new'. The error group is taskq.error_fingerprint_v1 of
-- last_error (type + message with ids and numbers masked). The error filter is a plain
-- substring (strpos on lower-cased text), so LIKE wildcards in what the operator typed mean
-- themselves.

-- name: dlq_list
SELECT t.id, t.task_type, t.queue, t.biz_id, t.retry_count, t.max_retry_count, t.finished_at,
       t.last_error, taskq.error_fingerprint_v1(t.last_error) AS fingerprint,
       coalesce(d.state, 'new') AS state, d.owner, d.resolution, d.notes,
       extract(epoch FROM now() - coalesce(t.finished_at, t.updated_at))::float8 AS age_seconds,
       count(*) OVER () AS matching
FROM taskq.tasks AS t
LEFT JOIN taskq.dead_letters AS d ON d.task_id = t.id AND d.dead_at = coalesce(t.finished_at, t.created_at)
WHERE t.status = 'DEAD_LETTER'
  AND (%(ids)s::bigint[] IS NULL OR t.id = ANY(%(ids)s::bigint[]))
  AND (%(task_type)s::text IS NULL OR t.task_type = %(task_type)s::text)
  AND (%(biz_id)s::text IS NULL OR t.biz_id = %(biz_id)s::text)
  AND (%(error)s::text IS NULL
       OR strpos(lower(coalesce(t.last_error, '')), lower(%(error)s::text)) > 0)
  AND (%(older_than)s::float8 IS NULL
       OR t.finished_at <= now() - make_interval(secs => %(older_than)s::float8))
  AND (%(newer_than)s::float8 IS NULL
       OR t.finished_at >= now() - make_interval(secs => %(newer_than)s::float8))
  AND (%(fingerprint)s::text IS NULL
       OR taskq.error_fingerprint_v1(t.last_error) = %(fingerprint)s::text)
  AND (%(state)s::text IS NULL OR coalesce(d.state, 'new') = %(state)s::text)
ORDER BY t.finished_at DESC, t.id DESC
LIMIT %(limit)s;

-- name: dlq_select
-- What a requeue, discard or resolve with the same selection would touch (for --dry-run, and
-- the all-or-nothing check before acting). Locks the rows until the caller's transaction ends,
-- so two operators acting on the same dead letters do it one after the other: through
-- taskq.dlq_lock_v1, as locking needs the UPDATE right the operator does not hold.
SELECT id, task_type, queue, biz_id, retry_count, finished_at, last_error, state
FROM taskq.dlq_lock_v1(
    %(ids)s::bigint[], %(task_type)s::text, %(biz_id)s::text, %(error)s::text,
    %(older_than)s::float8, %(newer_than)s::float8, %(fingerprint)s::text, %(state)s::text);

-- name: dlq_requeue
-- DEAD_LETTER -> PENDING for at most a batch of rows of the selection (a large replay is many
-- short statements, never one giant one), recorded, the handling record resolved as
-- 'requeued', and a wake-up for the queues involved: taskq.dlq_requeue_v1, audited with the
-- login as actor (the name the tool acts for is kept in detail.by). Rows another
-- operator holds are skipped (the next batch finds them). Without a reset the task keeps its
-- retry_count, so it gets one more run before it dead-letters again; with a reset it starts
-- over with the full budget.
SELECT r.id
FROM taskq.dlq_requeue_v1(
    %(ids)s::bigint[], %(task_type)s::text, %(biz_id)s::text, %(error)s::text,
    %(older_than)s::float8, %(newer_than)s::float8, %(fingerprint)s::text, %(state)s::text,
    %(batch)s::integer, %(reset)s::boolean, %(note)s::text, %(actor)s::text) AS r(id)
ORDER BY r.id;

-- name: dlq_discard
-- Delete at most a batch of dead letters of the selection for good (taskq.dlq_discard_v1); the
-- audit row keeps a copy of what was discarded, and the handling record says it was ignored.
SELECT r.id
FROM taskq.dlq_discard_v1(
    %(ids)s::bigint[], %(task_type)s::text, %(biz_id)s::text, %(error)s::text,
    %(older_than)s::float8, %(newer_than)s::float8, %(fingerprint)s::text, %(state)s::text,
    %(batch)s::integer, %(note)s::text, %(actor)s::text) AS r(id)
ORDER BY r.id;

-- name: dlq_run_audit
-- One summary row for a whole (possibly batched, throttled or interrupted) requeue or discard:
-- how many were asked for, how many went, and whether the operator stopped it.
SELECT taskq.dlq_run_audit_v1(%(action)s::text, %(note)s::text, %(detail)s::jsonb,
                              %(actor)s::text);

-- name: dlq_handle
-- assign (state investigating, an owner) or resolve (state resolved, a resolution), through
-- the audited SECURITY DEFINER function; all or nothing.
SELECT task_id, state, owner, resolution
FROM taskq.dlq_handle_v1(%(ids)s::bigint[], %(state)s::text, %(owner)s::text,
                         %(resolution)s::text, %(note)s::text, %(by)s::text);

-- name: dlq_groups
-- Dead letters grouped by error fingerprint: what an operator handles is 5 groups, not 5,000
-- rows. The signature is the masked first line the fingerprint hashes.
SELECT left(md5(g.signature), 12) AS fingerprint, g.signature,
       count(*) AS total,
       count(*) FILTER (WHERE g.state = 'new') AS new,
       count(*) FILTER (WHERE g.state = 'investigating') AS investigating,
       min(g.finished_at) AS first_seen, max(g.finished_at) AS last_seen,
       array_agg(DISTINCT g.task_type) AS task_types,
       (array_agg(g.id ORDER BY g.finished_at DESC, g.id DESC))[1] AS example_id,
       (array_agg(g.first_line ORDER BY g.finished_at DESC, g.id DESC))[1] AS example_error
FROM (
    SELECT t.id, t.task_type, t.finished_at, coalesce(d.state, 'new') AS state,
           taskq.error_signature_v1(t.last_error) AS signature,
           left(split_part(coalesce(t.last_error, ''), E'\n', 1), 500) AS first_line
    FROM taskq.tasks AS t
    LEFT JOIN taskq.dead_letters AS d ON d.task_id = t.id AND d.dead_at = coalesce(t.finished_at, t.created_at)
    WHERE t.status = 'DEAD_LETTER'
      AND (%(ids)s::bigint[] IS NULL OR t.id = ANY(%(ids)s::bigint[]))
      AND (%(task_type)s::text IS NULL OR t.task_type = %(task_type)s::text)
      AND (%(biz_id)s::text IS NULL OR t.biz_id = %(biz_id)s::text)
      AND (%(error)s::text IS NULL
           OR strpos(lower(coalesce(t.last_error, '')), lower(%(error)s::text)) > 0)
      AND (%(older_than)s::float8 IS NULL
           OR t.finished_at <= now() - make_interval(secs => %(older_than)s::float8))
      AND (%(newer_than)s::float8 IS NULL
           OR t.finished_at >= now() - make_interval(secs => %(newer_than)s::float8))
      AND (%(fingerprint)s::text IS NULL
           OR taskq.error_fingerprint_v1(t.last_error) = %(fingerprint)s::text)
      AND (%(state)s::text IS NULL OR coalesce(d.state, 'new') = %(state)s::text)
) AS g
GROUP BY g.signature
ORDER BY total DESC, last_seen DESC;

-- name: dlq_report_new
-- The twice-a-day report, part 1: tasks that became dead letters since %(since)s seconds ago,
-- by error group: those still dead, and those already requeued or discarded (their handling
-- record remembers when they died).
SELECT n.fingerprint, min(n.signature) AS signature, count(*) AS total,
       count(*) FILTER (WHERE n.open) AS still_open,
       array_agg(DISTINCT n.task_type) AS task_types,
       min(n.dead_at) AS first_seen, max(n.dead_at) AS last_seen
FROM (
    SELECT taskq.error_fingerprint_v1(t.last_error) AS fingerprint,
           taskq.error_signature_v1(t.last_error) AS signature, t.task_type,
           coalesce(t.finished_at, t.created_at) AS dead_at,
           coalesce(d.state, 'new') <> 'resolved' AS open
    FROM taskq.tasks AS t
    LEFT JOIN taskq.dead_letters AS d ON d.task_id = t.id AND d.dead_at = coalesce(t.finished_at, t.created_at)
    WHERE t.status = 'DEAD_LETTER'
      AND t.finished_at >= now() - make_interval(secs => %(since)s::float8)
    UNION ALL
    SELECT d.fingerprint, NULL, d.task_type, d.dead_at, false
    FROM taskq.dead_letters AS d
    WHERE d.dead_at >= now() - make_interval(secs => %(since)s::float8)
      AND NOT EXISTS (SELECT 1 FROM taskq.tasks AS t
                      WHERE t.id = d.task_id AND t.status = 'DEAD_LETTER'
                        AND coalesce(t.finished_at, t.created_at) = d.dead_at)
) AS n
GROUP BY n.fingerprint
ORDER BY total DESC;

-- name: dlq_report_resolved
-- Part 2: what was resolved in the window, how, and by whom.
SELECT d.resolution, d.resolved_by, count(*) AS total,
       array_agg(DISTINCT d.fingerprint) AS fingerprints,
       array_agg(DISTINCT d.task_type) AS task_types
FROM taskq.dead_letters AS d
WHERE d.resolved_at >= now() - make_interval(secs => %(since)s::float8)
GROUP BY d.resolution, d.resolved_by
ORDER BY total DESC;

-- name: dlq_report_open
-- Part 3: what is still open (all dead letters not resolved), by group, state and owner.
SELECT taskq.error_fingerprint_v1(t.last_error) AS fingerprint,
       coalesce(d.state, 'new') AS state, d.owner, count(*) AS total,
       min(t.finished_at) AS oldest
FROM taskq.tasks AS t
LEFT JOIN taskq.dead_letters AS d ON d.task_id = t.id AND d.dead_at = coalesce(t.finished_at, t.created_at)
WHERE t.status = 'DEAD_LETTER' AND coalesce(d.state, 'new') <> 'resolved'
GROUP BY 1, 2, 3
ORDER BY total DESC;
