-- Worker presence. The heartbeat is the lease: a worker that stops beating for longer than its
-- own lease_seconds is presumed dead, and its attempts are rescued by the reaper.

-- name: worker_heartbeat
-- Register or refresh this worker (an upsert, so a worker whose row was cleaned away while it
-- was frozen simply re-appears), and in the same statement check the attempts it believes it
-- holds: the ids returned are attempts whose token no longer matches a PROCESSING row. They
-- were taken away (rescued by the reaper); the worker must stop working on them.
WITH beat AS (
    INSERT INTO taskq.workers (id, host, pid, queues, version, lease_seconds)
    VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s::jsonb, %(version)s, %(lease_seconds)s)
    ON CONFLICT (id) DO UPDATE
        SET heartbeat_at = now(),
            lease_seconds = EXCLUDED.lease_seconds
    RETURNING id
)
SELECT held.id
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS held(id, token)
CROSS JOIN (SELECT count(*) FROM beat) AS registered
WHERE NOT EXISTS (
    SELECT 1 FROM taskq.tasks AS t
    WHERE t.id = held.id AND t.effective_id = held.token AND (t.status || '') = 'PROCESSING'
);

-- name: worker_unregister
-- A clean exit: the worker has given back or finished every attempt it held.
DELETE FROM taskq.workers WHERE id = %(id)s;

-- name: list_workers
SELECT id, host, pid, queues, version, lease_seconds, started_at, heartbeat_at,
       extract(epoch FROM now() - heartbeat_at)::float8 AS silent_seconds,
       heartbeat_at + make_interval(secs => lease_seconds) > now() AS alive
FROM taskq.workers
ORDER BY started_at, id;
