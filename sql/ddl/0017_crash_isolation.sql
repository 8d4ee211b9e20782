-- Crash isolation. A task that kills its worker process (os.abort, a segfault in a C
-- extension, the OOM killer) used to take every attempt running beside it down with it, and
-- the reaper charged each of them a retry ("WorkerLost"): a poison task dead-lettered its
-- innocent neighbours. Now the reaper (reap_attempts in sql/queries/finish.sql) judges a dead
-- worker's attempts together:
--   * an attempt that ran ALONE in the dead process is charged, as before: it was the crash;
--   * attempts that ran beside others are not charged: crash_count goes up, isolate is set,
--     and they go back to PENDING;
-- and an isolate row is claimed only by a worker that runs it with nothing else in its process
-- (taskq/worker/isolator.py), so a crash while it runs is charged to it alone. A handler's
-- own outcome (success, failure, permanent error) clears isolate. crash_count also bounds the
-- uncharged crashes (the reaper's crash_limit), so nothing loops forever.

ALTER TABLE taskq.tasks
    ADD COLUMN crash_count integer NOT NULL DEFAULT 0,
    ADD COLUMN isolate boolean NOT NULL DEFAULT false;

-- The isolated runnable rows only (normally none): the worker's look for isolated work and the
-- isolated claim's scans cost nothing while there is none, whatever the backlog.
CREATE INDEX tasks_isolate_idx ON taskq.tasks (queue, priority DESC, runnable_at, id)
    WHERE isolate AND status IN ('PENDING', 'FAILED');

-- The claim, with one more parameter, p_isolated: false (the normal batches) never claims an
-- isolate row, true claims at most one and only isolate rows (the isolator's claim), through
-- the same flow limits, breakers and ordering keys. The functions below are 0014's
-- claim_lanes_v1, claim_scan_v1, claim_key_v1 and claim_batch_v1 (see the comments there for
-- how they work) with p_isolated passed down to the scans; claim_batch_v3 also returns the
-- row's traceparent (0015's column) from the UPDATE that claims it. v1 stays for workers of
-- the previous version during a rolling upgrade (it does not tell isolate rows apart: such a
-- worker may run one beside others, and the reaper's crash_limit still bounds what that
-- costs). claim_scan_v2 names its isolate condition as a constant, as it does the
-- status, so that each statement's generic plan matches its partial index.
CREATE FUNCTION taskq.claim_lanes_v2(
    p_queue text, p_task_types text[], p_unkeyed_types text[], p_n integer, p_share real,
    p_retries_only boolean, p_probe boolean, p_picked bigint[], p_isolated boolean
) RETURNS bigint[]
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
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

CREATE FUNCTION taskq.claim_scan_v2(
    p_queue text, p_task_types text[], p_unkeyed_types text[], p_status text, p_n integer,
    p_probe boolean, p_picked bigint[], p_isolated boolean
) RETURNS bigint[]
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    IF p_n <= 0 THEN
        RETURN '{}';
    END IF;
    IF p_isolated AND p_status = 'FAILED' THEN
        SELECT coalesce(array_agg(s.id), '{}') INTO v_ids FROM (
            SELECT c.id FROM taskq.tasks AS c
            WHERE c.status = 'FAILED' AND c.isolate
              AND c.queue = p_queue
              AND c.runnable_at <= now()
              AND (c.task_type = ANY(p_task_types)
                   OR (c.concurrency_key IS NULL AND c.task_type = ANY(p_unkeyed_types)))
              AND c.id <> ALL(p_picked)
              AND (p_probe OR NOT EXISTS (
                      SELECT 1 FROM taskq.breakers AS b
                      WHERE b.task_type = c.task_type AND b.state <> 'CLOSED'))
              AND (c.ordering_key IS NULL OR NOT EXISTS (
                      SELECT 1 FROM taskq.tasks AS earlier
                      WHERE earlier.ordering_key = c.ordering_key
                        AND earlier.id < c.id
                        AND earlier.status IN ('PENDING', 'PROCESSING', 'FAILED')))
            ORDER BY c.priority DESC, c.runnable_at, c.id
            LIMIT p_n
            FOR UPDATE OF c SKIP LOCKED) AS s;
    ELSIF p_isolated THEN
        SELECT coalesce(array_agg(s.id), '{}') INTO v_ids FROM (
            SELECT c.id FROM taskq.tasks AS c
            WHERE c.status = 'PENDING' AND c.isolate
              AND c.queue = p_queue
              AND c.runnable_at <= now()
              AND (c.task_type = ANY(p_task_types)
                   OR (c.concurrency_key IS NULL AND c.task_type = ANY(p_unkeyed_types)))
              AND c.id <> ALL(p_picked)
              AND (p_probe OR NOT EXISTS (
                      SELECT 1 FROM taskq.breakers AS b
                      WHERE b.task_type = c.task_type AND b.state <> 'CLOSED'))
              AND (c.ordering_key IS NULL OR NOT EXISTS (
                      SELECT 1 FROM taskq.tasks AS earlier
                      WHERE earlier.ordering_key = c.ordering_key
                        AND earlier.id < c.id
                        AND earlier.status IN ('PENDING', 'PROCESSING', 'FAILED')))
            ORDER BY c.priority DESC, c.runnable_at, c.id
            LIMIT p_n
            FOR UPDATE OF c SKIP LOCKED) AS s;
    ELSIF p_status = 'FAILED' THEN
        SELECT coalesce(array_agg(s.id), '{}') INTO v_ids FROM (
            SELECT c.id FROM taskq.tasks AS c
            WHERE c.status = 'FAILED' AND NOT c.isolate
              AND c.queue = p_queue
              AND c.runnable_at <= now()
              AND (c.task_type = ANY(p_task_types)
                   OR (c.concurrency_key IS NULL AND c.task_type = ANY(p_unkeyed_types)))
              AND c.id <> ALL(p_picked)
              AND (p_probe OR NOT EXISTS (
                      SELECT 1 FROM taskq.breakers AS b
                      WHERE b.task_type = c.task_type AND b.state <> 'CLOSED'))
              AND (c.ordering_key IS NULL OR NOT EXISTS (
                      SELECT 1 FROM taskq.tasks AS earlier
                      WHERE earlier.ordering_key = c.ordering_key
                        AND earlier.id < c.id
                        AND earlier.status IN ('PENDING', 'PROCESSING', 'FAILED')))
            ORDER BY c.priority DESC, c.runnable_at, c.id
            LIMIT p_n
            FOR UPDATE OF c SKIP LOCKED) AS s;
    ELSE
        SELECT coalesce(array_agg(s.id), '{}') INTO v_ids FROM (
            SELECT c.id FROM taskq.tasks AS c
            WHERE c.status = 'PENDING' AND NOT c.isolate
              AND c.queue = p_queue
              AND c.runnable_at <= now()
              AND (c.task_type = ANY(p_task_types)
                   OR (c.concurrency_key IS NULL AND c.task_type = ANY(p_unkeyed_types)))
              AND c.id <> ALL(p_picked)
              AND (p_probe OR NOT EXISTS (
                      SELECT 1 FROM taskq.breakers AS b
                      WHERE b.task_type = c.task_type AND b.state <> 'CLOSED'))
              AND (c.ordering_key IS NULL OR NOT EXISTS (
                      SELECT 1 FROM taskq.tasks AS earlier
                      WHERE earlier.ordering_key = c.ordering_key
                        AND earlier.id < c.id
                        AND earlier.status IN ('PENDING', 'PROCESSING', 'FAILED')))
            ORDER BY c.priority DESC, c.runnable_at, c.id
            LIMIT p_n
            FOR UPDATE OF c SKIP LOCKED) AS s;
    END IF;
    RETURN v_ids;
END
$$;

CREATE FUNCTION taskq.claim_key_v2(
    p_queue text, p_task_type text, p_key text, p_retries_only boolean, p_probe boolean,
    p_picked bigint[], p_isolated boolean
) RETURNS bigint
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_id bigint;
BEGIN
    SELECT c.id INTO v_id FROM taskq.tasks AS c
    WHERE c.concurrency_key IS NOT NULL
      AND c.status IN ('PENDING', 'FAILED')
      AND c.queue = p_queue
      AND c.task_type = p_task_type
      AND c.concurrency_key = p_key
      AND c.runnable_at <= now()
      AND (NOT p_retries_only OR c.status = 'FAILED')
      AND c.id <> ALL(p_picked)
      AND c.isolate = p_isolated
      AND (p_probe OR NOT EXISTS (
              SELECT 1 FROM taskq.breakers AS b
              WHERE b.task_type = c.task_type AND b.state <> 'CLOSED'))
      AND (c.ordering_key IS NULL OR NOT EXISTS (
              SELECT 1 FROM taskq.tasks AS earlier
              WHERE earlier.ordering_key = c.ordering_key
                AND earlier.id < c.id
                AND earlier.status IN ('PENDING', 'PROCESSING', 'FAILED')))
    ORDER BY c.priority DESC, c.runnable_at, c.id
    LIMIT 1
    FOR UPDATE OF c SKIP LOCKED;
    RETURN v_id;
END
$$;

CREATE FUNCTION taskq.claim_batch_v3(
    p_queue            text,
    p_task_types       text[],
    p_max_retry_counts integer[],
    p_timeouts         integer[],
    p_limit            integer,
    p_worker_id        text,
    p_retries_only     boolean DEFAULT false,
    p_probe            boolean DEFAULT false,
    p_isolated         boolean DEFAULT false
) RETURNS TABLE (
    id bigint, task_type text, queue text, biz_id text, payload jsonb, priority smallint,
    retry_count integer, max_retry_count integer, timeout_seconds integer, effective_id uuid,
    trace_id text, created_at timestamptz, scheduled_at timestamptz, started_at timestamptz,
    context jsonb, parent_id bigint, ordering_key text, ready_at timestamptz, capped boolean,
    traceparent text, held_for double precision
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_share     real;
    v_lt        text[] := '{}';              -- the limited types, in lock order
    v_la        integer[] := '{}';           -- allowance left, per limited type
    v_used      integer[] := '{}';           -- rows taken, per limited type
    v_rate      double precision[] := '{}';
    v_tok       double precision[] := '{}';  -- tokens after the refill
    v_clk       timestamptz[] := '{}';
    v_probe     boolean[] := '{}';           -- out of tokens only: scan once to learn of work
    v_hold      boolean[] := '{}';           -- due work waits for a token
    v_keyed     text[] := '{}';              -- fair or per-key types (their unkeyed rows scan)
    v_capped    text[] := '{}';
    v_exhausted text[] := '{}';
    v_plain     text[];
    v_unkeyed   text[];
    v_picked    bigint[] := '{}';
    v_dropped   bigint[] := '{}';
    v_got       bigint[];
    v_left      integer := CASE WHEN p_isolated THEN least(p_limit, 1) ELSE p_limit END;
    v_allow     integer;
    v_cap_allow integer;
    v_running   integer;
    v_keys      text[];
    v_key       text;
    v_t         text;
    v_runs      jsonb;
    v_taken     jsonb;
    v_one       bigint;
    v_progress  boolean;
    v_surplus   boolean;
    v_last_key  text;
    v_held      double precision;
    i           integer := 0;
    j           integer;
    v_lims      taskq.flow_limits[];
    v_counts    jsonb;
    lim         taskq.flow_limits;
    got         record;
BEGIN
    IF p_limit <= 0 THEN
        RETURN;
    END IF;
    SELECT coalesce((SELECT q.retry_share FROM taskq.queue_limits AS q
                     WHERE q.queue = p_queue), 0.5) INTO v_share;

    -- Lock every limits row first (in task_type order), then count what runs of the capped
    -- ones in one pass over the PROCESSING rows: the counts see every claim committed before
    -- the locks were granted.
    v_lims := ARRAY(
        SELECT l FROM taskq.flow_limits AS l
        WHERE l.task_type = ANY(p_task_types)
        ORDER BY l.task_type
        FOR UPDATE);
    IF cardinality(v_lims) = 0 THEN
        v_counts := '{}';
    ELSE
        SELECT coalesce(jsonb_object_agg(g.k, g.n), '{}') INTO v_counts FROM (
            SELECT r.task_type AS k, count(*) AS n FROM taskq.tasks AS r
            WHERE r.status = 'PROCESSING'
              AND r.task_type = ANY(ARRAY(SELECT (x).task_type FROM unnest(v_lims) AS x
                                          WHERE (x).max_running IS NOT NULL))
            GROUP BY r.task_type) AS g;
    END IF;
    FOREACH lim IN ARRAY v_lims
    LOOP
        i := i + 1;
        v_lt[i] := lim.task_type;
        v_used[i] := 0;
        v_rate[i] := lim.rate;
        v_hold[i] := false;
        v_cap_allow := v_left;
        IF lim.max_running IS NOT NULL THEN
            v_capped := v_capped || lim.task_type;
            v_running := coalesce((v_counts ->> lim.task_type)::integer, 0);
            v_cap_allow := least(v_cap_allow, lim.max_running - v_running);
        END IF;
        v_allow := v_cap_allow;
        IF lim.rate IS NOT NULL THEN
            v_clk[i] := clock_timestamp();
            v_tok[i] := least(lim.burst, lim.tokens + lim.rate
                              * greatest(0, extract(epoch FROM v_clk[i] - lim.refilled_at)));
            v_allow := least(v_allow, floor(v_tok[i])::integer);
        END IF;
        v_allow := greatest(v_allow, 0);
        v_probe[i] := lim.rate IS NOT NULL AND v_allow = 0 AND v_cap_allow > 0;
        IF lim.max_running_per_key IS NOT NULL OR lim.fair THEN
            v_keyed := v_keyed || lim.task_type;
        END IF;
        IF v_allow > 0 AND (lim.max_running_per_key IS NOT NULL OR lim.fair) THEN
            IF lim.max_running_per_key IS NOT NULL THEN
                v_capped := v_capped || lim.task_type;
                SELECT coalesce(jsonb_object_agg(g.k, g.n), '{}') INTO v_runs FROM (
                    SELECT r.concurrency_key AS k, count(*) AS n FROM taskq.tasks AS r
                    WHERE r.status = 'PROCESSING' AND r.task_type = lim.task_type
                      AND r.concurrency_key IS NOT NULL
                    GROUP BY r.concurrency_key) AS g;
            END IF;
            -- Keys after the last one served, then from the start.
            v_keys := taskq.claim_keys_v1(p_queue, lim.task_type, lim.fair_cursor, v_allow);
            IF cardinality(v_keys) < v_allow AND lim.fair_cursor IS NOT NULL THEN
                v_keys := v_keys || ARRAY(
                    SELECT k FROM unnest(taskq.claim_keys_v1(
                        p_queue, lim.task_type, NULL, v_allow - cardinality(v_keys))) AS k
                    WHERE k <= lim.fair_cursor);
            END IF;
            v_got := '{}';
            v_taken := '{}';
            v_last_key := lim.fair_cursor;
            LOOP
                v_progress := false;
                FOREACH v_key IN ARRAY v_keys LOOP
                    EXIT WHEN cardinality(v_got) >= v_allow;
                    IF lim.max_running_per_key IS NOT NULL
                       AND coalesce((v_runs ->> v_key)::integer, 0)
                           + coalesce((v_taken ->> v_key)::integer, 0)
                           >= lim.max_running_per_key THEN
                        CONTINUE;
                    END IF;
                    v_one := taskq.claim_key_v2(p_queue, lim.task_type, v_key, p_retries_only,
                                                p_probe, v_picked || v_got, p_isolated);
                    CONTINUE WHEN v_one IS NULL;
                    v_got := v_got || v_one;
                    v_progress := true;
                    v_last_key := v_key;
                    v_taken := v_taken || jsonb_build_object(
                        v_key, coalesce((v_taken ->> v_key)::integer, 0) + 1);
                END LOOP;
                EXIT WHEN NOT v_progress OR cardinality(v_got) >= v_allow;
            END LOOP;
            IF v_last_key IS DISTINCT FROM lim.fair_cursor THEN
                UPDATE taskq.flow_limits AS l SET fair_cursor = v_last_key
                WHERE l.task_type = lim.task_type;
            END IF;
            v_picked := v_picked || v_got;
            v_used[i] := cardinality(v_got);
            v_left := v_left - cardinality(v_got);
            v_allow := v_allow - cardinality(v_got);
        END IF;
        v_la[i] := v_allow;
    END LOOP;

    LOOP
        EXIT WHEN v_left <= 0;
        IF i = 0 THEN
            v_plain := p_task_types;
            v_unkeyed := '{}';
        ELSE
            v_plain := '{}';
            v_unkeyed := '{}';
            FOREACH v_t IN ARRAY p_task_types LOOP
                CONTINUE WHEN v_t = ANY(v_exhausted);
                j := array_position(v_lt, v_t);
                IF j IS NULL THEN
                    v_plain := v_plain || v_t;
                ELSIF v_la[j] > 0 OR v_probe[j] THEN
                    IF v_t = ANY(v_keyed) THEN
                        v_unkeyed := v_unkeyed || v_t;
                    ELSE
                        v_plain := v_plain || v_t;
                    END IF;
                END IF;
            END LOOP;
            EXIT WHEN cardinality(v_plain) + cardinality(v_unkeyed) = 0;
        END IF;
        v_got := taskq.claim_lanes_v2(p_queue, v_plain, v_unkeyed, v_left, v_share,
                                      p_retries_only, p_probe, v_picked || v_dropped,
                                      p_isolated);
        IF i = 0 THEN
            v_picked := v_picked || v_got;
            EXIT;
        END IF;
        EXIT WHEN cardinality(v_got) = 0;
        v_surplus := false;
        FOR got IN
            SELECT o.id AS tid, o.task_type AS ttype
            FROM unnest(v_got) WITH ORDINALITY AS g(gid, n)
            JOIN taskq.tasks AS o ON o.id = g.gid
            ORDER BY g.n
        LOOP
            j := array_position(v_lt, got.ttype);
            IF j IS NULL THEN
                v_picked := v_picked || got.tid;
                v_left := v_left - 1;
            ELSIF v_la[j] > 0 THEN
                v_picked := v_picked || got.tid;
                v_left := v_left - 1;
                v_la[j] := v_la[j] - 1;
                v_used[j] := v_used[j] + 1;
            ELSE
                v_dropped := v_dropped || got.tid;
                v_surplus := true;
                v_exhausted := v_exhausted || got.ttype;
                IF v_rate[j] IS NOT NULL AND v_tok[j] - v_used[j] < 1 THEN
                    v_hold[j] := true;
                END IF;
            END IF;
        END LOOP;
        EXIT WHEN NOT v_surplus;
    END LOOP;

    -- Spend the tokens; say when the next one comes where work waits (or may wait) for it.
    FOR j IN 1 .. i LOOP
        CONTINUE WHEN v_rate[j] IS NULL;
        IF v_used[j] > 0 THEN
            UPDATE taskq.flow_limits AS l
            SET tokens = v_tok[j] - v_used[j], refilled_at = v_clk[j]
            WHERE l.task_type = v_lt[j];
        END IF;
        IF v_tok[j] - v_used[j] < 1 AND (v_hold[j] OR v_used[j] > 0) THEN
            v_held := least(coalesce(v_held, 1e9), (1 - (v_tok[j] - v_used[j])) / v_rate[j]);
        END IF;
    END LOOP;

    IF cardinality(v_picked) > 0 THEN
        RETURN QUERY
        UPDATE taskq.tasks AS t
        SET status = 'PROCESSING',
            effective_id = gen_random_uuid(),
            worker_id = p_worker_id,
            started_at = now(),
            finished_at = NULL,
            updated_at = now(),
            max_retry_count = coalesce(t.max_retry_count, handler.max_retry_count),
            timeout_seconds = coalesce(t.timeout_seconds, handler.timeout_seconds)
        FROM (SELECT p.id AS pid, o.runnable_at AS ready
              FROM unnest(v_picked) AS p(id)
              JOIN taskq.tasks AS o ON o.id = p.id) AS picked,
             unnest(p_task_types, p_max_retry_counts, p_timeouts)
                 AS handler(task_type, max_retry_count, timeout_seconds)
        WHERE t.id = picked.pid
          AND handler.task_type = t.task_type
        RETURNING t.id, t.task_type, t.queue, t.biz_id, t.payload, t.priority, t.retry_count,
                  t.max_retry_count, t.timeout_seconds, t.effective_id, t.trace_id,
                  t.created_at, t.scheduled_at, t.started_at, t.context, t.parent_id,
                  t.ordering_key, picked.ready, t.task_type = ANY(v_capped), t.traceparent,
                  NULL::double precision;
    END IF;
    IF v_held IS NOT NULL THEN
        RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::jsonb,
            NULL::smallint, NULL::integer, NULL::integer, NULL::integer, NULL::uuid, NULL::text,
            NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::jsonb, NULL::bigint,
            NULL::text, NULL::timestamptz, NULL::boolean, NULL::text, v_held;
    END IF;
END
$$;
