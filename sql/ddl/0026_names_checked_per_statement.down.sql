-- 0026 down: the name rules in a BEFORE INSERT row trigger's WHEN (0021).
DROP TRIGGER tasks_check_names_insert ON taskq.tasks;
DROP FUNCTION taskq.check_new_names_v1();

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
