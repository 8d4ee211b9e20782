-- Control state: pause switches, circuit breakers, the protection level, leadership. Every
-- change NOTIFYs taskq_control so workers re-read the state at once (they also re-read it every
-- second, so a lost notification costs at most that).

-- name: control_state
-- Everything a claimer needs to decide what it may claim, in one round trip.
SELECT
    (SELECT coalesce(json_agg(json_build_object('kind', kind, 'name', name)), '[]')
     FROM taskq.pauses) AS pauses,
    (SELECT coalesce(json_agg(json_build_object('task_type', task_type, 'state', state,
                                                'probe_worker', probe_worker)), '[]')
     FROM taskq.breakers WHERE state <> 'CLOSED') AS breakers,
    (SELECT level FROM taskq.protection WHERE id = 1) AS level;

-- name: pause
WITH paused AS (
    INSERT INTO taskq.pauses (kind, name, paused_by, note)
    VALUES (%(kind)s, %(name)s, %(actor)s, %(note)s)
    ON CONFLICT (kind, name) DO NOTHING
    RETURNING kind, name
), audited AS (
    INSERT INTO taskq.audit (actor, action, task_type, note, detail)
    SELECT %(actor)s, 'pause', CASE WHEN kind = 'task_type' THEN name END, %(note)s,
           jsonb_build_object('kind', kind, 'name', name)
    FROM paused
), told AS (
    SELECT pg_notify('taskq_control', 'pauses') FROM paused
)
SELECT paused.kind, paused.name FROM paused, (SELECT count(*) FROM told) AS t;

-- name: resume
WITH resumed AS (
    DELETE FROM taskq.pauses WHERE kind = %(kind)s AND name = %(name)s
    RETURNING kind, name, paused_by, paused_at
), audited AS (
    INSERT INTO taskq.audit (actor, action, task_type, note, detail)
    SELECT %(actor)s, 'resume', CASE WHEN kind = 'task_type' THEN name END, %(note)s,
           jsonb_build_object('kind', kind, 'name', name, 'paused_by', paused_by,
                              'paused_at', paused_at)
    FROM resumed
), told AS (
    SELECT pg_notify('taskq_control', 'pauses') FROM resumed
), woken AS (
    -- The paused backlog is runnable again: wake the workers of the queue(s) concerned.
    SELECT pg_notify('taskq_tasks', CASE WHEN r.kind = 'queue' THEN json_build_array(r.name)::text
                                         ELSE '*' END)
    FROM resumed AS r
)
SELECT resumed.kind, resumed.name
FROM resumed, (SELECT count(*) FROM told) AS t, (SELECT count(*) FROM woken) AS w;

-- name: list_pauses
SELECT kind, name, paused_by, paused_at, note,
       extract(epoch FROM now() - paused_at)::float8 AS paused_seconds
FROM taskq.pauses
ORDER BY kind, name;

-- name: list_breakers
SELECT task_type, state, consecutive_failures, last_failure_at, opened_at, changed_at, reason,
       probe_worker, probe_at
FROM taskq.breakers
ORDER BY task_type;

-- name: breaker_half_open
-- OPEN breakers whose cool-down has passed let one probe through.
WITH moved AS (
    UPDATE taskq.breakers
    SET state = 'HALF_OPEN', changed_at = now(), reason = 'cool-down over: probing',
        probe_worker = NULL, probe_at = NULL
    WHERE state = 'OPEN' AND opened_at + make_interval(secs => %(cooldown)s::float8) <= now()
    RETURNING task_type
), told AS (
    SELECT pg_notify('taskq_control', 'breakers') FROM moved HAVING count(*) > 0
)
SELECT moved.task_type FROM moved, (SELECT count(*) FROM told) AS t;

-- name: breaker_trip_by_rate
-- Open the breakers of types whose failure rate over the window is at least %(rate)s with at
-- least %(min_volume)s attempts (a burst of failures among many successes never makes N in a
-- row, but still means the downstream is sick).
WITH rates AS (
    SELECT task_type,
           sum(n) FILTER (WHERE outcome IN ('failed', 'dead_lettered')) AS failures,
           sum(n) FILTER (WHERE outcome IN ('success', 'failed', 'dead_lettered')) AS attempts
    FROM taskq.task_stats
    WHERE bucket >= date_trunc('minute', now() - make_interval(secs => %(window)s::float8))
    GROUP BY task_type
), opened AS (
    INSERT INTO taskq.breakers AS b (task_type, state, opened_at, changed_at, reason)
    SELECT task_type, 'OPEN', now(), now(),
           round(100.0 * failures / attempts) || '%% of ' || attempts || ' attempts failed'
    FROM rates
    WHERE attempts >= %(min_volume)s AND failures::float8 / attempts >= %(rate)s
    ON CONFLICT (task_type) DO UPDATE
        SET state = 'OPEN', opened_at = now(), changed_at = now(), reason = EXCLUDED.reason
        WHERE b.state = 'CLOSED'
    RETURNING b.task_type
), told AS (
    SELECT pg_notify('taskq_control', 'breakers') FROM opened HAVING count(*) > 0
)
SELECT opened.task_type FROM opened, (SELECT count(*) FROM told) AS t;

-- name: breaker_take_probe
-- One worker wins the single probe of a HALF_OPEN type (a stuck probe is taken over).
UPDATE taskq.breakers
SET probe_worker = %(worker_id)s, probe_at = now()
WHERE task_type = %(task_type)s AND state = 'HALF_OPEN'
  AND (probe_at IS NULL OR probe_at + make_interval(secs => %(probe_timeout)s::float8) <= now())
RETURNING task_type;

-- name: breaker_give_back_probe
UPDATE taskq.breakers SET probe_worker = NULL, probe_at = NULL
WHERE task_type = %(task_type)s AND probe_worker = %(worker_id)s AND state = 'HALF_OPEN';

-- name: breaker_reset
WITH reset AS (
    UPDATE taskq.breakers
    SET state = 'CLOSED', consecutive_failures = 0, changed_at = now(),
        reason = 'reset by ' || %(actor)s, probe_worker = NULL, probe_at = NULL
    WHERE %(task_type)s::text IS NULL OR task_type = %(task_type)s::text
    RETURNING task_type
), audited AS (
    INSERT INTO taskq.audit (actor, action, task_type, note)
    SELECT %(actor)s, 'breaker_reset', task_type, %(note)s FROM reset
), told AS (
    SELECT pg_notify('taskq_control', 'breakers') FROM reset HAVING count(*) > 0
)
SELECT reset.task_type FROM reset, (SELECT count(*) FROM told) AS t;

-- name: protection_get
SELECT level, reason, changed_at, changed_by FROM taskq.protection WHERE id = 1;

-- name: protection_set
-- Change the level, unless it is EMERGENCY (4) and the change is automatic: only an operator
-- (%(force)s) lowers L4.
WITH changed AS (
    UPDATE taskq.protection
    SET level = %(level)s, reason = %(reason)s, changed_at = now(), changed_by = %(actor)s
    WHERE id = 1 AND level <> %(level)s AND (level < 4 OR %(force)s)
    RETURNING level
), audited AS (
    INSERT INTO taskq.audit (actor, action, note, detail)
    SELECT %(actor)s, 'protection_level', %(reason)s, jsonb_build_object('level', level)
    FROM changed
), told AS (
    SELECT pg_notify('taskq_control', 'level') FROM changed
)
SELECT changed.level FROM changed, (SELECT count(*) FROM told) AS t;

-- name: failing_types
-- Types whose breaker is not CLOSED: the protection level counts them.
SELECT task_type, state FROM taskq.breakers WHERE state <> 'CLOSED' ORDER BY task_type;

-- name: leader_elect
-- Take or renew the named lease: the holder renews it; anyone takes it once it expired.
INSERT INTO taskq.leaders AS l (name, worker_id, expires_at)
VALUES (%(name)s, %(worker_id)s, now() + make_interval(secs => %(ttl)s::float8))
ON CONFLICT (name) DO UPDATE
    SET worker_id = EXCLUDED.worker_id,
        expires_at = EXCLUDED.expires_at,
        elected_at = CASE WHEN l.worker_id = EXCLUDED.worker_id THEN l.elected_at ELSE now() END
    WHERE l.worker_id = EXCLUDED.worker_id OR l.expires_at <= now()
RETURNING worker_id;

-- name: leader_resign
DELETE FROM taskq.leaders WHERE name = %(name)s AND worker_id = %(worker_id)s;
