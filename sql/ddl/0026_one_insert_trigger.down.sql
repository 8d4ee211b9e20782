-- 0026 down: the three BEFORE INSERT triggers with WHEN of 0009 and 0021.
DROP TRIGGER tasks_prepare_insert ON taskq.tasks;
DROP FUNCTION taskq.prepare_task_v1();
DROP FUNCTION taskq.check_payload_size_v2(text, bigint);

CREATE FUNCTION taskq.route_task_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    reg_queue   text;
    reg_retries integer;
    reg_timeout integer;
BEGIN
    SELECT r.queue, r.max_retry_count, r.timeout_seconds
    INTO reg_queue, reg_retries, reg_timeout
    FROM taskq.task_types AS r WHERE r.task_type = NEW.task_type;
    NEW.queue := coalesce(NEW.queue, reg_queue, 'default');
    NEW.max_retry_count := coalesce(NEW.max_retry_count, reg_retries);
    NEW.timeout_seconds := coalesce(NEW.timeout_seconds, reg_timeout);
    RETURN NEW;
END
$$;

CREATE TRIGGER tasks_route_insert
    BEFORE INSERT ON taskq.tasks
    FOR EACH ROW
    WHEN (NEW.queue IS NULL OR NEW.max_retry_count IS NULL OR NEW.timeout_seconds IS NULL)
    EXECUTE FUNCTION taskq.route_task_v1();

CREATE FUNCTION taskq.check_payload_size_v1() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    size  bigint := pg_column_size(NEW.payload);
    limit_bytes bigint;
BEGIN
    SELECT s.max_payload_bytes INTO limit_bytes FROM taskq.settings AS s WHERE s.id = 1;
    IF size > coalesce(limit_bytes, 16777216) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'check_violation',
            CONSTRAINT = 'tasks_payload_size_check',
            MESSAGE = 'taskq: the payload of a ' || NEW.task_type || ' task is ' || size
                      || ' bytes; the limit is ' || limit_bytes
                      || ' bytes (taskq.settings.max_payload_bytes)';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER tasks_payload_size_insert
    BEFORE INSERT ON taskq.tasks
    FOR EACH ROW
    WHEN (pg_column_size(NEW.payload) > 65536)
    EXECUTE FUNCTION taskq.check_payload_size_v1();

CREATE OR REPLACE FUNCTION taskq.check_names_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_column text := 'task_type';
BEGIN
    IF taskq.valid_name_v1(NEW.task_type) THEN
        v_column := 'queue';
    END IF;
    -- The value is not in the message: it is the producer's and may be anything.
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
DROP FUNCTION taskq.raise_name_error_v1(text);

CREATE TRIGGER tasks_valid_names_insert
    BEFORE INSERT ON taskq.tasks
    FOR EACH ROW
    WHEN (NOT (length(NEW.task_type) BETWEEN 1 AND 200 AND NEW.task_type !~ '[[:cntrl:]]'
               AND NEW.task_type = btrim(NEW.task_type)
               AND length(NEW.queue) BETWEEN 1 AND 200 AND NEW.queue !~ '[[:cntrl:]]'
               AND NEW.queue = btrim(NEW.queue)))
    EXECUTE FUNCTION taskq.check_names_v1();
