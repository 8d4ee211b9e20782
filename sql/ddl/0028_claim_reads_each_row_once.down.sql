-- 0028 down: the claim's UPDATE joins the picked ids to the table again for the old
-- runnable_at (0017's statement).
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
    IF position(v_new IN v_def) = 0 OR position(v_new_ready IN v_def) = 0 THEN
        RAISE EXCEPTION 'taskq 0028 down: taskq.claim_batch_v3 is not the function 0028 made';
    END IF;
    EXECUTE replace(replace(v_def, v_new, v_old), v_new_ready, v_old_ready);
END
$migration$;
