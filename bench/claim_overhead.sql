-- What the claim function's own logic costs next to a bare UPDATE of the same rows.
--
-- taskq.claim_batch_v3 (flow limits, the retry lane, the scan's floor, breakers, the handler
-- defaults) against one statement that locks the next 100 rows from where the last claim ended
-- and claims them with the same assignments, alternated in rounds (v3, bare, bare, v3, ...) in
-- one server-side procedure, a COMMIT after each claim, over a backlog of 130,000 one-type
-- tasks. Prints each round's microseconds per claim of 100. No client, no network.
--
--     createdb taskq_bench_claim && TASKQ_DSN=postgresql:///taskq_bench_claim taskq migrate
--     psql -d taskq_bench_claim -f bench/claim_overhead.sql
--
-- It empties taskq.tasks first, so it refuses any database not named taskq_bench*.
\set ON_ERROR_STOP 1
SELECT current_database() LIKE 'taskq\_bench%' AS scratch \gset
\if :scratch
\else
DO $$ BEGIN RAISE EXCEPTION 'claim_overhead.sql empties taskq.tasks: run it on a database named taskq_bench*'; END $$;
\endif

TRUNCATE taskq.tasks CASCADE;
INSERT INTO taskq.tasks (task_type, queue, payload, max_retry_count, timeout_seconds)
SELECT 'bench.noop', 'default', jsonb_build_object('i', g, 'pad', repeat('x', 180)), 3, 60
FROM generate_series(1, 130000) AS g;
VACUUM ANALYZE taskq.tasks;
CHECKPOINT;

CREATE OR REPLACE PROCEDURE pg_temp.claims_ab(rounds integer, n integer)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz;
    v3 float8[] := '{}';
    bare float8[] := '{}';
    last_at timestamptz;
    last_id bigint;
    r record;
BEGIN
    PERFORM count(*) FROM taskq.claim_batch_v3('default', '{bench.noop}', '{3}', '{60}', 100, 'w1');
    COMMIT;
    FOR rr IN 1 .. rounds * 2 LOOP
        IF rr % 4 IN (0, 1) THEN
            t0 := clock_timestamp();
            FOR i IN 1 .. n LOOP
                PERFORM count(*)
                FROM taskq.claim_batch_v3('default', '{bench.noop}', '{3}', '{60}', 100, 'w1');
                COMMIT;
            END LOOP;
            v3 := v3 || extract(epoch FROM clock_timestamp() - t0) * 1e6 / n;
        ELSE
            -- The bare claim's floor: after the last row claimed so far (by either side).
            SELECT t.runnable_at, t.id INTO last_at, last_id FROM taskq.tasks AS t
            WHERE t.status = 'PROCESSING' ORDER BY t.id DESC LIMIT 1;
            t0 := clock_timestamp();
            FOR i IN 1 .. n LOOP
                WITH c AS (
                    SELECT c.id FROM taskq.tasks AS c
                    WHERE c.status IN ('PENDING', 'FAILED') AND NOT c.isolate
                      AND c.queue = 'default' AND c.task_type = 'bench.noop'
                      AND c.status = 'PENDING' AND c.runnable_at <= now() AND c.priority = 0
                      AND (c.runnable_at, c.id) > (last_at, last_id)
                    ORDER BY c.priority DESC, c.runnable_at, c.id
                    LIMIT 100
                    FOR UPDATE OF c SKIP LOCKED),
                u AS (
                    UPDATE taskq.tasks AS t
                    SET status = 'PROCESSING',
                        effective_id = ((SELECT left(gen_random_uuid()::text, 24))
                                        || lpad(to_hex(t.id & 281474976710655), 12, '0'))::uuid,
                        worker_id = 'w1', started_at = now(), finished_at = NULL,
                        updated_at = now()
                    FROM c WHERE t.id = c.id
                    RETURNING t.*)
                SELECT max(u.runnable_at) AS at, max(u.id) AS id INTO r FROM u;
                last_at := r.at;
                last_id := r.id;
                COMMIT;
            END LOOP;
            bare := bare || extract(epoch FROM clock_timestamp() - t0) * 1e6 / n;
        END IF;
    END LOOP;
    RAISE NOTICE 'claim_batch_v3, us per claim of 100, by round: %',
        (SELECT array_agg(round(x::numeric)) FROM unnest(v3) AS x);
    RAISE NOTICE 'bare UPDATE,    us per claim of 100, by round: %',
        (SELECT array_agg(round(x::numeric)) FROM unnest(bare) AS x);
END
$$;

CALL pg_temp.claims_ab(5, 100);
