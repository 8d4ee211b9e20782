-- 0032 down: the claim's UPDATE joins the picked ids again, as 0028 made it.
DO $migration$
DECLARE
    v_old text := $old$
        FROM unnest(p_task_types, p_max_retry_counts, p_timeouts)
                 AS handler(task_type, max_retry_count, timeout_seconds)
        WHERE t.id = ANY(v_picked)
          AND handler.task_type = t.task_type$old$;
    v_new text := $new$
        FROM unnest(v_picked) AS picked(pid),
             unnest(p_task_types, p_max_retry_counts, p_timeouts)
                 AS handler(task_type, max_retry_count, timeout_seconds)
        WHERE t.id = picked.pid
          AND handler.task_type = t.task_type$new$;
    v_def text := pg_get_functiondef('taskq.claim_batch_v3(text, text[], integer[], integer[],
        integer, text, boolean, boolean, boolean)'::regprocedure);
BEGIN
    IF position(v_old IN v_def) = 0 THEN
        RAISE EXCEPTION 'taskq 0032 down: taskq.claim_batch_v3 is not the function 0032 made';
    END IF;
    EXECUTE replace(v_def, v_old, v_new);
END
$migration$;
