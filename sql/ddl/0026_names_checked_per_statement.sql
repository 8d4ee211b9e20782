-- taskq 0026: the name rules on INSERT run once per statement, over its new rows, instead of
-- in a BEFORE INSERT row trigger's WHEN.
--
-- PostgreSQL compiles a trigger's WHEN on each statement's first row: about 1 us per function
-- or operator in it on the bench machine. The name rules' WHEN has fourteen, so a one-row
-- INSERT (the usual enqueue) paid ~14 us of its ~72 us in the server to compile them. An
-- AFTER ... FOR EACH STATEMENT trigger over the transition table runs one planned query
-- instead: ~9 us less per one-row INSERT, and per row in bulk no more than the WHEN cost.
-- (One PL/pgSQL BEFORE row trigger for routing, names and size saved ~16 us on a one-row
-- INSERT, but a function call per row made COPY 6-11 % slower per row: not taken.)
--
-- The rules and the error are 0021's: SQLSTATE 23514 naming tasks_task_type_check or
-- tasks_queue_check, the value kept out of the message. The statement fails as a whole, as
-- before; its rows are checked after routing (0009) filled in their queue. The payload size
-- check stays BEFORE the row: it measures the payload before compression.

-- The name error, in one place: the statement trigger below and 0021's UPDATE trigger raise it.
CREATE FUNCTION taskq.raise_name_error_v1(p_task_type text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_column text := 'task_type';
BEGIN
    IF taskq.valid_name_v1(p_task_type) THEN
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

CREATE OR REPLACE FUNCTION taskq.check_names_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM taskq.raise_name_error_v1(NEW.task_type);
    RETURN NULL;
END
$$;

CREATE FUNCTION taskq.check_new_names_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_task_type text;
BEGIN
    SELECT n.task_type INTO v_task_type
    FROM new_rows AS n
    WHERE NOT (taskq.valid_name_v1(n.task_type) AND taskq.valid_name_v1(n.queue))
    LIMIT 1;
    IF FOUND THEN
        PERFORM taskq.raise_name_error_v1(v_task_type);
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER tasks_valid_names_insert ON taskq.tasks;

-- Named to fire first of the AFTER INSERT statement triggers (they fire in name order), so a
-- refused statement does not index trace ids or build a NOTIFY first.
CREATE TRIGGER tasks_check_names_insert
    AFTER INSERT ON taskq.tasks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskq.check_new_names_v1();
