-- 0025 down: the lanes of sql/ddl/0017 (with the settings of 0019 and 0022), which look at
-- every type the worker runs.
CREATE OR REPLACE FUNCTION taskq.claim_lanes_v2(
    p_queue text, p_task_types text[], p_unkeyed_types text[], p_n integer, p_share real,
    p_retries_only boolean, p_probe boolean, p_picked bigint[], p_isolated boolean
) RETURNS bigint[]
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
AS $$
DECLARE
    v_retry_quota integer;
    v_retries bigint[];
    v_fresh bigint[] := '{}';
    v_more bigint[] := '{}';
BEGIN
    IF p_n <= 0 THEN
        RETURN '{}';
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
