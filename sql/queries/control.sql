-- Control state: pause switches, circuit breakers, the protection level, leadership. Every
-- change NOTIFYs taskq_control so workers re-read the state at once (they also re-read it every
-- second, so a lost notification costs at most that).

-- name: control_state
-- Everything a claimer needs to decide what it may claim, in one round trip; and the business
-- switches, which handlers read from the same cache (ctx.switch: no query per call).
SELECT
    (SELECT coalesce(json_agg(json_build_object('kind', kind, 'name', name)), '[]')
     FROM taskq.pauses) AS pauses,
    (SELECT coalesce(json_agg(json_build_object('task_type', task_type, 'state', state,
                                                'probe_worker', probe_worker)), '[]')
     FROM taskq.breakers WHERE state <> 'CLOSED') AS breakers,
    (SELECT level FROM taskq.protection WHERE id = 1) AS level,
    (SELECT coalesce(json_object_agg(name, enabled), '{}') FROM taskq.switches) AS switches;

-- name: pause
-- Through taskq.pause_v1 (audited, NOTIFY taskq_control): true when it was not paused yet.
SELECT taskq.pause_v1(%(kind)s::text, %(name)s::text, %(note)s::text, %(actor)s::text)
    AS changed;

-- name: resume
-- Through taskq.resume_v1 (audited; wakes the workers of the queue(s) concerned).
SELECT taskq.resume_v1(%(kind)s::text, %(name)s::text, %(note)s::text, %(actor)s::text)
    AS changed;

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
-- row, but still means the downstream is sick). A permanent error (outcome 'permanent') is a
-- bad task, not a sick downstream: neither a failure nor an attempt here.
-- The window starts no earlier than the breaker's window_from (set by a reset and by a close):
-- only the minute buckets that began at or after it count, so the failures that tripped the
-- breaker cannot trip it again. The rest of the minute of the reset is never counted (the
-- buckets are per minute); the consecutive count still catches a downstream that is still down.
WITH rates AS (
    SELECT s.task_type,
           sum(s.n) FILTER (WHERE s.outcome IN ('failed', 'dead_lettered')) AS failures,
           sum(s.n) FILTER (WHERE s.outcome IN ('success', 'failed', 'dead_lettered')) AS attempts
    FROM taskq.task_stats AS s
    LEFT JOIN taskq.breakers AS w ON w.task_type = s.task_type
    WHERE s.bucket >= date_trunc('minute', now() - make_interval(secs => %(window)s::float8))
      AND s.bucket >= coalesce(w.window_from, '-infinity'::timestamptz)
    GROUP BY s.task_type
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
-- One worker wins the single probe of a HALF_OPEN type (a stuck probe is taken over). Not
-- within %(empty_wait)s seconds of a probe that found no task (probed_empty_at, since the
-- breaker last changed state): each look reads the queue's backlog of other types
-- (ProtectionSettings.empty_probe_wait_seconds says why).
UPDATE taskq.breakers
SET probe_worker = %(worker_id)s, probe_at = now()
WHERE task_type = %(task_type)s AND state = 'HALF_OPEN'
  AND (probe_at IS NULL OR probe_at + make_interval(secs => %(probe_timeout)s::float8) <= now())
  AND (probed_empty_at IS NULL
       OR probed_empty_at < changed_at
       OR probed_empty_at + make_interval(secs => %(empty_wait)s::float8) <= now())
RETURNING task_type;

-- name: breaker_give_back_probe
-- The claimer that won the probe found no task to run: nothing to probe now (see
-- failing_types).
UPDATE taskq.breakers SET probe_worker = NULL, probe_at = NULL, probed_empty_at = now()
WHERE task_type = %(task_type)s AND probe_worker = %(worker_id)s AND state = 'HALF_OPEN';

-- name: breaker_reset
-- Through taskq.breaker_reset_v2 (audited; it also starts a fresh failure-rate window): the
-- types whose breaker was closed.
SELECT r.task_type
FROM taskq.breaker_reset_v2(%(task_type)s::text, %(note)s::text, %(actor)s::text)
    AS r(task_type);

-- name: protection_get
SELECT level, reason, changed_at, changed_by FROM taskq.protection WHERE id = 1;

-- name: protection_set
-- Change the level, unless it is EMERGENCY (4) and the change is automatic: only an operator
-- (forcing it) lowers L4. Through taskq.protection_set_v1 (audited): a row when it changed.
SELECT p.level
FROM taskq.protection_set_v1(%(level)s::integer, %(reason)s::text, %(force)s::boolean,
                             %(actor)s::text) AS p(level);

-- name: failing_types
-- Types whose breaker is not CLOSED: the protection level counts them. A HALF_OPEN breaker
-- counts only while it may have something to probe: a probe is out, or no claimer has found it
-- empty since it went HALF_OPEN (probed_empty_at, set by breaker_give_back_probe). An idle one
-- (its backlog gone: nothing will ever probe it) would otherwise keep the level raised for
-- ever; it stays HALF_OPEN, so its next task is still a probe, and counts again from the
-- moment a claimer takes that probe.
SELECT task_type, state
FROM taskq.breakers
WHERE state = 'OPEN'
   OR (state = 'HALF_OPEN'
       AND (probe_worker IS NOT NULL OR probed_empty_at IS NULL OR probed_empty_at < changed_at))
ORDER BY task_type;

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
