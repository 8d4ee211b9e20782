-- A worker that runs many types made each claim look into the runnable index once per type
-- and lane (sql/ddl/0023, 0024): 50 registered types, one of them with work, cost ~100 index
-- probes per claim, most of them finding nothing. Now, with 4 types or more, the claim first
-- asks which types have rows in the queue's runnable index at all, by a loose index scan
-- (one descent per type present, newest entry first: a type being drained has its dead
-- entries, claimed rows not yet vacuumed, at the front of its range, and its newest row is
-- live), and the lanes look only at the worker's types among them. Bounded: once the scan
-- has found more types than the worker runs, it stops and the lanes look at all of them, as
-- before. Same signature and contract.
CREATE OR REPLACE FUNCTION taskq.claim_lanes_v2(
    p_queue text, p_task_types text[], p_unkeyed_types text[], p_n integer, p_share real,
    p_retries_only boolean, p_probe boolean, p_picked bigint[], p_isolated boolean
) RETURNS bigint[]
LANGUAGE plpgsql
-- The settings of every claim function (sql/ddl/0019, 0022): no JIT, no sequential scan.
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
AS $$
DECLARE
    v_retry_quota integer;
    v_retries bigint[];
    v_fresh bigint[] := '{}';
    v_more bigint[] := '{}';
    v_types integer := cardinality(p_task_types) + cardinality(p_unkeyed_types);
    v_present text[];
    v_complete boolean;
BEGIN
    IF p_n <= 0 THEN
        RETURN '{}';
    END IF;
    IF v_types >= 4 THEN
        WITH RECURSIVE present(task_type, step) AS (
            (SELECT c.task_type, 1 FROM taskq.tasks AS c
             WHERE c.status IN ('PENDING', 'FAILED') AND c.queue = p_queue
             ORDER BY c.task_type DESC
             LIMIT 1)
            UNION ALL
            SELECT (SELECT c.task_type FROM taskq.tasks AS c
                    WHERE c.status IN ('PENDING', 'FAILED') AND c.queue = p_queue
                      AND c.task_type < r.task_type
                    ORDER BY c.task_type DESC
                    LIMIT 1),
                   r.step + 1
            FROM present AS r
            WHERE r.task_type IS NOT NULL AND r.step <= v_types)
        -- complete: the scan ran off the end (a NULL row), not into its bound
        SELECT array_agg(r.task_type) FILTER (WHERE r.task_type IS NOT NULL),
               coalesce(bool_or(r.task_type IS NULL), true)
        INTO v_present, v_complete
        FROM present AS r;
        IF v_complete THEN
            p_task_types := ARRAY(SELECT x FROM unnest(p_task_types) AS x
                                  WHERE x = ANY(v_present));
            p_unkeyed_types := ARRAY(SELECT x FROM unnest(p_unkeyed_types) AS x
                                     WHERE x = ANY(v_present));
            IF cardinality(p_task_types) + cardinality(p_unkeyed_types) = 0 THEN
                RETURN '{}';
            END IF;
        END IF;
    END IF;
    v_retry_quota := CASE WHEN p_retries_only THEN p_n
                          ELSE least(p_n, floor(p_n * p_share + random())::integer) END;
    v_retries := taskq.claim_scan_v2(p_queue, p_task_types, p_unkeyed_types, 'FAILED',
                                     v_retry_quota, p_probe, p_picked, p_isolated);
    IF NOT p_retries_only THEN
        v_fresh := taskq.claim_scan_v2(p_queue, p_task_types, p_unkeyed_types, 'PENDING',
                                       p_n - cardinality(v_retries), p_probe, p_picked,
                                       p_isolated);
    END IF;
    IF cardinality(v_retries) = v_retry_quota
       AND cardinality(v_retries) + cardinality(v_fresh) < p_n THEN
        v_more := taskq.claim_scan_v2(p_queue, p_task_types, p_unkeyed_types, 'FAILED',
                                      p_n - cardinality(v_retries) - cardinality(v_fresh),
                                      p_probe, p_picked || v_retries, p_isolated);
    END IF;
    RETURN v_retries || v_fresh || v_more;
END
$$;
