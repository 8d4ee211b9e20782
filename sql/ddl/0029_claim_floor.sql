-- taskq 0029: a one-type claim starts where the session's last full claim ended.
--
-- Every claim leaves dead entries at the front of its type's range in the runnable index (the
-- rows it moved to PROCESSING), and they stay until VACUUM: autovacuum's next visit, or never
-- on a server that runs without it. A drain of 100,000 tasks ends with hundreds of index pages
-- of them, and each claim walked all of them before it reached a live row: the claim's index
-- scans were 15 % of the database's CPU in that drain (`python bench/run.py --only dbprofile
-- --drain-slots 100 --perf /usr/bin/perf`), almost all of it stepping from page to page.
--
-- Now, after a claim that got all the rows it asked for, the session remembers the lane's
-- last claimed key (priority, runnable_at, id) in a session setting (one per queue, type and
-- lane; a setting, so that concurrent claimers never wait on each other for it), and its next
-- claims of the lane read: the higher priorities (before the floor in the index; usually
-- none), then the floor's priority from the floor on, then the lower priorities. Alternated
-- 100,000-task drains, one worker of 100 slots: database CPU per task 37.9 -> 34.7 us, rate
-- 18,539 -> 19,730 tasks/s (medians of six pairs, five better; `python bench/ab.py`), and
-- the claim's index scans 13-15 % -> 3-5 % of the backends' CPU.
--
-- What it costs: a row that becomes runnable with a key before the floor (an attempt given
-- back at a shutdown, or a row inserted by a transaction that began before the claim) is not
-- seen by floor-started claims. It is claimed by the next scan from the start, which comes
-- when the floor is a second old (each full scan from the start resets that clock), or at
-- once when the lane after the floor holds fewer rows than a claim asks for; a claim that
-- gets less than it asked for forgets the floor. Higher priorities never wait. Workers that
-- run several types in a queue keep 0024's positioned look. Same signature and contract.
-- The floor as one setting's text: queue, type, lane, when the lane was last scanned from the
-- start (epoch seconds), then the last claimed key (priority, runnable_at in microseconds since
-- the epoch, so it reads back exactly whatever the session's DateStyle, id). A key at an
-- infinite runnable_at is not kept (no floor). A SQL function, so it is inlined in the caller.
CREATE FUNCTION taskq.lane_floor_set_v1(
    p_slot text, p_queue text, p_task_type text, p_status text, p_full_at numeric,
    p_priority smallint, p_runnable_at timestamptz, p_id bigint) RETURNS text
LANGUAGE sql VOLATILE AS $$
    SELECT set_config(p_slot,
                      CASE WHEN isfinite(p_runnable_at)
                           THEN concat_ws(E'\n', p_queue, p_task_type, p_status, p_full_at,
                                          p_priority,
                                          (extract(epoch FROM p_runnable_at) * 1000000)::bigint,
                                          p_id)
                           ELSE '' END,
                      false)
$$;

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
    v_type   text;
    v_slot   text;        -- the session setting that holds this lane's floor
    v_floor  text[];      -- queue, type, status, full scan's epoch, priority, runnable_at, id
    v_prios  smallint[];
    v_ats    timestamptz[];
    v_all    bigint[] := '{}';
    v_all_prios smallint[];
    v_all_ats timestamptz[];
BEGIN
    IF p_n <= 0 THEN
        RETURN '{}';
    END IF;
    IF p_isolated THEN
        RETURN taskq.claim_scan_queue_v1(p_queue, p_task_types, p_unkeyed_types, p_status, p_n,
                                         p_probe, p_picked, p_isolated);
    END IF;

    IF cardinality(p_task_types) + cardinality(p_unkeyed_types) = 1 THEN
        -- One type (a worker that runs one type in this queue): no look first. After a full
        -- claim, this session's next claims of the lane start where it ended (its floor),
        -- not at the front of the range, where the claimed rows leave dead index entries
        -- until VACUUM. Higher priorities are read first; from the floor on, its priority;
        -- then lower ones. A row with a key before the floor (released, rescued, or
        -- inserted by a transaction older than the claim) is claimed by the next scan from
        -- the start: when the floor is a second old, or when the lane after it runs short.
        v_type := (p_task_types || p_unkeyed_types)[1];
        v_slot := 'taskq.claim_floor_'
                  || (hashtext(p_queue || E'\n' || v_type || E'\n' || p_status) & 2147483647);
        v_floor := string_to_array(current_setting(v_slot, true), E'\n');
        IF cardinality(v_floor) = 7 AND v_floor[1] = p_queue AND v_floor[2] = v_type
           AND v_floor[3] = p_status
           AND v_floor[4]::double precision > extract(epoch FROM now()) - 1 THEN
            -- Higher priorities first (before the floor in the index; usually none).
            SELECT coalesce(array_agg(s.id), '{}'), coalesce(array_agg(s.priority), '{}'),
                   coalesce(array_agg(s.runnable_at), '{}')
            INTO v_ids, v_prios, v_ats
            FROM (
                SELECT c.id, c.priority, c.runnable_at FROM taskq.tasks AS c
                WHERE c.status IN ('PENDING', 'FAILED') AND NOT c.isolate
                  AND c.queue = p_queue AND c.task_type = v_type AND c.status = p_status
                  AND c.priority > v_floor[5]::smallint
                  AND c.runnable_at <= now()
                  AND (cardinality(p_task_types) = 1 OR c.concurrency_key IS NULL)
                  AND c.id <> ALL(p_picked)
                  -- the type's breaker, once (not per row: an OPEN type's range is not read)
                  AND (p_probe OR NOT EXISTS (
                          SELECT 1 FROM taskq.breakers AS b
                          WHERE b.task_type = v_type AND b.state <> 'CLOSED'))
                  AND (c.ordering_key IS NULL OR NOT EXISTS (
                          SELECT 1 FROM taskq.tasks AS earlier
                          WHERE earlier.ordering_key = c.ordering_key
                            AND earlier.id < c.id
                            AND earlier.status IN ('PENDING', 'PROCESSING', 'FAILED')))
                ORDER BY c.priority DESC, c.runnable_at, c.id
                LIMIT p_n
                FOR UPDATE OF c SKIP LOCKED) AS s;
            v_all := v_ids;
            v_all_prios := v_prios;
            v_all_ats := v_ats;
            IF cardinality(v_all) < p_n THEN
                -- The floor's priority, from the floor on.
                SELECT coalesce(array_agg(s.id), '{}'), coalesce(array_agg(s.priority), '{}'),
                       coalesce(array_agg(s.runnable_at), '{}')
                INTO v_ids, v_prios, v_ats
                FROM (
                    SELECT c.id, c.priority, c.runnable_at FROM taskq.tasks AS c
                    WHERE c.status IN ('PENDING', 'FAILED') AND NOT c.isolate
                      AND c.queue = p_queue AND c.task_type = v_type AND c.status = p_status
                      AND c.priority = v_floor[5]::smallint
                      AND (c.runnable_at, c.id)
                          > (timestamptz 'epoch' + v_floor[6]::bigint * interval '1 microsecond',
                             v_floor[7]::bigint)
                      AND c.runnable_at <= now()
                      AND (cardinality(p_task_types) = 1 OR c.concurrency_key IS NULL)
                      AND c.id <> ALL(p_picked)
                      -- the type's breaker, once (not per row: an OPEN type's range is not read)
                      AND (p_probe OR NOT EXISTS (
                              SELECT 1 FROM taskq.breakers AS b
                              WHERE b.task_type = v_type AND b.state <> 'CLOSED'))
                      AND (c.ordering_key IS NULL OR NOT EXISTS (
                              SELECT 1 FROM taskq.tasks AS earlier
                              WHERE earlier.ordering_key = c.ordering_key
                                AND earlier.id < c.id
                                AND earlier.status IN ('PENDING', 'PROCESSING', 'FAILED')))
                    ORDER BY c.runnable_at, c.id
                    LIMIT p_n - cardinality(v_all)
                    FOR UPDATE OF c SKIP LOCKED) AS s;
                v_all := v_all || v_ids;
                v_all_prios := v_all_prios || v_prios;
                v_all_ats := v_all_ats || v_ats;
            END IF;
            IF cardinality(v_all) < p_n THEN
                -- Lower priorities.
                SELECT coalesce(array_agg(s.id), '{}'), coalesce(array_agg(s.priority), '{}'),
                       coalesce(array_agg(s.runnable_at), '{}')
                INTO v_ids, v_prios, v_ats
                FROM (
                    SELECT c.id, c.priority, c.runnable_at FROM taskq.tasks AS c
                    WHERE c.status IN ('PENDING', 'FAILED') AND NOT c.isolate
                      AND c.queue = p_queue AND c.task_type = v_type AND c.status = p_status
                      AND c.priority < v_floor[5]::smallint
                      AND c.runnable_at <= now()
                      AND (cardinality(p_task_types) = 1 OR c.concurrency_key IS NULL)
                      AND c.id <> ALL(p_picked)
                      -- the type's breaker, once (not per row: an OPEN type's range is not read)
                      AND (p_probe OR NOT EXISTS (
                              SELECT 1 FROM taskq.breakers AS b
                              WHERE b.task_type = v_type AND b.state <> 'CLOSED'))
                      AND (c.ordering_key IS NULL OR NOT EXISTS (
                              SELECT 1 FROM taskq.tasks AS earlier
                              WHERE earlier.ordering_key = c.ordering_key
                                AND earlier.id < c.id
                                AND earlier.status IN ('PENDING', 'PROCESSING', 'FAILED')))
                    ORDER BY c.priority DESC, c.runnable_at, c.id
                    LIMIT p_n - cardinality(v_all)
                    FOR UPDATE OF c SKIP LOCKED) AS s;
                v_all := v_all || v_ids;
                v_all_prios := v_all_prios || v_prios;
                v_all_ats := v_all_ats || v_ats;
            END IF;
            IF cardinality(v_all) = p_n THEN
                PERFORM taskq.lane_floor_set_v1(v_slot, p_queue, v_type, p_status,
                                                v_floor[4]::numeric, v_all_prios[p_n],
                                                v_all_ats[p_n], v_all[p_n]);
                RETURN v_all;
            END IF;
            -- Short from the floor: the whole range, for the rest.
            p_picked := p_picked || v_all;
            p_n := p_n - cardinality(v_all);
        END IF;
        SELECT coalesce(array_agg(s.id), '{}'), coalesce(array_agg(s.priority), '{}'),
               coalesce(array_agg(s.runnable_at), '{}')
        INTO v_ids, v_prios, v_ats
        FROM (
            SELECT c.id, c.priority, c.runnable_at FROM taskq.tasks AS c
            WHERE c.status IN ('PENDING', 'FAILED') AND NOT c.isolate
              AND c.queue = p_queue AND c.task_type = v_type AND c.status = p_status
              AND c.runnable_at <= now()
              AND (cardinality(p_task_types) = 1 OR c.concurrency_key IS NULL)
              AND c.id <> ALL(p_picked)
              -- the type's breaker, once (not per row: an OPEN type's range is not read)
              AND (p_probe OR NOT EXISTS (
                      SELECT 1 FROM taskq.breakers AS b
                      WHERE b.task_type = v_type AND b.state <> 'CLOSED'))
              AND (c.ordering_key IS NULL OR NOT EXISTS (
                      SELECT 1 FROM taskq.tasks AS earlier
                      WHERE earlier.ordering_key = c.ordering_key
                        AND earlier.id < c.id
                        AND earlier.status IN ('PENDING', 'PROCESSING', 'FAILED')))
            ORDER BY c.priority DESC, c.runnable_at, c.id
            LIMIT p_n
            FOR UPDATE OF c SKIP LOCKED) AS s;
        IF cardinality(v_ids) = p_n THEN
            -- A full claim: more rows wait behind the last one, so the next starts there.
            PERFORM taskq.lane_floor_set_v1(v_slot, p_queue, v_type, p_status,
                                            extract(epoch FROM now()), v_prios[p_n],
                                            v_ats[p_n], v_ids[p_n]);
        ELSIF cardinality(v_floor) > 0 THEN
            PERFORM set_config(v_slot, '', false);  -- the lane is short: no floor
        END IF;
        RETURN v_ids || v_all;
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
