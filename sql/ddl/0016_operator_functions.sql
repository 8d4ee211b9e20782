-- taskq 0016: least privilege, tightened. Every write an operator makes goes through a SECURITY
-- DEFINER function that writes its audit row in the same transaction, so sql/roles.sql can take
-- the operator's UPDATE and DELETE on taskq.tasks (and its direct writes on the dead-letter
-- records, pauses, breakers, the protection level and the audit trail) away. The worker's
-- exactly-once key and its retention go through functions too: the key only for the attempt
-- the caller holds, and retention audited.
--
-- Like 0012: each function pins its search_path, EXECUTE is revoked from PUBLIC and granted
-- per role in sql/roles.sql, and the audit actor is session_user (the login that really
-- called): the name a tool says it acts for (the OS user, "alice via dashboard") is kept in
-- detail.by.

-- The audit actor is the login, whoever writes the row: a BEFORE INSERT trigger stamps
-- session_user over what the statement said, and keeps a different name it was given in
-- detail.by (unless the writer put one there already). Definer functions do not change
-- session_user, so the row names the caller, never the functions' owner.
CREATE FUNCTION taskq.audit_stamp_v1() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    NEW.detail := coalesce(NEW.detail, '{}'::jsonb);
    IF NEW.actor IS NOT NULL AND NEW.actor IS DISTINCT FROM session_user::text
       AND NOT NEW.detail ? 'by' THEN
        NEW.detail := NEW.detail || jsonb_build_object('by', NEW.actor);
    END IF;
    NEW.actor := session_user;
    RETURN NEW;
END
$$;
REVOKE EXECUTE ON FUNCTION taskq.audit_stamp_v1() FROM PUBLIC;
CREATE TRIGGER audit_stamp BEFORE INSERT ON taskq.audit
    FOR EACH ROW EXECUTE FUNCTION taskq.audit_stamp_v1();

-- Lock the dead letters of a selection until the caller's transaction ends (the all-or-nothing
-- check before a requeue, discard or resolve, and --dry-run): SELECT ... FOR UPDATE needs the
-- UPDATE right the operator no longer has. Every filter is NULL when unused.
CREATE FUNCTION taskq.dlq_lock_v1(
    p_ids bigint[], p_task_type text, p_biz_id text, p_error text, p_older_than float8,
    p_newer_than float8, p_fingerprint text, p_state text
) RETURNS TABLE (id bigint, task_type text, queue text, biz_id text, retry_count integer,
                 finished_at timestamptz, last_error text, state text)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT t.id, t.task_type, t.queue, t.biz_id, t.retry_count, t.finished_at, t.last_error,
           coalesce(d.state, 'new')
    FROM taskq.tasks AS t
    LEFT JOIN taskq.dead_letters AS d
        ON d.task_id = t.id AND d.dead_at = coalesce(t.finished_at, t.created_at)
    WHERE t.status = 'DEAD_LETTER'
      AND (p_ids IS NULL OR t.id = ANY(p_ids))
      AND (p_task_type IS NULL OR t.task_type = p_task_type)
      AND (p_biz_id IS NULL OR t.biz_id = p_biz_id)
      AND (p_error IS NULL OR strpos(lower(coalesce(t.last_error, '')), lower(p_error)) > 0)
      AND (p_older_than IS NULL
           OR t.finished_at <= now() - make_interval(secs => p_older_than))
      AND (p_newer_than IS NULL
           OR t.finished_at >= now() - make_interval(secs => p_newer_than))
      AND (p_fingerprint IS NULL OR taskq.error_fingerprint_v1(t.last_error) = p_fingerprint)
      AND (p_state IS NULL OR coalesce(d.state, 'new') = p_state)
    ORDER BY t.id
    FOR UPDATE OF t
$$;
REVOKE EXECUTE ON FUNCTION taskq.dlq_lock_v1(bigint[], text, text, text, float8, float8, text,
                                             text) FROM PUBLIC;

-- DEAD_LETTER -> PENDING for at most p_batch dead letters of the selection (rows another
-- operator holds are skipped), the handling record resolved as 'requeued', an audit row per
-- task, a wake-up for the queues involved. p_reset starts the retry budget over. A live task
-- holding a dead letter's unique key fails the whole call (unique_violation).
CREATE FUNCTION taskq.dlq_requeue_v1(
    p_ids bigint[], p_task_type text, p_biz_id text, p_error text, p_older_than float8,
    p_newer_than float8, p_fingerprint text, p_state text,
    p_batch integer, p_reset boolean, p_note text DEFAULT NULL, p_by text DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH picked AS (
        SELECT t.id, coalesce(t.finished_at, t.created_at) AS dead_at
        FROM taskq.tasks AS t
        LEFT JOIN taskq.dead_letters AS d
            ON d.task_id = t.id AND d.dead_at = coalesce(t.finished_at, t.created_at)
        WHERE t.status = 'DEAD_LETTER'
          AND (p_ids IS NULL OR t.id = ANY(p_ids))
          AND (p_task_type IS NULL OR t.task_type = p_task_type)
          AND (p_biz_id IS NULL OR t.biz_id = p_biz_id)
          AND (p_error IS NULL
               OR strpos(lower(coalesce(t.last_error, '')), lower(p_error)) > 0)
          AND (p_older_than IS NULL
               OR t.finished_at <= now() - make_interval(secs => p_older_than))
          AND (p_newer_than IS NULL
               OR t.finished_at >= now() - make_interval(secs => p_newer_than))
          AND (p_fingerprint IS NULL
               OR taskq.error_fingerprint_v1(t.last_error) = p_fingerprint)
          AND (p_state IS NULL OR coalesce(d.state, 'new') = p_state)
        ORDER BY t.id
        LIMIT p_batch
        FOR UPDATE OF t SKIP LOCKED
    ), moved AS (
        UPDATE taskq.tasks AS t
        SET status = 'PENDING',
            retry_count = CASE WHEN p_reset THEN 0 ELSE t.retry_count END,
            scheduled_at = now(),
            next_retry_time = NULL,
            effective_id = NULL,
            worker_id = NULL,
            started_at = NULL,
            finished_at = NULL,
            abort_requested_at = NULL,
            updated_at = now()
        FROM picked AS p
        WHERE t.id = p.id AND t.status = 'DEAD_LETTER'
        RETURNING t.id, t.task_type, t.queue, t.retry_count, t.last_error, p.dead_at
    ), handled AS (
        INSERT INTO taskq.dead_letters AS d
            (task_id, dead_at, task_type, fingerprint, state, resolution, notes, resolved_by,
             resolved_at, updated_by)
        SELECT m.id, m.dead_at, m.task_type, taskq.error_fingerprint_v1(m.last_error),
               'resolved', 'requeued',
               CASE WHEN p_note IS NULL THEN '[]'::jsonb
                    ELSE jsonb_build_array(jsonb_build_object(
                        'at', now(), 'by', coalesce(p_by, session_user::text), 'note', p_note))
               END,
               coalesce(p_by, session_user::text), now(), coalesce(p_by, session_user::text)
        FROM moved AS m
        ON CONFLICT ON CONSTRAINT dead_letters_pkey DO UPDATE
            SET state = 'resolved', resolution = 'requeued', notes = d.notes || EXCLUDED.notes,
                resolved_by = EXCLUDED.resolved_by, resolved_at = now(),
                updated_by = EXCLUDED.updated_by, updated_at = now()
    ), audited AS (
        INSERT INTO taskq.audit (actor, action, task_id, task_type, note, detail)
        SELECT session_user, 'dlq_requeue', m.id, m.task_type, p_note,
               jsonb_build_object('by', p_by, 'reset_retries', p_reset,
                                  'retry_count', m.retry_count, 'last_error', m.last_error)
        FROM moved AS m
    ), woken AS (
        SELECT pg_notify('taskq_tasks', json_agg(DISTINCT m.queue)::text)
        FROM moved AS m HAVING count(*) > 0
    )
    SELECT m.id FROM moved AS m, (SELECT count(*) FROM woken) AS w ORDER BY m.id
$$;
REVOKE EXECUTE ON FUNCTION taskq.dlq_requeue_v1(bigint[], text, text, text, float8, float8, text,
                                                text, integer, boolean, text, text) FROM PUBLIC;

-- Delete at most p_batch dead letters of the selection for good; the audit row keeps a copy of
-- what was discarded, and the handling record says it was ignored.
CREATE FUNCTION taskq.dlq_discard_v1(
    p_ids bigint[], p_task_type text, p_biz_id text, p_error text, p_older_than float8,
    p_newer_than float8, p_fingerprint text, p_state text,
    p_batch integer, p_note text DEFAULT NULL, p_by text DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH picked AS (
        SELECT t.id
        FROM taskq.tasks AS t
        LEFT JOIN taskq.dead_letters AS d
            ON d.task_id = t.id AND d.dead_at = coalesce(t.finished_at, t.created_at)
        WHERE t.status = 'DEAD_LETTER'
          AND (p_ids IS NULL OR t.id = ANY(p_ids))
          AND (p_task_type IS NULL OR t.task_type = p_task_type)
          AND (p_biz_id IS NULL OR t.biz_id = p_biz_id)
          AND (p_error IS NULL
               OR strpos(lower(coalesce(t.last_error, '')), lower(p_error)) > 0)
          AND (p_older_than IS NULL
               OR t.finished_at <= now() - make_interval(secs => p_older_than))
          AND (p_newer_than IS NULL
               OR t.finished_at >= now() - make_interval(secs => p_newer_than))
          AND (p_fingerprint IS NULL
               OR taskq.error_fingerprint_v1(t.last_error) = p_fingerprint)
          AND (p_state IS NULL OR coalesce(d.state, 'new') = p_state)
        ORDER BY t.id
        LIMIT p_batch
        FOR UPDATE OF t SKIP LOCKED
    ), gone AS (
        DELETE FROM taskq.tasks AS t
        USING picked AS p
        WHERE t.id = p.id AND t.status = 'DEAD_LETTER'
        RETURNING t.id, t.task_type, t.queue, t.biz_id, t.payload, t.retry_count, t.last_error,
                  t.created_at, t.finished_at
    ), handled AS (
        INSERT INTO taskq.dead_letters AS d
            (task_id, dead_at, task_type, fingerprint, state, resolution, resolved_by,
             resolved_at, updated_by)
        SELECT g.id, coalesce(g.finished_at, g.created_at), g.task_type,
               taskq.error_fingerprint_v1(g.last_error), 'resolved', 'ignored',
               coalesce(p_by, session_user::text), now(), coalesce(p_by, session_user::text)
        FROM gone AS g
        ON CONFLICT ON CONSTRAINT dead_letters_pkey DO UPDATE
            SET state = 'resolved', resolution = 'ignored', resolved_by = EXCLUDED.resolved_by,
                resolved_at = now(), updated_by = EXCLUDED.updated_by, updated_at = now()
    ), audited AS (
        INSERT INTO taskq.audit (actor, action, task_id, task_type, note, detail)
        SELECT session_user, 'dlq_discard', g.id, g.task_type, p_note,
               jsonb_build_object('by', p_by, 'queue', g.queue, 'biz_id', g.biz_id,
                                  'payload', g.payload, 'retry_count', g.retry_count,
                                  'last_error', g.last_error, 'created_at', g.created_at)
        FROM gone AS g
    )
    SELECT g.id FROM gone AS g ORDER BY g.id
$$;
REVOKE EXECUTE ON FUNCTION taskq.dlq_discard_v1(bigint[], text, text, text, float8, float8, text,
                                                text, integer, text, text) FROM PUBLIC;

-- One dead letter back to PENDING with a corrected payload (the dashboard's edit-and-requeue).
-- The old payload is read under the row lock, so the audit row records exactly what was
-- replaced; a task that stopped being a dead letter meanwhile matches nothing (no row back).
CREATE FUNCTION taskq.dlq_requeue_edited_v1(
    p_id bigint, p_payload jsonb, p_reset boolean, p_note text DEFAULT NULL,
    p_by text DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH old AS (
        SELECT t.id, t.payload, coalesce(t.finished_at, t.created_at) AS dead_at
        FROM taskq.tasks AS t
        WHERE t.id = p_id AND t.status = 'DEAD_LETTER'
        FOR UPDATE
    ), moved AS (
        UPDATE taskq.tasks AS t
        SET payload = p_payload,
            status = 'PENDING',
            retry_count = CASE WHEN p_reset THEN 0 ELSE t.retry_count END,
            scheduled_at = now(),
            next_retry_time = NULL,
            effective_id = NULL,
            worker_id = NULL,
            started_at = NULL,
            finished_at = NULL,
            abort_requested_at = NULL,
            updated_at = now()
        FROM old
        WHERE t.id = old.id AND t.status = 'DEAD_LETTER'
        RETURNING t.id, t.task_type, t.queue, t.retry_count, t.last_error,
                  old.payload AS old_payload, t.payload AS new_payload, old.dead_at
    ), handled AS (
        INSERT INTO taskq.dead_letters AS d
            (task_id, dead_at, task_type, fingerprint, state, resolution, resolved_by,
             resolved_at, updated_by)
        SELECT m.id, m.dead_at, m.task_type, taskq.error_fingerprint_v1(m.last_error),
               'resolved', 'requeued', coalesce(p_by, session_user::text), now(),
               coalesce(p_by, session_user::text)
        FROM moved AS m
        ON CONFLICT ON CONSTRAINT dead_letters_pkey DO UPDATE
            SET state = 'resolved', resolution = 'requeued', resolved_by = EXCLUDED.resolved_by,
                resolved_at = now(), updated_by = EXCLUDED.updated_by, updated_at = now()
    ), audited AS (
        INSERT INTO taskq.audit (actor, action, task_id, task_type, note, detail)
        SELECT session_user, 'dlq_requeue_edited', m.id, m.task_type, p_note,
               jsonb_build_object('by', p_by, 'reset_retries', p_reset,
                                  'retry_count', m.retry_count, 'last_error', m.last_error,
                                  'old_payload', m.old_payload, 'new_payload', m.new_payload)
        FROM moved AS m
    ), woken AS (
        SELECT pg_notify('taskq_tasks', json_build_array(m.queue)::text) FROM moved AS m
    )
    SELECT m.id FROM moved AS m, (SELECT count(*) FROM woken) AS w
$$;
REVOKE EXECUTE ON FUNCTION taskq.dlq_requeue_edited_v1(bigint, jsonb, boolean, text, text)
    FROM PUBLIC;

-- The one summary row of a whole (batched, throttled or interrupted) requeue or discard run.
-- Only those two actions: the operator has no INSERT on the audit trail any more.
CREATE FUNCTION taskq.dlq_run_audit_v1(
    p_action text, p_note text, p_detail jsonb, p_by text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_action IS NULL OR p_action NOT IN ('dlq_requeue_run', 'dlq_discard_run') THEN
        RAISE EXCEPTION USING MESSAGE = 'not a dead-letter run: ' || coalesce(p_action, 'NULL'),
                              ERRCODE = '22023';
    END IF;
    INSERT INTO taskq.audit (actor, action, note, detail)
    VALUES (session_user, p_action, p_note,
            coalesce(p_detail, '{}'::jsonb) || jsonb_build_object('by', p_by));
END
$$;
REVOKE EXECUTE ON FUNCTION taskq.dlq_run_audit_v1(text, text, jsonb, text) FROM PUBLIC;

-- Pause consumption of a task type or a queue; true when it was not paused already.
CREATE FUNCTION taskq.pause_v1(
    p_kind text, p_name text, p_note text DEFAULT NULL, p_by text DEFAULT NULL
) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH paused AS (
        INSERT INTO taskq.pauses (kind, name, paused_by, note)
        VALUES (p_kind, p_name, coalesce(p_by, session_user::text), p_note)
        ON CONFLICT (kind, name) DO NOTHING
        RETURNING kind, name
    ), audited AS (
        INSERT INTO taskq.audit (actor, action, task_type, note, detail)
        SELECT session_user, 'pause', CASE WHEN p.kind = 'task_type' THEN p.name END, p_note,
               jsonb_build_object('by', p_by, 'kind', p.kind, 'name', p.name)
        FROM paused AS p
    ), told AS (
        SELECT pg_notify('taskq_control', 'pauses') FROM paused
    )
    SELECT count(*) > 0 FROM paused, (SELECT count(*) FROM told) AS t
$$;
REVOKE EXECUTE ON FUNCTION taskq.pause_v1(text, text, text, text) FROM PUBLIC;

-- Resume it; true when it was paused. The paused backlog is runnable again: workers are woken.
CREATE FUNCTION taskq.resume_v1(
    p_kind text, p_name text, p_note text DEFAULT NULL, p_by text DEFAULT NULL
) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH resumed AS (
        DELETE FROM taskq.pauses AS p WHERE p.kind = p_kind AND p.name = p_name
        RETURNING p.kind, p.name, p.paused_by, p.paused_at
    ), audited AS (
        INSERT INTO taskq.audit (actor, action, task_type, note, detail)
        SELECT session_user, 'resume', CASE WHEN r.kind = 'task_type' THEN r.name END, p_note,
               jsonb_build_object('by', p_by, 'kind', r.kind, 'name', r.name,
                                  'paused_by', r.paused_by, 'paused_at', r.paused_at)
        FROM resumed AS r
    ), told AS (
        SELECT pg_notify('taskq_control', 'pauses') FROM resumed
    ), woken AS (
        SELECT pg_notify('taskq_tasks',
                         CASE WHEN r.kind = 'queue' THEN json_build_array(r.name)::text
                              ELSE '*' END)
        FROM resumed AS r
    )
    SELECT count(*) > 0
    FROM resumed, (SELECT count(*) FROM told) AS t, (SELECT count(*) FROM woken) AS w
$$;
REVOKE EXECUTE ON FUNCTION taskq.resume_v1(text, text, text, text) FROM PUBLIC;

-- Close the breaker of one type (p_task_type) or of every type (NULL); the types closed.
CREATE FUNCTION taskq.breaker_reset_v1(
    p_task_type text, p_note text DEFAULT NULL, p_by text DEFAULT NULL
) RETURNS SETOF text
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH reset AS (
        UPDATE taskq.breakers AS b
        SET state = 'CLOSED', consecutive_failures = 0, changed_at = now(),
            reason = 'reset by ' || coalesce(p_by, session_user::text),
            probe_worker = NULL, probe_at = NULL
        WHERE p_task_type IS NULL OR b.task_type = p_task_type
        RETURNING b.task_type
    ), audited AS (
        INSERT INTO taskq.audit (actor, action, task_type, note, detail)
        SELECT session_user, 'breaker_reset', r.task_type, p_note,
               jsonb_build_object('by', p_by)
        FROM reset AS r
    ), told AS (
        SELECT pg_notify('taskq_control', 'breakers') FROM reset HAVING count(*) > 0
    )
    SELECT r.task_type FROM reset AS r, (SELECT count(*) FROM told) AS t ORDER BY 1
$$;
REVOKE EXECUTE ON FUNCTION taskq.breaker_reset_v1(text, text, text) FROM PUBLIC;

-- Set the protection level (the operator by hand, the workers' evaluator automatically): the
-- new level, or no row when nothing changed. Only p_force (an operator) lowers EMERGENCY (4).
CREATE FUNCTION taskq.protection_set_v1(
    p_level integer, p_reason text, p_force boolean, p_by text DEFAULT NULL
) RETURNS SETOF integer
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH changed AS (
        UPDATE taskq.protection AS p
        SET level = p_level, reason = p_reason, changed_at = now(),
            changed_by = coalesce(p_by, session_user::text)
        WHERE p.id = 1 AND p.level <> p_level AND (p.level < 4 OR p_force)
        RETURNING p.level
    ), audited AS (
        INSERT INTO taskq.audit (actor, action, note, detail)
        SELECT session_user, 'protection_level', p_reason,
               jsonb_build_object('by', p_by, 'level', c.level, 'forced', p_force)
        FROM changed AS c
    ), told AS (
        SELECT pg_notify('taskq_control', 'level') FROM changed
    )
    SELECT c.level FROM changed AS c, (SELECT count(*) FROM told) AS t
$$;
REVOKE EXECUTE ON FUNCTION taskq.protection_set_v1(integer, text, boolean, text) FROM PUBLIC;

-- Retention: delete one batch of finished rows of one final status (SUCCESS, CANCELLED or
-- DEAD_LETTER) older than p_older_than seconds, oldest first, rows in use skipped; the number
-- deleted. A batch that deleted anything leaves one audit row (how many, which status, the
-- id range), not one per task. Each status has its own statement, naming it literally, so the
-- planner uses that status's partial index on finished_at.
CREATE FUNCTION taskq.prune_batch_v1(p_status text, p_older_than float8, p_batch integer)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_cut timestamptz := now() - make_interval(secs => p_older_than);
    v_ids bigint[];
BEGIN
    IF p_status = 'SUCCESS' THEN
        WITH doomed AS (
            SELECT t.id FROM taskq.tasks AS t
            WHERE t.status = 'SUCCESS' AND t.finished_at < v_cut
            ORDER BY t.finished_at LIMIT p_batch FOR UPDATE SKIP LOCKED
        ), gone AS (
            DELETE FROM taskq.tasks AS t USING doomed WHERE t.id = doomed.id RETURNING t.id
        )
        SELECT array_agg(gone.id) INTO v_ids FROM gone;
    ELSIF p_status = 'CANCELLED' THEN
        WITH doomed AS (
            SELECT t.id FROM taskq.tasks AS t
            WHERE t.status = 'CANCELLED' AND t.finished_at < v_cut
            ORDER BY t.finished_at LIMIT p_batch FOR UPDATE SKIP LOCKED
        ), gone AS (
            DELETE FROM taskq.tasks AS t USING doomed WHERE t.id = doomed.id RETURNING t.id
        )
        SELECT array_agg(gone.id) INTO v_ids FROM gone;
    ELSIF p_status = 'DEAD_LETTER' THEN
        WITH doomed AS (
            SELECT t.id FROM taskq.tasks AS t
            WHERE t.status = 'DEAD_LETTER' AND t.finished_at < v_cut
            ORDER BY t.finished_at LIMIT p_batch FOR UPDATE SKIP LOCKED
        ), gone AS (
            DELETE FROM taskq.tasks AS t USING doomed WHERE t.id = doomed.id RETURNING t.id
        )
        SELECT array_agg(gone.id) INTO v_ids FROM gone;
    ELSE
        RAISE EXCEPTION USING
            MESSAGE = 'prune deletes SUCCESS, CANCELLED or DEAD_LETTER rows, not '
                      || coalesce(p_status, 'NULL'),
            ERRCODE = '22023';
    END IF;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    INSERT INTO taskq.audit (actor, action, note, detail)
    SELECT session_user, 'prune', NULL,
           jsonb_build_object('status', p_status, 'count', count(*),
                              'older_than_seconds', p_older_than,
                              'min_id', min(x.id), 'max_id', max(x.id))
    FROM unnest(v_ids) AS x(id);
    RETURN cardinality(v_ids);
END
$$;
REVOKE EXECUTE ON FUNCTION taskq.prune_batch_v1(text, float8, integer) FROM PUBLIC;

-- Exactly-once business effects: inside the handler's transaction, take the task's
-- (task_type, biz_id) key, for the attempt the caller holds only: the task must be running
-- with p_token as its current attempt's token, else the call is refused (SQLSTATE 55000) and
-- nothing is written. True when the key was taken now; false when another delivery of the
-- same business key already committed its effects (or holds the key right now: this call
-- waits for it to finish). The key is the task's own: the caller cannot name another.
CREATE FUNCTION taskq.record_business_key_v1(p_task_id bigint, p_token uuid)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_type text;
    v_biz  text;
    v_took bigint;
BEGIN
    SELECT t.task_type, t.biz_id INTO v_type, v_biz
    FROM taskq.tasks AS t
    WHERE t.id = p_task_id AND t.effective_id = p_token AND t.status = 'PROCESSING';
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            MESSAGE = 'task ' || coalesce(p_task_id::text, 'NULL')
                      || ': the caller does not hold this attempt; no key taken',
            ERRCODE = '55000';
    END IF;
    IF v_biz IS NULL THEN
        RAISE EXCEPTION USING MESSAGE = 'task ' || p_task_id || ' has no biz_id',
                              ERRCODE = '22023';
    END IF;
    INSERT INTO taskq.task_executed (task_type, biz_id, task_id)
    VALUES (v_type, v_biz, p_task_id)
    ON CONFLICT (task_type, biz_id) DO NOTHING
    RETURNING task_id INTO v_took;
    RETURN v_took IS NOT NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION taskq.record_business_key_v1(bigint, uuid) FROM PUBLIC;
