-- 0030 down: a random UUID per claimed row again (0017's assignment).
DO $migration$
DECLARE
    v_old text := 'effective_id = gen_random_uuid(),';
    v_new text := $new$effective_id = ((SELECT left(gen_random_uuid()::text, 24))
                            || lpad(to_hex(t.id & 281474976710655), 12, '0'))::uuid,$new$;
    v_def text := pg_get_functiondef('taskq.claim_batch_v3(text, text[], integer[], integer[],
        integer, text, boolean, boolean, boolean)'::regprocedure);
BEGIN
    IF position(v_new IN v_def) = 0 THEN
        RAISE EXCEPTION 'taskq 0030 down: taskq.claim_batch_v3 is not the function 0030 made';
    END IF;
    EXECUTE replace(v_def, v_new, v_old);
END
$migration$;
