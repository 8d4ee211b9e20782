-- 0027 down: the three AFTER INSERT statement triggers of 0002, 0020 and 0026.
DROP TRIGGER tasks_inserted ON taskq.tasks;
DROP FUNCTION taskq.tasks_inserted_v1();

CREATE FUNCTION taskq.notify_tasks_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    queues text;
BEGIN
    SELECT json_agg(DISTINCT q.queue)::text INTO queues
    FROM new_rows AS q
    WHERE q.scheduled_at <= now();
    IF queues IS NOT NULL THEN
        IF octet_length(queues) > 7000 THEN
            queues := '*';
        END IF;
        PERFORM pg_notify('taskq_tasks', queues);
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION taskq.index_traces_v1() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO taskq.task_traces (trace_id, task_id)
    SELECT n.trace_id, n.id FROM new_rows AS n WHERE n.trace_id IS NOT NULL;
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

CREATE TRIGGER tasks_check_names_insert
    AFTER INSERT ON taskq.tasks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskq.check_new_names_v1();

CREATE TRIGGER tasks_notify_insert
    AFTER INSERT ON taskq.tasks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskq.notify_tasks_v1();

CREATE TRIGGER tasks_traces_insert
    AFTER INSERT ON taskq.tasks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskq.index_traces_v1();
