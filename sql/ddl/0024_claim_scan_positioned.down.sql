-- 0024 down: the lane scan of sql/ddl/0023, unpositioned.
CREATE OR REPLACE FUNCTION taskq.claim_scan_v2(
    p_queue text, p_task_types text[], p_unkeyed_types text[], p_status text, p_n integer,
    p_probe boolean, p_picked bigint[], p_isolated boolean
) RETURNS bigint[]
LANGUAGE plpgsql
-- The settings of every claim function (sql/ddl/0019, 0022): no JIT, no sequential scan.
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
AS $$
DECLARE
    v_types  text[];
    v_every  boolean[];  -- per due type: all its rows, or (fair, per-key) only its unkeyed ones
    v_counts bigint[];
    v_ids    bigint[];
BEGIN
    IF p_n <= 0 THEN
        RETURN '{}';
    END IF;
    IF p_isolated THEN
        RETURN taskq.claim_scan_queue_v1(p_queue, p_task_types, p_unkeyed_types, p_status, p_n,
                                         p_probe, p_picked, p_isolated);
    END IF;

    IF cardinality(p_task_types) + cardinality(p_unkeyed_types) = 1 THEN
        -- One type (a worker that runs one type in this queue): no look first; the locking
        -- scan finds out by itself, and checks the type's breaker.
        v_types := p_task_types || p_unkeyed_types;
        v_every := ARRAY[cardinality(p_task_types) = 1];
        v_counts := ARRAY[p_n];
    ELSE
        -- The types with a due row in this lane, one index probe each (a scalar subquery,
        -- not EXISTS, which the planner may turn into a hash join over the whole backlog).
        SELECT coalesce(array_agg(w.task_type ORDER BY w.task_type), '{}'),
               coalesce(array_agg(w.every ORDER BY w.task_type), '{}')
        INTO v_types, v_every
        FROM (SELECT a.task_type, bool_or(a.every) AS every
              FROM (SELECT x AS task_type, true AS every FROM unnest(p_task_types) AS x
                    UNION ALL
                    SELECT x, false FROM unnest(p_unkeyed_types) AS x) AS a
              GROUP BY a.task_type) AS w
        WHERE (p_probe OR NOT EXISTS (
                  SELECT 1 FROM taskq.breakers AS b
                  WHERE b.task_type = w.task_type AND b.state <> 'CLOSED'))
          AND (SELECT c.id FROM taskq.tasks AS c
               WHERE c.status IN ('PENDING', 'FAILED') AND NOT c.isolate
                 AND c.queue = p_queue
                 AND c.task_type = w.task_type
                 AND c.status = p_status
                 AND c.runnable_at <= now()
                 AND (w.every OR c.concurrency_key IS NULL)
                 AND c.id <> ALL(p_picked)
               LIMIT 1) IS NOT NULL;
        IF cardinality(v_types) = 0 THEN
            RETURN '{}';
        ELSIF cardinality(v_types) = 1 THEN
            v_counts := ARRAY[p_n];
        ELSE
            -- How many of the lane's first n each due type has (no locks: a guide for the
            -- locking scan, which skips what another claimer holds).
            SELECT array_agg(coalesce(k.n, 0) ORDER BY d.task_type) INTO v_counts
            FROM unnest(v_types) AS d(task_type)
            LEFT JOIN (
                SELECT m.task_type, count(*) AS n FROM (
                    SELECT d2.task_type, f.priority, f.runnable_at, f.id
                    FROM unnest(v_types, v_every) AS d2(task_type, every)
                    CROSS JOIN LATERAL (
                        SELECT c.priority, c.runnable_at, c.id FROM taskq.tasks AS c
                        WHERE c.status IN ('PENDING', 'FAILED') AND NOT c.isolate
                          AND c.queue = p_queue
                          AND c.task_type = d2.task_type
                          AND c.status = p_status
                          AND c.runnable_at <= now()
                          AND (d2.every OR c.concurrency_key IS NULL)
                          AND c.id <> ALL(p_picked)
                        ORDER BY c.priority DESC, c.runnable_at, c.id
                        LIMIT p_n) AS f
                    ORDER BY f.priority DESC, f.runnable_at, f.id
                    LIMIT p_n) AS m
                GROUP BY m.task_type) AS k ON k.task_type = d.task_type;
        END IF;
    END IF;

    SELECT coalesce(array_agg(s.id), '{}') INTO v_ids
    FROM unnest(v_types, v_every, v_counts) AS d(task_type, every, n)
    CROSS JOIN LATERAL (
        SELECT c.id FROM taskq.tasks AS c
        WHERE c.status IN ('PENDING', 'FAILED') AND NOT c.isolate
          AND c.queue = p_queue
          AND c.task_type = d.task_type
          AND c.status = p_status
          AND c.runnable_at <= now()
          AND (d.every OR c.concurrency_key IS NULL)
          AND c.id <> ALL(p_picked)
          AND (c.ordering_key IS NULL OR NOT EXISTS (
                  SELECT 1 FROM taskq.tasks AS earlier
                  WHERE earlier.ordering_key = c.ordering_key
                    AND earlier.id < c.id
                    AND earlier.status IN ('PENDING', 'PROCESSING', 'FAILED')))
        ORDER BY c.priority DESC, c.runnable_at, c.id
        LIMIT d.n
        FOR UPDATE OF c SKIP LOCKED) AS s
    WHERE d.n > 0
      AND (p_probe OR NOT EXISTS (
              SELECT 1 FROM taskq.breakers AS b
              WHERE b.task_type = d.task_type AND b.state <> 'CLOSED'));
    RETURN v_ids;
END
$$;
