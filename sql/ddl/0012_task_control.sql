-- taskq 0012: task control. Cancel and abort, a handling record for every dead letter, error
-- fingerprints, business switches.
--
-- Operator writes go through SECURITY DEFINER functions: a caller needs no UPDATE right on the
-- tables, only EXECUTE on the function (granted per role in sql/roles.sql), and the function
-- writes the audit row itself with actor = session_user, the login that really called it (the
-- name a tool claims to act for is kept in detail.by). Each pins its search_path, and EXECUTE
-- is revoked from PUBLIC (the PostgreSQL default would let anyone run it).

-- CANCELLED is final, like SUCCESS and DEAD_LETTER. NOT VALID + VALIDATE: the check of the
-- existing rows does not hold a lock that blocks writers.
ALTER TABLE taskq.tasks DROP CONSTRAINT tasks_status_check;
ALTER TABLE taskq.tasks ADD CONSTRAINT tasks_status_check CHECK (
    status IN ('PENDING', 'PROCESSING', 'SUCCESS', 'FAILED', 'DEAD_LETTER', 'CANCELLED'))
    NOT VALID;
ALTER TABLE taskq.tasks VALIDATE CONSTRAINT tasks_status_check;

-- When an operator (or service code) asked a running attempt to stop. The owning worker hears
-- it by NOTIFY taskq_abort and, as a fallback, at its next heartbeat.
ALTER TABLE taskq.tasks ADD COLUMN abort_requested_at timestamptz;

-- Retention of cancelled rows goes by age, like SUCCESS.
CREATE INDEX tasks_cancelled_idx ON taskq.tasks (finished_at) WHERE status = 'CANCELLED';

-- The error fingerprint: the exception type, plus the first line of the message with quoted
-- values, UUIDs, hex ids and numbers masked, so 5,000 dead letters that differ only in the
-- order number they name fall into one group. IMMUTABLE: the same error text always gives the
-- same group.
CREATE FUNCTION taskq.error_signature_v1(err text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN strpos(line, ': ') > 0 THEN
            split_part(line, ': ', 1) || ': ' ||
            regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(
                substr(line, strpos(line, ': ') + 2),
                '''[^'']*''|"[^"]*"', '?', 'g'),
                '[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}',
                '<id>', 'g'),
                '\m0[xX][0-9a-fA-F]+\M', '<n>', 'g'),
                '\m[0-9a-fA-F]*[0-9][0-9a-fA-F]*\M', '<n>', 'g'),
                '[0-9]+', '<n>', 'g')
        ELSE line
    END
    FROM (SELECT left(btrim(split_part(coalesce(err, ''), E'\n', 1)), 500) AS line) AS first
$$;

CREATE FUNCTION taskq.error_fingerprint_v1(err text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT left(md5(taskq.error_signature_v1(err)), 12)
$$;

-- One handling record per dead-lettering: (task_id, dead_at) where dead_at is the task's
-- finished_at when it became a dead letter (its created_at for a row written as DEAD_LETTER
-- by hand without one). A dead letter with no record is "new"; a task that is requeued and
-- dies again gets a fresh record, while the old one stays as history (no foreign key:
-- discarding or pruning a task keeps the record of how it was handled).
CREATE TABLE taskq.dead_letters (
    task_id     bigint      NOT NULL,
    dead_at     timestamptz NOT NULL,
    task_type   text        NOT NULL,
    fingerprint text        NOT NULL,
    state       text        NOT NULL DEFAULT 'new'
                            CHECK (state IN ('new', 'investigating', 'resolved')),
    owner       text,
    resolution  text        CHECK (resolution IN ('requeued', 'fixed', 'ignored')),
    notes       jsonb       NOT NULL DEFAULT '[]',
    resolved_by text,
    resolved_at timestamptz,
    updated_by  text        NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, dead_at),
    CONSTRAINT dead_letters_resolved_check CHECK ((state = 'resolved') = (resolution IS NOT NULL))
);
CREATE INDEX dead_letters_resolved_at_idx ON taskq.dead_letters (resolved_at)
    WHERE resolved_at IS NOT NULL;

-- Business switches: the business's decision ("may SMS be sent at all?"), read by handler code
-- through a cache that NOTIFY taskq_control refreshes. Not a pause: a pause stops consumption.
CREATE TABLE taskq.switches (
    name       text        PRIMARY KEY,
    enabled    boolean     NOT NULL,
    changed_by text        NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT now(),
    note       text,
    CONSTRAINT switches_name_check CHECK (
        length(name) BETWEEN 1 AND 200 AND name !~ '[[:cntrl:]]' AND name = btrim(name))
);

-- Cancel tasks by id, all-or-nothing: PENDING/FAILED -> CANCELLED at once; PROCESSING gets an
-- abort request (the owning worker ends the attempt CANCELLED); CANCELLED is left as it is.
-- A SUCCESS or DEAD_LETTER task, or an unknown id, refuses the whole call with the status
-- named (SQLSTATE 55000 object_not_in_prerequisite_state; P0002 no_data_found when an id is
-- unknown). p_with_children adds the unfinished descendants (parent_id) of the
-- given tasks. Runs in the caller's transaction: a rollback undoes it, NOTIFY included.
CREATE FUNCTION taskq.cancel_v1(
    p_ids bigint[], p_with_children boolean DEFAULT false, p_note text DEFAULT NULL,
    p_by text DEFAULT NULL
) RETURNS TABLE (task_id bigint, status_from text, status_to text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    bad text;
BEGIN
    -- Lock the named rows first, in id order, so two cancels of the same tasks take turns.
    PERFORM 1 FROM taskq.tasks AS t WHERE t.id = ANY(p_ids) ORDER BY t.id FOR UPDATE;
    SELECT string_agg(x.id::text || ' (' || coalesce(t.status, 'no such task') || ')', ', '
                      ORDER BY x.id)
    INTO bad
    FROM unnest(p_ids) AS x(id) LEFT JOIN taskq.tasks AS t ON t.id = x.id
    WHERE t.id IS NULL OR t.status IN ('SUCCESS', 'DEAD_LETTER');
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION USING
            MESSAGE = 'cannot cancel, nothing changed: ' || bad,
            ERRCODE = CASE WHEN strpos(bad, 'no such task') > 0 THEN 'P0002' ELSE '55000' END;
    END IF;
    RETURN QUERY
    WITH RECURSIVE chosen(id) AS (
        SELECT DISTINCT x.id FROM unnest(p_ids) AS x(id)
        UNION
        SELECT c.id FROM taskq.tasks AS c JOIN chosen ON c.parent_id = chosen.id
        WHERE p_with_children AND c.status IN ('PENDING', 'PROCESSING', 'FAILED')
    ), locked AS (
        SELECT t.id, t.status, t.task_type, t.queue, t.worker_id
        FROM taskq.tasks AS t JOIN chosen ON t.id = chosen.id
        WHERE t.status IN ('PENDING', 'PROCESSING', 'FAILED')
        ORDER BY t.id
        FOR UPDATE OF t
    ), moved AS (
        UPDATE taskq.tasks AS t
        SET status = CASE WHEN l.status = 'PROCESSING' THEN 'PROCESSING' ELSE 'CANCELLED' END,
            finished_at = CASE WHEN l.status = 'PROCESSING' THEN t.finished_at ELSE now() END,
            next_retry_time = CASE WHEN l.status = 'PROCESSING' THEN t.next_retry_time END,
            abort_requested_at = coalesce(t.abort_requested_at, now()),
            updated_at = now()
        FROM locked AS l
        WHERE t.id = l.id
        RETURNING t.id, l.status AS status_from, t.status AS status_to, t.task_type,
                  t.queue, t.worker_id
    ), audited AS (
        INSERT INTO taskq.audit (actor, action, task_id, task_type, note, detail)
        SELECT session_user,
               CASE WHEN m.status_to = 'CANCELLED' THEN 'cancel' ELSE 'abort_requested' END,
               m.id, m.task_type, p_note,
               jsonb_build_object('by', p_by, 'status_from', m.status_from,
                                  'worker_id', m.worker_id)
        FROM moved AS m
    ), told AS (
        SELECT pg_notify('taskq_abort', json_build_object('id', m.id,
                                                          'worker_id', m.worker_id)::text)
        FROM moved AS m WHERE m.status_to = 'PROCESSING'
    )
    SELECT m.id, m.status_from, m.status_to
    FROM moved AS m, (SELECT count(*) FROM told) AS n
    UNION ALL
    -- Already cancelled (or finished on the way, as a child): nothing to do, said so.
    SELECT t.id, t.status, t.status
    FROM taskq.tasks AS t
    WHERE t.id = ANY(p_ids) AND t.status = 'CANCELLED'
      AND NOT EXISTS (SELECT 1 FROM locked AS l WHERE l.id = t.id)
    ORDER BY 1;
END
$$;
REVOKE EXECUTE ON FUNCTION taskq.cancel_v1(bigint[], boolean, text, text) FROM PUBLIC;

-- Set a dead letter's handling record, for the current dead-lettering of each task:
-- p_state 'investigating' (with p_owner: "assign") or 'resolved' (with p_resolution).
-- All-or-nothing like cancel: every id must be a dead letter right now.
CREATE FUNCTION taskq.dlq_handle_v1(
    p_ids bigint[], p_state text, p_owner text DEFAULT NULL, p_resolution text DEFAULT NULL,
    p_note text DEFAULT NULL, p_by text DEFAULT NULL
) RETURNS TABLE (task_id bigint, state text, owner text, resolution text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    bad text;
BEGIN
    IF p_state NOT IN ('new', 'investigating', 'resolved')
       OR (p_state = 'resolved') <> (p_resolution IS NOT NULL) THEN
        RAISE EXCEPTION USING MESSAGE = 'a resolved record needs a resolution, and only it',
                              ERRCODE = '22023';
    END IF;
    PERFORM 1 FROM taskq.tasks AS t WHERE t.id = ANY(p_ids) ORDER BY t.id FOR UPDATE;
    SELECT string_agg(x.id::text || ' (' || coalesce(t.status, 'no such task') || ')', ', '
                      ORDER BY x.id)
    INTO bad
    FROM unnest(p_ids) AS x(id) LEFT JOIN taskq.tasks AS t ON t.id = x.id
    WHERE t.id IS NULL OR t.status <> 'DEAD_LETTER';
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION USING MESSAGE = 'not a dead letter, nothing changed: ' || bad,
                              ERRCODE = '55000';
    END IF;
    RETURN QUERY
    WITH handled AS (
        INSERT INTO taskq.dead_letters AS d
            (task_id, dead_at, task_type, fingerprint, state, owner, resolution, notes,
             resolved_by, resolved_at, updated_by)
        SELECT t.id, coalesce(t.finished_at, t.created_at), t.task_type,
               taskq.error_fingerprint_v1(t.last_error),
               p_state, p_owner, p_resolution,
               CASE WHEN p_note IS NULL THEN '[]'::jsonb
                    ELSE jsonb_build_array(jsonb_build_object(
                        'at', now(), 'by', coalesce(p_by, session_user::text), 'note', p_note))
               END,
               CASE WHEN p_state = 'resolved' THEN coalesce(p_by, session_user::text) END,
               CASE WHEN p_state = 'resolved' THEN now() END,
               coalesce(p_by, session_user::text)
        FROM taskq.tasks AS t WHERE t.id = ANY(p_ids)
        ON CONFLICT ON CONSTRAINT dead_letters_pkey DO UPDATE
            SET state = EXCLUDED.state,
                owner = coalesce(EXCLUDED.owner, d.owner),
                resolution = EXCLUDED.resolution,
                notes = d.notes || EXCLUDED.notes,
                resolved_by = EXCLUDED.resolved_by,
                resolved_at = EXCLUDED.resolved_at,
                updated_by = EXCLUDED.updated_by,
                updated_at = now()
        RETURNING d.task_id, d.task_type, d.state, d.owner, d.resolution
    ), audited AS (
        INSERT INTO taskq.audit (actor, action, task_id, task_type, note, detail)
        SELECT session_user,
               CASE WHEN h.state = 'resolved' THEN 'dlq_resolve' ELSE 'dlq_assign' END,
               h.task_id, h.task_type, p_note,
               jsonb_build_object('by', p_by, 'state', h.state, 'owner', h.owner,
                                  'resolution', h.resolution)
        FROM handled AS h
    )
    SELECT h.task_id, h.state, h.owner, h.resolution
    FROM handled AS h
    ORDER BY 1;
END
$$;
REVOKE EXECUTE ON FUNCTION taskq.dlq_handle_v1(bigint[], text, text, text, text, text)
    FROM PUBLIC;

-- Turn a business switch on or off; true when it changed. Workers re-read switches with the
-- rest of the control state on NOTIFY taskq_control.
CREATE FUNCTION taskq.switch_set_v1(
    p_name text, p_enabled boolean, p_note text DEFAULT NULL, p_by text DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    before boolean;
BEGIN
    SELECT s.enabled INTO before FROM taskq.switches AS s WHERE s.name = p_name FOR UPDATE;
    INSERT INTO taskq.switches AS s (name, enabled, changed_by, note)
    VALUES (p_name, p_enabled, coalesce(p_by, session_user::text), p_note)
    ON CONFLICT (name) DO UPDATE
        SET enabled = EXCLUDED.enabled, changed_by = EXCLUDED.changed_by,
            changed_at = now(), note = EXCLUDED.note;
    INSERT INTO taskq.audit (actor, action, note, detail)
    VALUES (session_user, 'switch_set', p_note,
            jsonb_build_object('by', p_by, 'name', p_name, 'enabled', p_enabled,
                               'was', before));
    PERFORM pg_notify('taskq_control', 'switches');
    RETURN before IS DISTINCT FROM p_enabled;
END
$$;
REVOKE EXECUTE ON FUNCTION taskq.switch_set_v1(text, boolean, text, text) FROM PUBLIC;
