-- taskq 0026: one BEFORE INSERT row trigger, without WHEN, instead of three with WHEN.
--
-- PostgreSQL compiles a trigger's WHEN expression once per statement, on the statement's
-- first row. For a one-row INSERT (the usual enqueue) that compile was most of the checks'
-- cost: the name rules of 0021 alone took 13 us of the ~72 us the server spends on a one-row
-- INSERT into taskq.tasks (measured in-server, alternated, on the bench machine). A PL/pgSQL
-- function is compiled once per session and its expressions are planned once, so routing,
-- the name rules and the payload size check now run from one function on every row: ~12 us
-- less per one-row INSERT, and no more per row in a 10,000-row INSERT ... SELECT. The rules,
-- the order (routing first, so a bare INSERT's names are checked with the routed queue) and
-- the errors (SQLSTATE, constraint names, messages) are those of 0009 and 0021.

-- The name error, in one place: the INSERT trigger below and the UPDATE trigger of 0021 raise
-- it. The value is not in the message: it is the producer's and may be anything.
CREATE FUNCTION taskq.raise_name_error_v1(p_task_type text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_column text := 'task_type';
BEGIN
    IF taskq.valid_name_v1(p_task_type) THEN
        v_column := 'queue';
    END IF;
    RAISE EXCEPTION USING
        ERRCODE = 'check_violation',
        CONSTRAINT = 'tasks_' || v_column || '_check',
        TABLE = 'tasks',
        SCHEMA = 'taskq',
        COLUMN = v_column,
        MESSAGE = 'new row for relation "tasks" violates check constraint "tasks_'
                  || v_column || '_check"',
        DETAIL = 'taskq: a ' || v_column || ' is 1 to 200 characters, without control '
                 || 'characters or surrounding blanks.';
END
$$;

CREATE OR REPLACE FUNCTION taskq.check_names_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM taskq.raise_name_error_v1(NEW.task_type);
    RETURN NULL;
END
$$;

-- The payload limit lives in taskq.settings, which no client role may read: SECURITY DEFINER
-- (search_path pinned), and called only for a payload over 64 KiB (the lowest limit allowed).
CREATE FUNCTION taskq.check_payload_size_v2(p_task_type text, p_size bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    limit_bytes bigint;
BEGIN
    SELECT s.max_payload_bytes INTO limit_bytes FROM taskq.settings AS s WHERE s.id = 1;
    limit_bytes := coalesce(limit_bytes, 16777216);
    IF p_size > limit_bytes THEN
        RAISE EXCEPTION USING
            ERRCODE = 'check_violation',
            CONSTRAINT = 'tasks_payload_size_check',
            MESSAGE = 'taskq: the payload of a ' || p_task_type || ' task is ' || p_size
                      || ' bytes; the limit is ' || limit_bytes
                      || ' bytes (taskq.settings.max_payload_bytes)';
    END IF;
END
$$;

CREATE FUNCTION taskq.prepare_task_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    reg_queue   text;
    reg_retries integer;
    reg_timeout integer;
BEGIN
    -- Routing (0009): only a writer that leaves something out pays for the registry look-up.
    IF NEW.queue IS NULL OR NEW.max_retry_count IS NULL OR NEW.timeout_seconds IS NULL THEN
        SELECT r.queue, r.max_retry_count, r.timeout_seconds
        INTO reg_queue, reg_retries, reg_timeout
        FROM taskq.task_types AS r WHERE r.task_type = NEW.task_type;
        NEW.queue := coalesce(NEW.queue, reg_queue, 'default');
        NEW.max_retry_count := coalesce(NEW.max_retry_count, reg_retries);
        NEW.timeout_seconds := coalesce(NEW.timeout_seconds, reg_timeout);
    END IF;
    -- The name rules (0021). A NULL task_type passes here and meets NOT NULL.
    IF NOT (taskq.valid_name_v1(NEW.task_type) AND taskq.valid_name_v1(NEW.queue)) THEN
        PERFORM taskq.raise_name_error_v1(NEW.task_type);
    END IF;
    IF pg_column_size(NEW.payload) > 65536 THEN
        PERFORM taskq.check_payload_size_v2(NEW.task_type, pg_column_size(NEW.payload));
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER tasks_route_insert ON taskq.tasks;
DROP TRIGGER tasks_valid_names_insert ON taskq.tasks;
DROP TRIGGER tasks_payload_size_insert ON taskq.tasks;
DROP FUNCTION taskq.route_task_v1();
DROP FUNCTION taskq.check_payload_size_v1();

CREATE TRIGGER tasks_prepare_insert
    BEFORE INSERT ON taskq.tasks
    FOR EACH ROW EXECUTE FUNCTION taskq.prepare_task_v1();
