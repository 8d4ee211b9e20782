-- Task type and queue names are checked when they are written, not on every UPDATE. A CHECK
-- constraint is evaluated on every row an UPDATE writes, whichever columns it sets, so each
-- claim and each completion re-ran both name checks (a regular expression, btrim and two
-- length counts per name): 7-9 % of the database's CPU per task in a drain. The same rules
-- now run in triggers' WHEN, on INSERT and on an UPDATE that sets task_type or queue. The
-- error is the constraint's: SQLSTATE 23514 (check_violation) naming tasks_task_type_check
-- or tasks_queue_check.
--
-- The INSERT trigger is named to fire after the other BEFORE INSERT triggers (they fire in name
-- order): it sees the queue that tasks_route_insert filled in for a bare INSERT left NULL.

-- The rule (0001's constraint expression), for the UPDATE trigger's WHEN (prepared only for an
-- UPDATE that sets a name) and for the error's column. Immutable, so inlined: no call per row.
CREATE FUNCTION taskq.valid_name_v1(p_name text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT length(p_name) BETWEEN 1 AND 200 AND p_name !~ '[[:cntrl:]]'
           AND p_name = btrim(p_name)
$$;

CREATE FUNCTION taskq.check_names_v1() RETURNS trigger
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

-- INSERT: before the row is written, like the constraint was. The rule is written out here,
-- not called: the planner inlines a SQL function by parsing its body again, on every statement,
-- and a one-row INSERT then paid ~10 us more than with the CHECK constraints.
CREATE TRIGGER tasks_valid_names_insert
    BEFORE INSERT ON taskq.tasks
    FOR EACH ROW
    WHEN (NOT (length(NEW.task_type) BETWEEN 1 AND 200 AND NEW.task_type !~ '[[:cntrl:]]'
               AND NEW.task_type = btrim(NEW.task_type)
               AND length(NEW.queue) BETWEEN 1 AND 200 AND NEW.queue !~ '[[:cntrl:]]'
               AND NEW.queue = btrim(NEW.queue)))
    EXECUTE FUNCTION taskq.check_names_v1();

-- UPDATE (rare: a requeue to another queue, an operator's fix-up): after the row, not before.
-- Any BEFORE UPDATE row trigger makes every UPDATE of the table lock its old row first
-- (whatever columns the trigger names): one more WAL record per claim and per completion. The
-- error still undoes the statement.
CREATE TRIGGER tasks_valid_names_update
    AFTER UPDATE OF task_type, queue ON taskq.tasks
    FOR EACH ROW
    WHEN (NOT (taskq.valid_name_v1(NEW.task_type) AND taskq.valid_name_v1(NEW.queue)))
    EXECUTE FUNCTION taskq.check_names_v1();

ALTER TABLE taskq.tasks
    DROP CONSTRAINT tasks_task_type_check,
    DROP CONSTRAINT tasks_queue_check;
