-- taskq 0032: the claim's UPDATE finds its rows by id, whatever the table looked like when the
-- session planned it.
--
-- claim_batch_v3 keeps a generic plan for the session, made at its first call. Its UPDATE
-- joined the table to unnest(v_picked). Planned while the table held a few hundred rows, with
-- the column statistics of an earlier, larger table (ANALYZE keeps them when it samples no
-- row: a queue emptied or pruned), that join became a hash join over a full scan of the
-- primary key (enable_seqscan = off, 0022, rules out only the sequential scan), and the
-- session read the whole table, history included, on every claim until an ANALYZE of
-- taskq.tasks (never, with autovacuum off). First calls on 100, 300 and 1,000 rows planned it
-- so; on 3,000 rows or more, or on an empty table, the join probed the primary key per id.
-- With `t.id = ANY(v_picked)` the ids are the index condition of the only way the plan can
-- read taskq.tasks, at any table size.
--
-- Same rows (v_picked holds distinct ids, and an UPDATE changes a row once however many FROM
-- rows match it), same columns, contract, arguments and settings: workers of the previous
-- release call it as before. The rows come back in the order the plan reads them (by id, where
-- the join's nested loop gave v_picked's order); the worker puts a claim's rows in claim order
-- itself (taskq/db/store/claim.py). Only the one clause is edited in place, as in 0028.
DO $migration$
DECLARE
    v_old text := $old$
        FROM unnest(v_picked) AS picked(pid),
             unnest(p_task_types, p_max_retry_counts, p_timeouts)
                 AS handler(task_type, max_retry_count, timeout_seconds)
        WHERE t.id = picked.pid
          AND handler.task_type = t.task_type$old$;
    v_new text := $new$
        FROM unnest(p_task_types, p_max_retry_counts, p_timeouts)
                 AS handler(task_type, max_retry_count, timeout_seconds)
        WHERE t.id = ANY(v_picked)
          AND handler.task_type = t.task_type$new$;
    v_def text := pg_get_functiondef('taskq.claim_batch_v3(text, text[], integer[], integer[],
        integer, text, boolean, boolean, boolean)'::regprocedure);
BEGIN
    IF position(v_old IN v_def) = 0 THEN
        RAISE EXCEPTION 'taskq 0032: taskq.claim_batch_v3 is not the function 0030 made';
    END IF;
    EXECUTE replace(v_def, v_old, v_new);
END
$migration$;
