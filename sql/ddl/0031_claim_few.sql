-- taskq 0031: a claim after a short round reads the few runnable rows once.
--
-- A worker's claimer knows when its last claim came back short: the queue was drained then,
-- and the next claim (woken by NOTIFY a moment after one producer's commit) usually finds one
-- row, or a handful. taskq.claim_batch_v3 answers that claim through three more functions and
-- about eight statements (the queue's retry share, the limits rows, each lane's scan, the
-- UPDATE): at idle 0.5-0.6 ms of the backend's time against 0.4 ms for the UPDATE alone
-- (PostgreSQL 15, 2 vCPU; commit -> handler start was 1.9 ms at p50, the claim's round trip
-- 1.4 ms of it).
--
-- taskq.claim_few_v1 takes the same arguments and returns the same rows as claim_batch_v3.
-- Where the types have no flow limits, it locks the runnable rows of the types in one scan of
-- the runnable index, at most p_limit + 1 of them, and when it found no more than p_limit it
-- claims exactly those. That is what claim_batch_v3 claims then too: with every runnable row
-- fitting in the batch, the lanes (retry share), their order and their floors choose nothing;
-- the same rows are left out (another claimer's, isolate rows, a breaker that is not CLOSED, a
-- later row of an ordering key held by an earlier one, rows not yet due). Otherwise (more rows
-- than p_limit, flow limits on a type, a breaker probe, the isolator's claim) it returns what
-- claim_batch_v3 returns, in the same statement: the rows it locked stay locked to this
-- transaction, which claim_batch_v3's own SKIP LOCKED scans do not skip.
--
-- The rows left out are written the same way as in claim_batch_v3 (sql/ddl/0028: ready_at
-- read from the row as it was; 0030: the attempt's token). capped is false and held_for NULL:
-- both come only from flow limits.
CREATE FUNCTION taskq.claim_few_v1(
    p_queue text, p_task_types text[], p_max_retry_counts integer[], p_timeouts integer[],
    p_limit integer, p_worker_id text, p_retries_only boolean DEFAULT false,
    p_probe boolean DEFAULT false, p_isolated boolean DEFAULT false)
RETURNS TABLE(id bigint, task_type text, queue text, biz_id text, payload jsonb,
              priority smallint, retry_count integer, max_retry_count integer,
              timeout_seconds integer, effective_id uuid, trace_id text,
              created_at timestamptz, scheduled_at timestamptz, started_at timestamptz,
              context jsonb, parent_id bigint, ordering_key text, ready_at timestamptz,
              capped boolean, traceparent text, held_for double precision)
LANGUAGE plpgsql
SET plan_cache_mode TO 'force_generic_plan'
SET jit TO 'off'
SET enable_seqscan TO 'off'
AS $function$
#variable_conflict use_column
DECLARE
    v_ids bigint[];
BEGIN
    IF NOT (p_probe OR p_isolated OR p_limit <= 0
            OR EXISTS (SELECT 1 FROM taskq.flow_limits AS l
                       WHERE l.task_type = ANY(p_task_types))) THEN
        -- Type by type (each scan keeps to its type's part of the runnable index: with
        -- task_type = ANY(...) the generic plan read the whole queue's part), a type whose
        -- breaker is not CLOSED left out before its rows are read.
        v_ids := ARRAY(
            SELECT f.id
            FROM unnest(p_task_types) AS w(task_type)
            CROSS JOIN LATERAL (
                SELECT c.id FROM taskq.tasks AS c
                WHERE c.status IN ('PENDING', 'FAILED') AND NOT c.isolate
                  AND c.queue = p_queue AND c.task_type = w.task_type
                  AND (c.status = 'FAILED' OR NOT p_retries_only)
                  AND c.runnable_at <= now()
                  AND (c.ordering_key IS NULL OR NOT EXISTS (
                          SELECT 1 FROM taskq.tasks AS earlier
                          WHERE earlier.ordering_key = c.ordering_key
                            AND earlier.id < c.id
                            AND earlier.status IN ('PENDING', 'PROCESSING', 'FAILED')))
                LIMIT p_limit + 1
                FOR UPDATE OF c SKIP LOCKED) AS f
            WHERE NOT EXISTS (SELECT 1 FROM taskq.breakers AS b
                              WHERE b.task_type = w.task_type AND b.state <> 'CLOSED')
            LIMIT p_limit + 1);
        IF cardinality(v_ids) <= p_limit THEN
            RETURN QUERY
            UPDATE taskq.tasks AS t
            SET status = 'PROCESSING',
                effective_id = ((SELECT left(gen_random_uuid()::text, 24))
                                || lpad(to_hex(t.id & 281474976710655), 12, '0'))::uuid,
                worker_id = p_worker_id,
                started_at = now(),
                finished_at = NULL,
                updated_at = now(),
                max_retry_count = coalesce(t.max_retry_count, handler.max_retry_count),
                timeout_seconds = coalesce(t.timeout_seconds, handler.timeout_seconds)
            FROM unnest(p_task_types, p_max_retry_counts, p_timeouts)
                     AS handler(task_type, max_retry_count, timeout_seconds)
            WHERE t.id = ANY(v_ids)
              AND handler.task_type = t.task_type
            RETURNING t.id, t.task_type, t.queue, t.biz_id, t.payload, t.priority,
                      t.retry_count, t.max_retry_count, t.timeout_seconds, t.effective_id,
                      t.trace_id, t.created_at, t.scheduled_at, t.started_at, t.context,
                      t.parent_id, t.ordering_key,
                      CASE WHEN t.next_retry_time IS NULL THEN t.scheduled_at
                           ELSE (SELECT o.runnable_at FROM taskq.tasks AS o WHERE o.id = t.id)
                      END, false, t.traceparent, NULL::double precision;
            RETURN;
        END IF;
    END IF;
    RETURN QUERY SELECT * FROM taskq.claim_batch_v3(
        p_queue, p_task_types, p_max_retry_counts, p_timeouts, p_limit, p_worker_id,
        p_retries_only, p_probe, p_isolated);
END
$function$;
