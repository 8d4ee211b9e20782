-- The claim reads only the rows of the types it may take. Until now a lane's scan walked the
-- queue's runnable rows in claim order (tasks_runnable_idx, tasks_retry_idx: by queue, then
-- priority, time, id) and dropped, row by row, the rows of every type it could not take: a
-- paused type, a type whose circuit breaker is OPEN, a type another worker runs. One type's
-- outage (its breaker open, its backlog piling up) thus made every claim of every healthy type
-- of its queue read that whole backlog: a claim of 100 behind 100,000 such rows took 37-40 ms
-- instead of 2.5 ms, and the healthy types drained at a fraction of their rate exactly while
-- an operator was busy with the broken one.
--
-- Now each lane's scan first asks, per type it may take (one index probe each), whether that
-- type has a due row, leaving out the types whose breaker is not CLOSED unless this claim is
-- the breaker's probe; then it locks, per due type, the rows that type contributes to the
-- lane's first n in claim order. With one due type (the common case) that is one ordered scan
-- of that type's rows, LIMIT n. With several, an unlocked look at each due type's first n
-- rows says how many of the merged first n each one has, and the locking scans take that
-- many of each (a row another claimer holds is skipped for the next of the same type): the
-- claim order across types holds, and no more rows are locked than are claimed.
--
-- The isolated claim (one isolate row, tasks_isolate_idx, sql/ddl/0017) keeps the queue-wide
-- scans: there are normally no such rows, and the old body stays, renamed, for it.

-- The runnable index, now by type: one entry per PENDING or FAILED row, as before, ordered for
-- a scan of one type's lane in claim order. status is a key column, so a type's FAILED lane does
-- not read its PENDING rows nor the other way round. It replaces the two queue-wide indexes
-- (tasks_runnable_idx, tasks_retry_idx): while they existed, the planner, whose generic plans
-- cannot tell a type with 100,000 due rows from one with none, chose them for a type's scan
-- whenever one type held most of the backlog, and the by-type scan walked that backlog again.
-- Its predicate is the old tasks_runnable_idx's, so the backlog counts (sql/queries/stats.sql,
-- panel.sql) read it as they read that one. The queue-wide claim functions of releases before
-- 0017 (claim_scan_v1, still there) now sort a queue's due rows on each claim: upgrade such
-- workers before a large backlog builds up.
CREATE INDEX tasks_runnable_by_type_idx
    ON taskq.tasks (queue, task_type, status, priority DESC, runnable_at, id)
    WHERE status IN ('PENDING', 'FAILED');
DROP INDEX taskq.tasks_runnable_idx;
DROP INDEX taskq.tasks_retry_idx;

ALTER FUNCTION taskq.claim_scan_v2(text, text[], text[], text, integer, boolean, bigint[],
                                   boolean)
    RENAME TO claim_scan_queue_v1;

-- Same signature and contract as before (workers of the previous version call it through
-- claim_lanes_v2 as they did): up to p_n ids locked, of p_status, in claim order.
CREATE FUNCTION taskq.claim_scan_v2(
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
