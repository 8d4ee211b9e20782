-- taskq 0018: breakers that recover.
--
-- window_from: the failure-rate window of a circuit breaker starts afresh when the breaker is
-- reset or closes. Outcomes are counted per minute (taskq.task_stats, through
-- taskq.count_outcome_v1), so the rate query counts only the minute buckets that began at or
-- after window_from: the failures that tripped the breaker (and anything else of the minute
-- of the reset) are never counted again. NULL: no reset or close yet, the whole window counts.
--
-- probed_empty_at: when a claimer last won the probe of a HALF_OPEN breaker and found no task
-- to run. A HALF_OPEN breaker with nothing to probe says nothing about the downstream, so it
-- does not count toward the protection level (until a claimer takes a probe again). The
-- claimers' own finding, not a search of the tasks table: the type has no index of its own, and
-- the evaluator runs every second.
ALTER TABLE taskq.breakers
    ADD COLUMN window_from     timestamptz,
    ADD COLUMN probed_empty_at timestamptz;

-- breaker_reset_v1 (0016) with the fresh window: a reset that the failures still in the window
-- undo a second later is no reset.
CREATE FUNCTION taskq.breaker_reset_v2(
    p_task_type text, p_note text DEFAULT NULL, p_by text DEFAULT NULL
) RETURNS SETOF text
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH reset AS (
        UPDATE taskq.breakers AS b
        SET state = 'CLOSED', consecutive_failures = 0, changed_at = now(),
            reason = 'reset by ' || coalesce(p_by, session_user::text),
            probe_worker = NULL, probe_at = NULL, window_from = now()
        WHERE p_task_type IS NULL OR b.task_type = p_task_type
        RETURNING b.task_type
    ), audited AS (
        INSERT INTO taskq.audit (actor, action, task_type, note, detail)
        SELECT session_user, 'breaker_reset', r.task_type, p_note,
               jsonb_build_object('by', p_by)
        FROM reset AS r
    ), told AS (
        SELECT pg_notify('taskq_control', 'breakers') FROM reset HAVING count(*) > 0
    )
    SELECT r.task_type FROM reset AS r, (SELECT count(*) FROM told) AS t ORDER BY 1
$$;
REVOKE EXECUTE ON FUNCTION taskq.breaker_reset_v2(text, text, text) FROM PUBLIC;
