-- taskq 0013: flow control. Cluster-wide running caps, rate limits, per-key caps and fair share
-- per task type; a retry lane per queue. The claim becomes a function (taskq.claim_batch_v1)
-- because a capped or rate-limited claim needs per-claim state: it locks the type's limits row,
-- counts what runs, refills the token bucket, claims, and spends tokens, all in the claim's own
-- transaction, so no two workers can both take the last slot or the last token.

-- public: an optional key (a tenant, a downstream account) for per-key caps and fair share.
ALTER TABLE taskq.tasks
    ADD COLUMN concurrency_key text
        CONSTRAINT tasks_concurrency_key_check CHECK (length(concurrency_key) BETWEEN 1 AND 200);

-- The retry lane scans only FAILED rows. An entry is added only when an attempt fails, so the
-- enqueue and the claim of fresh work pay nothing for it.
CREATE INDEX tasks_retry_idx ON taskq.tasks (queue, priority DESC, runnable_at, id)
    WHERE status = 'FAILED';

-- Keyed rows only: the claim walks the distinct keys of a fair or per-key-capped type (a loose
-- index scan) and takes the head of each key. Unkeyed rows are not in it at all.
CREATE INDEX tasks_concurrency_idx
    ON taskq.tasks (queue, task_type, concurrency_key, priority DESC, runnable_at, id)
    WHERE concurrency_key IS NOT NULL AND status IN ('PENDING', 'FAILED');

-- One row per task type that has any limit. source = 'code' rows are written by the workers
-- from @app.task(...); an operator's `taskq limits set` makes the row 'operator', and workers
-- then leave it alone until `taskq limits reset`. The token bucket (tokens, refilled_at) and
-- the fair-share cursor (the last key served) are updated by the claim under the row lock.
CREATE TABLE taskq.flow_limits (
    task_type           text             PRIMARY KEY,
    max_running         integer          CHECK (max_running > 0),
    max_running_per_key integer          CHECK (max_running_per_key > 0),
    rate                double precision CHECK (rate > 0),       -- attempt starts per second
    rate_text           text,                                   -- as given, e.g. '20/s'
    burst               double precision CHECK (burst >= 1),
    fair                boolean          NOT NULL DEFAULT false,
    tokens              double precision NOT NULL DEFAULT 0,
    refilled_at         timestamptz      NOT NULL DEFAULT now(),
    fair_cursor         text,
    source              text             NOT NULL DEFAULT 'code'
                                         CHECK (source IN ('code', 'operator')),
    changed_by          text             NOT NULL DEFAULT 'taskq',
    changed_at          timestamptz      NOT NULL DEFAULT now(),
    CONSTRAINT flow_limits_rate_burst_check CHECK ((rate IS NULL) = (burst IS NULL))
);

-- Per queue: the share of a claim that due retries may take while fresh work waits (default
-- 0.5 when the queue has no row). Fresh work takes the rest, and either lane's unused share
-- goes to the other, so neither starves.
CREATE TABLE taskq.queue_limits (
    queue       text        PRIMARY KEY,
    retry_share real        NOT NULL CHECK (retry_share >= 0 AND retry_share <= 1),
    changed_by  text        NOT NULL,
    changed_at  timestamptz NOT NULL DEFAULT now()
);

-- The SQL API (0009_edges's) grows concurrency_key.
DROP FUNCTION taskq.enqueue(text, jsonb, text, text, integer, timestamptz, interval, integer,
                            integer, text, text, text, bigint);

CREATE FUNCTION taskq.enqueue(
    task_type       text,
    payload         jsonb       DEFAULT '{}',
    queue           text        DEFAULT NULL,  -- NULL: the type's registered queue, else 'default'
    biz_id          text        DEFAULT NULL,
    priority        integer     DEFAULT 0,
    scheduled_at    timestamptz DEFAULT NULL,
    delay           interval    DEFAULT NULL,
    max_retry_count integer     DEFAULT NULL,  -- NULL: the type's registered setting
    timeout_seconds integer     DEFAULT NULL,  -- NULL: the type's registered setting
    trace_id        text        DEFAULT NULL,
    unique_key      text        DEFAULT NULL,
    ordering_key    text        DEFAULT NULL,
    parent_id       bigint      DEFAULT NULL,
    concurrency_key text        DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
BEGIN
    INSERT INTO taskq.tasks (task_type, payload, queue, biz_id, priority, scheduled_at,
                             max_retry_count, timeout_seconds, trace_id, unique_key,
                             ordering_key, parent_id, concurrency_key)
    VALUES (enqueue.task_type,
            coalesce(enqueue.payload, '{}'),
            enqueue.queue,
            enqueue.biz_id,
            enqueue.priority,
            coalesce(enqueue.scheduled_at, now()) + coalesce(enqueue.delay, interval '0'),
            enqueue.max_retry_count,
            enqueue.timeout_seconds,
            coalesce(enqueue.trace_id, replace(gen_random_uuid()::text, '-', '')),
            enqueue.unique_key,
            enqueue.ordering_key,
            enqueue.parent_id,
            enqueue.concurrency_key)
    ON CONFLICT (task_type, unique_key)
        WHERE unique_key IS NOT NULL AND status IN ('PENDING', 'PROCESSING', 'FAILED')
        DO NOTHING
    RETURNING id INTO new_id;
    IF new_id IS NULL THEN
        SELECT t.id INTO new_id FROM taskq.tasks AS t
        WHERE t.task_type = enqueue.task_type AND t.unique_key = enqueue.unique_key
          AND t.status IN ('PENDING', 'PROCESSING', 'FAILED');
    END IF;
    RETURN new_id;
END
$$;

-- Pick (lock) up to n runnable rows of these types (and the unkeyed rows of p_unkeyed_types)
-- in two lanes: due retries may take about share * n (rounded at random, so a one-slot claim
-- alternates fairly), fresh rows the rest, and whatever one lane leaves unused goes to the
-- other. Rows in p_picked (already locked by this transaction, which SKIP LOCKED does not skip)
-- are left out. The two scans use two partial indexes: tasks_retry_idx (FAILED) and
-- tasks_runnable_idx filtered to PENDING. Without any due retry the first is one empty probe.
CREATE FUNCTION taskq.claim_lanes_v1(
    p_queue text, p_task_types text[], p_unkeyed_types text[], p_n integer, p_share real,
    p_retries_only boolean, p_probe boolean, p_picked bigint[]
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
    v_retries := taskq.claim_scan_v1(p_queue, p_task_types, p_unkeyed_types, 'FAILED',
                                     v_retry_quota, p_probe, p_picked);
    IF NOT p_retries_only THEN
        v_fresh := taskq.claim_scan_v1(p_queue, p_task_types, p_unkeyed_types, 'PENDING',
                                       p_n - cardinality(v_retries), p_probe, p_picked);
    END IF;
    IF cardinality(v_retries) = v_retry_quota
       AND cardinality(v_retries) + cardinality(v_fresh) < p_n THEN
        v_more := taskq.claim_scan_v1(p_queue, p_task_types, p_unkeyed_types, 'FAILED',
                                      p_n - cardinality(v_retries) - cardinality(v_fresh),
                                      p_probe, p_picked || v_retries);
    END IF;
    RETURN v_retries || v_fresh || v_more;
END
$$;

-- One lane's scan. Two statements, not one with a status parameter: each must name its status
-- as a constant for the planner to match its partial index in a generic plan.
CREATE FUNCTION taskq.claim_scan_v1(
    p_queue text, p_task_types text[], p_unkeyed_types text[], p_status text, p_n integer,
    p_probe boolean, p_picked bigint[]
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
    IF p_status = 'FAILED' THEN
        SELECT coalesce(array_agg(s.id), '{}') INTO v_ids FROM (
            SELECT c.id FROM taskq.tasks AS c
            WHERE c.status = 'FAILED'
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
            WHERE c.status = 'PENDING'
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

-- The head of one concurrency key of a type, both lanes (unkeyed rows go through the lanes).
CREATE FUNCTION taskq.claim_key_v1(
    p_queue text, p_task_type text, p_key text, p_retries_only boolean, p_probe boolean,
    p_picked bigint[]
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

-- Up to p_n distinct keys of a type with live rows, in key order after p_after (NULL: from the
-- start): a loose index scan on tasks_concurrency_idx, one probe per key, so a key with 100,000
-- rows costs what a key with one does.
CREATE FUNCTION taskq.claim_keys_v1(
    p_queue text, p_task_type text, p_after text, p_n integer
) RETURNS text[]
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN (
        WITH RECURSIVE k(key) AS (
            (SELECT c.concurrency_key FROM taskq.tasks AS c
             WHERE c.concurrency_key IS NOT NULL AND c.status IN ('PENDING', 'FAILED')
               AND c.queue = p_queue AND c.task_type = p_task_type
               AND c.concurrency_key > coalesce(p_after, '')
             ORDER BY c.concurrency_key LIMIT 1)
            UNION ALL
            SELECT (SELECT c.concurrency_key FROM taskq.tasks AS c
                    WHERE c.concurrency_key IS NOT NULL AND c.status IN ('PENDING', 'FAILED')
                      AND c.queue = p_queue AND c.task_type = p_task_type
                      AND c.concurrency_key > k.key
                    ORDER BY c.concurrency_key LIMIT 1)
            FROM k WHERE k.key IS NOT NULL
        )
        SELECT coalesce(array_agg(s.key), '{}')
        FROM (SELECT k.key FROM k WHERE k.key IS NOT NULL LIMIT p_n) AS s);
END
$$;

-- The claim. Each limited type among p_task_types is first settled under its limits row lock,
-- taken in task_type order (no deadlock): how many it may start now (its allowance):
--   max_running          its PROCESSING rows counted now; at most the difference.
--   rate / burst         a token bucket refilled on clock_timestamp() (read after the lock, so it
--                        only moves forward in lock order); at most the whole tokens.
--   max_running_per_key  and fair: its keyed rows are taken here, walking its keys round-robin
--                        from the last key served, one row per key per round, skipping keys at
--                        their cap; its unkeyed rows go with the others below.
-- Then ONE scan in two lanes (claim_lanes_v1) over the unlimited types and the limited types
-- with an allowance left, as without limits: it stops after the rows it needs, whatever the
-- types. A limited type that came back with more rows than its allowance keeps the first ones;
-- the rest stay PENDING (locked only until this claim commits) and the type drops out of a new
-- scan for the slots left. A type at its cap is not scanned at all; a type out of tokens is
-- scanned once, to learn whether work waits for its next token.
-- The count and the claim are serialised by the lock: a second claimer of the type waits for
-- the first to commit, and its count (a new snapshot per statement) then sees the first's rows.
-- Without any limits row this is one primary-key probe more than a plain claim.
-- Rows come back with `capped` (the type has a running cap: its completion should wake a
-- claimer) and, as one extra row with a NULL id, `held_for`: seconds until a rate-limited type
-- with due work gets its next token.
CREATE FUNCTION taskq.claim_batch_v1(
    p_queue            text,
    p_task_types       text[],
    p_max_retry_counts integer[],
    p_timeouts         integer[],
    p_limit            integer,
    p_worker_id        text,
    p_retries_only     boolean DEFAULT false,
    p_probe            boolean DEFAULT false
) RETURNS TABLE (
    id bigint, task_type text, queue text, biz_id text, payload jsonb, priority smallint,
    retry_count integer, max_retry_count integer, timeout_seconds integer, effective_id uuid,
    trace_id text, created_at timestamptz, scheduled_at timestamptz, started_at timestamptz,
    context jsonb, parent_id bigint, ordering_key text, ready_at timestamptz, capped boolean,
    held_for double precision
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
    v_left      integer := p_limit;
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
                    v_one := taskq.claim_key_v1(p_queue, lim.task_type, v_key, p_retries_only,
                                                p_probe, v_picked || v_got);
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
        v_got := taskq.claim_lanes_v1(p_queue, v_plain, v_unkeyed, v_left, v_share,
                                      p_retries_only, p_probe, v_picked || v_dropped);
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
                  t.ordering_key, picked.ready, t.task_type = ANY(v_capped),
                  NULL::double precision;
    END IF;
    IF v_held IS NOT NULL THEN
        RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::jsonb,
            NULL::smallint, NULL::integer, NULL::integer, NULL::integer, NULL::uuid, NULL::text,
            NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::jsonb, NULL::bigint,
            NULL::text, NULL::timestamptz, NULL::boolean, v_held;
    END IF;
END
$$;

-- Operator writes go through these definer functions, each with its audit row in the same
-- transaction. NULL arguments leave a setting as it is; clear_* remove one.
CREATE FUNCTION taskq.limits_set_v1(
    p_task_type           text,
    p_actor               text,
    p_max_running         integer          DEFAULT NULL,
    p_max_running_per_key integer          DEFAULT NULL,
    p_rate                double precision DEFAULT NULL,
    p_rate_text           text             DEFAULT NULL,
    p_burst               double precision DEFAULT NULL,
    p_fair                boolean          DEFAULT NULL,
    p_clear               text[]           DEFAULT '{}',
    p_note                text             DEFAULT NULL
) RETURNS SETOF taskq.flow_limits
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_before jsonb;
    v_row    taskq.flow_limits;
BEGIN
    SELECT to_jsonb(l) INTO v_before FROM taskq.flow_limits AS l
    WHERE l.task_type = p_task_type FOR UPDATE;
    INSERT INTO taskq.flow_limits AS l (task_type, source, changed_by)
    VALUES (p_task_type, 'operator', p_actor)
    ON CONFLICT (task_type) DO NOTHING;
    UPDATE taskq.flow_limits AS l SET
        max_running = CASE WHEN 'max_running' = ANY(p_clear) THEN NULL
                           ELSE coalesce(p_max_running, l.max_running) END,
        max_running_per_key = CASE WHEN 'max_running_per_key' = ANY(p_clear) THEN NULL
                                   ELSE coalesce(p_max_running_per_key,
                                                 l.max_running_per_key) END,
        rate = CASE WHEN 'rate' = ANY(p_clear) THEN NULL ELSE coalesce(p_rate, l.rate) END,
        rate_text = CASE WHEN 'rate' = ANY(p_clear) THEN NULL
                         ELSE coalesce(p_rate_text, l.rate_text) END,
        burst = CASE WHEN 'rate' = ANY(p_clear) THEN NULL
                     ELSE coalesce(p_burst,
                                   CASE WHEN p_rate IS NOT NULL THEN greatest(1, round(p_rate)) END,
                                   l.burst) END,
        fair = coalesce(p_fair, l.fair),
        source = 'operator',
        changed_by = p_actor,
        changed_at = now()
    WHERE l.task_type = p_task_type;
    -- A new or changed rate starts with a full bucket of the new burst, never more.
    UPDATE taskq.flow_limits AS l
    SET tokens = CASE WHEN p_rate IS NOT NULL OR p_burst IS NOT NULL
                          OR v_before IS NULL OR (v_before ->> 'rate') IS NULL
                      THEN coalesce(l.burst, 0)
                      ELSE least(l.tokens, coalesce(l.burst, 0)) END,
        refilled_at = clock_timestamp()
    WHERE l.task_type = p_task_type
    RETURNING * INTO v_row;
    INSERT INTO taskq.audit (actor, action, task_type, note, detail)
    VALUES (p_actor, 'limits_set', p_task_type, p_note,
            jsonb_build_object('before', v_before, 'after', to_jsonb(v_row)));
    PERFORM pg_notify('taskq_control', 'limits');
    RETURN NEXT v_row;
END
$$;

-- Forget the operator's settings: the workers write the code's limits again at their next
-- start (or none, and the type runs unlimited).
CREATE FUNCTION taskq.limits_reset_v1(p_task_type text, p_actor text, p_note text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_before jsonb;
BEGIN
    DELETE FROM taskq.flow_limits AS l WHERE l.task_type = p_task_type
    RETURNING to_jsonb(l) INTO v_before;
    IF v_before IS NULL THEN
        RETURN false;
    END IF;
    INSERT INTO taskq.audit (actor, action, task_type, note, detail)
    VALUES (p_actor, 'limits_reset', p_task_type, p_note, jsonb_build_object('before', v_before));
    PERFORM pg_notify('taskq_control', 'limits');
    RETURN true;
END
$$;

CREATE FUNCTION taskq.queue_limits_set_v1(
    p_queue text, p_actor text, p_retry_share real, p_note text DEFAULT NULL
) RETURNS real
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_before real;
BEGIN
    SELECT q.retry_share INTO v_before FROM taskq.queue_limits AS q WHERE q.queue = p_queue;
    INSERT INTO taskq.queue_limits AS q (queue, retry_share, changed_by)
    VALUES (p_queue, p_retry_share, p_actor)
    ON CONFLICT (queue) DO UPDATE
        SET retry_share = excluded.retry_share, changed_by = excluded.changed_by,
            changed_at = now();
    INSERT INTO taskq.audit (actor, action, note, detail)
    VALUES (p_actor, 'queue_limits_set', p_note,
            jsonb_build_object('queue', p_queue, 'before', v_before, 'after', p_retry_share));
    RETURN p_retry_share;
END
$$;

-- Definer functions run with the owner's rights: nobody but the roles granted them in
-- sql/roles.sql (taskq_operator) may call them.
REVOKE ALL ON FUNCTION taskq.limits_set_v1(text, text, integer, integer, double precision, text,
                                           double precision, boolean, text[], text) FROM PUBLIC;
REVOKE ALL ON FUNCTION taskq.limits_reset_v1(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION taskq.queue_limits_set_v1(text, text, real, text) FROM PUBLIC;
