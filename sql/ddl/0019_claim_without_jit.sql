-- The claim functions run without JIT. Their statements run with generic plans (the functions
-- set plan_cache_mode = force_generic_plan), whose cost estimate grows with the table: the
-- lane scan's generic plan expects a tenth of the runnable rows, so past roughly 100,000 rows
-- it crossed jit_above_cost (100000 by default) and every claim spent ~14 ms compiling
-- expressions for a scan that reads a hundred rows. A 100,000-task drain then cost 4x the
-- database CPU per task of a 20,000-task one. A claim never runs long enough for JIT to pay.
ALTER FUNCTION taskq.claim_batch_v1(text, text[], integer[], integer[], integer, text, boolean,
                                    boolean) SET jit = off;
ALTER FUNCTION taskq.claim_batch_v3(text, text[], integer[], integer[], integer, text, boolean,
                                    boolean, boolean) SET jit = off;
ALTER FUNCTION taskq.claim_lanes_v1(text, text[], text[], integer, real, boolean, boolean,
                                    bigint[]) SET jit = off;
ALTER FUNCTION taskq.claim_lanes_v2(text, text[], text[], integer, real, boolean, boolean,
                                    bigint[], boolean) SET jit = off;
ALTER FUNCTION taskq.claim_scan_v1(text, text[], text[], text, integer, boolean, bigint[])
    SET jit = off;
ALTER FUNCTION taskq.claim_scan_v2(text, text[], text[], text, integer, boolean, bigint[],
                                   boolean) SET jit = off;
ALTER FUNCTION taskq.claim_key_v1(text, text, text, boolean, boolean, bigint[]) SET jit = off;
ALTER FUNCTION taskq.claim_key_v2(text, text, text, boolean, boolean, bigint[], boolean)
    SET jit = off;
ALTER FUNCTION taskq.claim_keys_v1(text, text, text, integer) SET jit = off;
