-- Worker presence. The heartbeat is the lease: a worker that stops beating for longer than its
-- own lease_seconds is presumed dead, and its attempts are rescued by the reaper.

-- name: worker_heartbeat
-- Register or refresh this worker (an upsert, so a worker whose row was cleaned away while it
-- was frozen simply re-appears), and in the same statement compare what the database says this
-- worker holds with what it runs (the attempts it presents):
--   'lost'  a presented attempt whose token no longer matches a PROCESSING row: it was taken
--           away (rescued by the reaper); the worker must stop working on it;
--   'stray' a PROCESSING row under this worker's id that it did not present: a claim that
--           committed but whose reply never arrived. Nothing here will ever run it; the worker
--           gives it back (uncharged) once it has made sure no claim reply is still on its way.
-- The stray scan goes through tasks_processing_idx: as many rows as the cluster runs at once.
-- %(stopped)s says why the worker is not claiming (NULL while it claims); the time it stopped
-- is kept across beats, so health and stats can tell how long it has claimed nothing.
WITH beat AS (
    INSERT INTO taskq.workers AS w (id, host, pid, queues, version, lease_seconds,
                                    claiming_stopped_reason, claiming_stopped_at)
    VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s::jsonb, %(version)s, %(lease_seconds)s,
            %(stopped)s::text, CASE WHEN %(stopped)s::text IS NULL THEN NULL ELSE now() END)
    ON CONFLICT (id) DO UPDATE
        SET heartbeat_at = now(),
            lease_seconds = EXCLUDED.lease_seconds,
            claiming_stopped_reason = EXCLUDED.claiming_stopped_reason,
            claiming_stopped_at = CASE WHEN EXCLUDED.claiming_stopped_reason IS NULL THEN NULL
                                       ELSE coalesce(w.claiming_stopped_at, now()) END
    RETURNING id
), held AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS held(id, token)
), running AS (
    -- The presented attempts still PROCESSING, found by id alone (a join to held let a plan
    -- made on an empty table scan the whole of tasks_pkey at every beat; the heartbeat's
    -- connection plans with store.PLANNER_SETTINGS); a token names one attempt of one row.
    SELECT coalesce(array_agg(t.effective_id), '{}') AS tokens
    FROM taskq.tasks AS t
    WHERE t.id = ANY(%(ids)s::bigint[])
      AND (t.status || '') = 'PROCESSING'
      AND t.effective_id IS NOT NULL
)
SELECT held.id, held.token, 'lost' AS kind
FROM held
CROSS JOIN (SELECT count(*) FROM beat) AS registered
CROSS JOIN running
WHERE NOT held.token = ANY(running.tokens)
UNION ALL
SELECT t.id, t.effective_id, 'stray'
FROM taskq.tasks AS t
WHERE t.status = 'PROCESSING'
  AND t.worker_id = %(id)s::text
  AND t.effective_id IS NOT NULL
  AND NOT t.id = ANY(%(ids)s::bigint[]);

-- name: worker_unregister
-- A clean exit: the worker has given back or finished every attempt it held.
DELETE FROM taskq.workers WHERE id = %(id)s;

-- name: list_workers
SELECT id, host, pid, queues, version, lease_seconds, started_at, heartbeat_at,
       extract(epoch FROM now() - heartbeat_at)::float8 AS silent_seconds,
       claiming_stopped_reason,
       extract(epoch FROM now() - claiming_stopped_at)::float8 AS claiming_stopped_seconds,
       heartbeat_at + make_interval(secs => lease_seconds) > now() AS alive
FROM taskq.workers
ORDER BY started_at, id;

-- name: register_task_types
-- The type registry (taskq.task_types): the queue and options of every type this worker runs,
-- read by the routing trigger when a writer names no queue. Last writer wins; a row that did
-- not change is not rewritten (workers restart often; no churn, no lock waits). NULL queue and
-- options (a type this app only reconciles) keep what a worker that runs the type wrote.
-- reconciled only ever turns on: some app reconciles the type, so retention keeps its markers.
INSERT INTO taskq.task_types AS r (task_type, queue, max_retry_count, timeout_seconds,
                                   reconciled, registered_by)
SELECT t.task_type, t.queue, t.max_retry_count, t.timeout_seconds, t.reconciled,
       %(worker_id)s
FROM unnest(%(task_types)s::text[], %(queues)s::text[], %(max_retry_counts)s::integer[],
            %(timeouts)s::integer[], %(reconciled)s::boolean[])
     AS t(task_type, queue, max_retry_count, timeout_seconds, reconciled)
ORDER BY t.task_type
ON CONFLICT (task_type) DO UPDATE
    SET queue = coalesce(EXCLUDED.queue, r.queue),
        max_retry_count = coalesce(EXCLUDED.max_retry_count, r.max_retry_count),
        timeout_seconds = coalesce(EXCLUDED.timeout_seconds, r.timeout_seconds),
        reconciled = r.reconciled OR EXCLUDED.reconciled,
        registered_by = EXCLUDED.registered_by,
        updated_at = now()
    WHERE (r.queue, r.max_retry_count, r.timeout_seconds, r.reconciled)
          IS DISTINCT FROM (coalesce(EXCLUDED.queue, r.queue),
                            coalesce(EXCLUDED.max_retry_count, r.max_retry_count),
                            coalesce(EXCLUDED.timeout_seconds, r.timeout_seconds),
                            r.reconciled OR EXCLUDED.reconciled);

-- name: list_task_types
SELECT task_type, queue, max_retry_count, timeout_seconds, reconciled, registered_by, updated_at
FROM taskq.task_types
ORDER BY task_type;
