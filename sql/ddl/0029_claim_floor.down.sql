-- 0029 down: one-type claims scan their lane from the start again (0024's function).
CREATE OR REPLACE FUNCTION taskq.claim_scan_v2(
    p_queue text, p_task_types text[], p_unkeyed_types text[], p_status text, p_n integer,
    p_probe boolean, p_picked bigint[], p_isolated boolean)
 RETURNS bigint[]
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
 SET enable_seqscan TO 'off'
AS $function$
DECLARE
    v_types  text[];
    v_every  boolean[];   -- per due type: all its rows, or (fair, per-key) only its unkeyed ones
    v_prio   smallint[];  -- per due type: its first entry in the lane
    v_at     timestamptz[];
    v_first  bigint[];
    v_counts bigint[];
    v_ids    bigint[];
    v_got    text[];      -- the type of each id in v_ids
BEGIN
    IF p_n <= 0 THEN
        RETURN '{}';
    END IF;
    IF p_isolated THEN
        RETURN taskq.claim_scan_queue_v1(p_queue, p_task_types, p_unkeyed_types, p_status, p_n,
                                         p_probe, p_picked, p_isolated);
    END IF;

    IF cardinality(p_task_types) + cardinality(p_unkeyed_types) = 1 THEN
        -- One type (a worker that runs one type in this queue): one scan, no look first.
        SELECT coalesce(array_agg(s.id), '{}') INTO v_ids FROM (
            SELECT c.id FROM taskq.tasks AS c
            WHERE c.status IN ('PENDING', 'FAILED') AND NOT c.isolate
              AND c.queue = p_queue
              AND c.task_type = (p_task_types || p_unkeyed_types)[1]
              AND c.status = p_status
              AND c.runnable_at <= now()
              AND (cardinality(p_task_types) = 1 OR c.concurrency_key IS NULL)
              AND c.id <> ALL(p_picked)
              -- the type's breaker, once (not per row: an OPEN type's range is not read)
              AND (p_probe OR NOT EXISTS (
                      SELECT 1 FROM taskq.breakers AS b
                      WHERE b.task_type = (p_task_types || p_unkeyed_types)[1]
                        AND b.state <> 'CLOSED'))
              AND (c.ordering_key IS NULL OR NOT EXISTS (
                      SELECT 1 FROM taskq.tasks AS earlier
                      WHERE earlier.ordering_key = c.ordering_key
                        AND earlier.id < c.id
                        AND earlier.status IN ('PENDING', 'PROCESSING', 'FAILED')))
            ORDER BY c.priority DESC, c.runnable_at, c.id
            LIMIT p_n
            FOR UPDATE OF c SKIP LOCKED) AS s;
        RETURN v_ids;
    END IF;

    -- The due types, and each one's first entry in this lane (types whose breaker is not
    -- CLOSED are left out before their range is read, unless this is the breaker's probe).
    SELECT coalesce(array_agg(w.task_type ORDER BY w.task_type), '{}'),
           coalesce(array_agg(w.every ORDER BY w.task_type), '{}'),
           coalesce(array_agg(f.priority ORDER BY w.task_type), '{}'),
           coalesce(array_agg(f.runnable_at ORDER BY w.task_type), '{}'),
           coalesce(array_agg(f.id ORDER BY w.task_type), '{}')
    INTO v_types, v_every, v_prio, v_at, v_first
    FROM (SELECT a.task_type, bool_or(a.every) AS every
          FROM (SELECT x AS task_type, true AS every FROM unnest(p_task_types) AS x
                UNION ALL
                SELECT x, false FROM unnest(p_unkeyed_types) AS x) AS a
          GROUP BY a.task_type) AS w
    CROSS JOIN LATERAL (
        SELECT c.priority, c.runnable_at, c.id FROM taskq.tasks AS c
        WHERE c.status IN ('PENDING', 'FAILED') AND NOT c.isolate
          AND c.queue = p_queue
          AND c.task_type = w.task_type
          AND c.status = p_status
          AND c.runnable_at <= now()
          AND (w.every OR c.concurrency_key IS NULL)
          AND c.id <> ALL(p_picked)
        ORDER BY c.priority DESC, c.runnable_at, c.id
        LIMIT 1) AS f
    WHERE p_probe OR NOT EXISTS (
              SELECT 1 FROM taskq.breakers AS b
              WHERE b.task_type = w.task_type AND b.state <> 'CLOSED');

    IF cardinality(v_types) = 0 THEN
        RETURN '{}';
    ELSIF cardinality(v_types) = 1 THEN
        v_counts := ARRAY[p_n];
    ELSE
        -- How many of the lane's first n each due type has (no locks: a guide for the
        -- locking scans, which skip what another claimer holds).
        SELECT array_agg(coalesce(k.n, 0) ORDER BY d.task_type) INTO v_counts
        FROM unnest(v_types) AS d(task_type)
        LEFT JOIN (
            SELECT m.task_type, count(*) AS n FROM (
                SELECT d2.task_type, f.priority, f.runnable_at, f.id
                FROM unnest(v_types, v_every, v_prio, v_at, v_first)
                     AS d2(task_type, every, prio, at, first)
                CROSS JOIN LATERAL (
                    (SELECT c.priority, c.runnable_at, c.id FROM taskq.tasks AS c
                     WHERE c.status IN ('PENDING', 'FAILED') AND NOT c.isolate
                       AND c.queue = p_queue
                       AND c.task_type = d2.task_type
                       AND c.status = p_status
                       AND c.priority = d2.prio
                       AND (c.runnable_at, c.id) >= (d2.at, d2.first)
                       AND c.runnable_at <= now()
                       AND (d2.every OR c.concurrency_key IS NULL)
                       AND c.id <> ALL(p_picked)
                     ORDER BY c.runnable_at, c.id
                     LIMIT p_n)
                    UNION ALL
                    (SELECT c.priority, c.runnable_at, c.id FROM taskq.tasks AS c
                     WHERE c.status IN ('PENDING', 'FAILED') AND NOT c.isolate
                       AND c.queue = p_queue
                       AND c.task_type = d2.task_type
                       AND c.status = p_status
                       AND c.priority < d2.prio
                       AND c.runnable_at <= now()
                       AND (d2.every OR c.concurrency_key IS NULL)
                       AND c.id <> ALL(p_picked)
                     ORDER BY c.priority DESC, c.runnable_at, c.id
                     LIMIT p_n)) AS f
                ORDER BY f.priority DESC, f.runnable_at, f.id
                LIMIT p_n) AS m
            GROUP BY m.task_type) AS k ON k.task_type = d.task_type;
    END IF;

    -- Lock: each due type's rows of its first priority, from its first entry on.
    SELECT coalesce(array_agg(s.id), '{}'), coalesce(array_agg(s.task_type), '{}')
    INTO v_ids, v_got
    FROM unnest(v_types, v_every, v_counts, v_prio, v_at, v_first)
         AS d(task_type, every, n, prio, at, first)
    CROSS JOIN LATERAL (
        SELECT c.id, c.task_type FROM taskq.tasks AS c
        WHERE c.status IN ('PENDING', 'FAILED') AND NOT c.isolate
          AND c.queue = p_queue
          AND c.task_type = d.task_type
          AND c.status = p_status
          AND c.priority = d.prio
          AND (c.runnable_at, c.id) >= (d.at, d.first)
          AND c.runnable_at <= now()
          AND (d.every OR c.concurrency_key IS NULL)
          AND c.id <> ALL(p_picked)
          AND (c.ordering_key IS NULL OR NOT EXISTS (
                  SELECT 1 FROM taskq.tasks AS earlier
                  WHERE earlier.ordering_key = c.ordering_key
                    AND earlier.id < c.id
                    AND earlier.status IN ('PENDING', 'PROCESSING', 'FAILED')))
        ORDER BY c.runnable_at, c.id
        LIMIT d.n
        FOR UPDATE OF c SKIP LOCKED) AS s
    WHERE d.n > 0;

    -- Then the lower priorities of the types that first priority left short.
    IF cardinality(v_ids) < (SELECT sum(n) FROM unnest(v_counts) AS n) THEN
        SELECT v_ids || coalesce(array_agg(s.id), '{}') INTO v_ids
        FROM unnest(v_types, v_every, v_counts, v_prio) AS d(task_type, every, n, prio)
        CROSS JOIN LATERAL (
            SELECT c.id FROM taskq.tasks AS c
            WHERE c.status IN ('PENDING', 'FAILED') AND NOT c.isolate
              AND c.queue = p_queue
              AND c.task_type = d.task_type
              AND c.status = p_status
              AND c.priority < d.prio
              AND c.runnable_at <= now()
              AND (d.every OR c.concurrency_key IS NULL)
              AND c.id <> ALL(p_picked)
              AND (c.ordering_key IS NULL OR NOT EXISTS (
                      SELECT 1 FROM taskq.tasks AS earlier
                      WHERE earlier.ordering_key = c.ordering_key
                        AND earlier.id < c.id
                        AND earlier.status IN ('PENDING', 'PROCESSING', 'FAILED')))
            ORDER BY c.priority DESC, c.runnable_at, c.id
            LIMIT d.n - (SELECT count(*) FROM unnest(v_got) AS g WHERE g = d.task_type)
            FOR UPDATE OF c SKIP LOCKED) AS s
        WHERE d.n > (SELECT count(*) FROM unnest(v_got) AS g WHERE g = d.task_type);
    END IF;
    RETURN v_ids;
END
$function$;

DROP FUNCTION taskq.lane_floor_set_v1(text, text, text, text, numeric, smallint, timestamptz,
                                       bigint);
