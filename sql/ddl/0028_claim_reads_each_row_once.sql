-- taskq 0028: the claim's UPDATE reads each claimed row once.
--
-- claim_batch_v3 returns, for each claimed task, when it became runnable: the runnable_at it
-- had before the claim (the dispatch-latency metric starts there). runnable_at is generated
-- from the status, which the claim changes, so the UPDATE joined every picked id to the
-- table a second time to read the old value: a second primary-key look-up and heap visit per
-- task, ~0.25 ms of a ~2 ms claim of 100 rows (pgbench, the UPDATE alone, alternated).
--
-- Without a next_retry_time, runnable_at is scheduled_at whatever the status, and the claim
-- changes neither column: the new row says it. Only a row with a next_retry_time (a retry,
-- almost always) is read again, by a sub-select in RETURNING, which sees the statement's
-- snapshot, so the row as it was before this UPDATE. The function's contract, arguments and
-- settings are unchanged (workers of the previous release call it as before); only the one
-- statement is edited in place, so the rest of its body is not copied here.
DO $migration$
DECLARE
    v_old text := $old$
        FROM (SELECT p.id AS pid, o.runnable_at AS ready
              FROM unnest(v_picked) AS p(id)
              JOIN taskq.tasks AS o ON o.id = p.id) AS picked,$old$;
    v_new text := $new$
        FROM unnest(v_picked) AS picked(pid),$new$;
    v_old_ready text := 't.ordering_key, picked.ready,';
    v_new_ready text := $new$t.ordering_key,
                  CASE WHEN t.next_retry_time IS NULL THEN t.scheduled_at
                       ELSE (SELECT o.runnable_at FROM taskq.tasks AS o WHERE o.id = t.id)
                  END,$new$;
    v_def text := pg_get_functiondef('taskq.claim_batch_v3(text, text[], integer[], integer[],
        integer, text, boolean, boolean, boolean)'::regprocedure);
BEGIN
    IF position(v_old IN v_def) = 0 OR position(v_old_ready IN v_def) = 0 THEN
        RAISE EXCEPTION 'taskq 0028: taskq.claim_batch_v3 is not the function 0017 created';
    END IF;
    EXECUTE replace(replace(v_def, v_old, v_new), v_old_ready, v_new_ready);
END
$migration$;
