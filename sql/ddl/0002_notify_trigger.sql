-- taskq 0002: a bare INSERT wakes workers.
-- One NOTIFY per inserting statement, not per row: a 100,000-row INSERT ... SELECT sends one
-- message whose payload is the JSON array of the queues it filled. Only rows runnable now count;
-- future-scheduled rows are found by the workers' poll. NOTIFY is a wake-up hint, never the
-- truth: the claim query is. If the list would not fit a NOTIFY payload, '*' wakes every queue.
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

CREATE TRIGGER tasks_notify_insert
    AFTER INSERT ON taskq.tasks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskq.notify_tasks_v1();
