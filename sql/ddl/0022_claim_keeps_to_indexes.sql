-- The claim functions never read taskq.tasks sequentially. Their statements run with generic
-- plans (plan_cache_mode = force_generic_plan), made at a session's first call and kept for the
-- session until the table's statistics change. A worker that starts on an empty queue makes
-- them then: with statistics saying the table holds nothing, a sequential scan (and hash joins
-- over one in the final UPDATE) looked cheapest, and that plan stayed once a backlog arrived:
-- every claim read the whole table until an ANALYZE (with autovacuum off, never). A
-- 100,000-task backlog inserted after the worker started drained at 685 tasks/s, claims of 32
-- taking 41 ms (p50) to 157 ms. Every statement here has an index that answers it (the runnable,
-- retry, isolate, ordering and concurrency partial indexes, the primary keys), so the planner
-- is told to prefer them whatever the statistics say.
ALTER FUNCTION taskq.claim_batch_v1(text, text[], integer[], integer[], integer, text, boolean,
                                    boolean)
    SET enable_seqscan = off;
ALTER FUNCTION taskq.claim_batch_v3(text, text[], integer[], integer[], integer, text, boolean,
                                    boolean, boolean)
    SET enable_seqscan = off;
ALTER FUNCTION taskq.claim_lanes_v1(text, text[], text[], integer, real, boolean, boolean,
                                    bigint[])
    SET enable_seqscan = off;
ALTER FUNCTION taskq.claim_lanes_v2(text, text[], text[], integer, real, boolean, boolean,
                                    bigint[], boolean)
    SET enable_seqscan = off;
ALTER FUNCTION taskq.claim_scan_v1(text, text[], text[], text, integer, boolean, bigint[])
    SET enable_seqscan = off;
ALTER FUNCTION taskq.claim_scan_v2(text, text[], text[], text, integer, boolean, bigint[],
                                   boolean)
    SET enable_seqscan = off;
ALTER FUNCTION taskq.claim_key_v1(text, text, text, boolean, boolean, bigint[])
    SET enable_seqscan = off;
ALTER FUNCTION taskq.claim_key_v2(text, text, text, boolean, boolean, bigint[], boolean)
    SET enable_seqscan = off;
ALTER FUNCTION taskq.claim_keys_v1(text, text, text, integer)
    SET enable_seqscan = off;
