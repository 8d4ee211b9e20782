-- taskq 0020: trace ids are indexed once, when a task is inserted, in their own table.
-- A status change is never a HOT update (the partial state indexes), so every claim and every
-- completion wrote a new entry into tasks_trace_idx: about 7 us of database CPU per task, the
-- largest single cost left in a drain (bench/, the claim + complete loop, alternated). A task's
-- trace id is written once and never changes, so it is indexed there: one entry per task, at
-- insert, by these statement triggers (any writer: the Python API, taskq.enqueue(), a bare
-- INSERT or COPY from any language). The task browser looks a trace up here, then the tasks by
-- id. Deleted (pruned) and truncated tasks take their entries with them; a trace id changed by
-- a hand-written UPDATE moves its entry. The triggers are SECURITY DEFINER (search_path
-- pinned): no client role needs a grant on taskq.task_traces.
CREATE TABLE taskq.task_traces (
    trace_id text   NOT NULL,
    task_id  bigint NOT NULL
);
CREATE INDEX task_traces_trace_idx ON taskq.task_traces USING hash (trace_id);

INSERT INTO taskq.task_traces (trace_id, task_id)
SELECT t.trace_id, t.id FROM taskq.tasks AS t WHERE t.trace_id IS NOT NULL;

DROP INDEX taskq.tasks_trace_idx;

CREATE FUNCTION taskq.index_traces_v1() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO taskq.task_traces (trace_id, task_id)
    SELECT n.trace_id, n.id FROM new_rows AS n WHERE n.trace_id IS NOT NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_traces_insert
    AFTER INSERT ON taskq.tasks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskq.index_traces_v1();

CREATE FUNCTION taskq.forget_traces_v1() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM taskq.task_traces AS x
    USING gone AS g
    WHERE x.trace_id = g.trace_id AND x.task_id = g.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_traces_delete
    AFTER DELETE ON taskq.tasks
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION taskq.forget_traces_v1();

-- Only an UPDATE that names trace_id fires this: claims and completions never do.
CREATE FUNCTION taskq.move_trace_v1() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM taskq.task_traces AS x WHERE x.trace_id = OLD.trace_id AND x.task_id = OLD.id;
    IF NEW.trace_id IS NOT NULL THEN
        INSERT INTO taskq.task_traces (trace_id, task_id) VALUES (NEW.trace_id, NEW.id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_traces_update
    AFTER UPDATE OF trace_id ON taskq.tasks
    FOR EACH ROW WHEN (OLD.trace_id IS DISTINCT FROM NEW.trace_id)
    EXECUTE FUNCTION taskq.move_trace_v1();

CREATE FUNCTION taskq.truncate_traces_v1() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    TRUNCATE taskq.task_traces;
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_traces_truncate
    AFTER TRUNCATE ON taskq.tasks
    FOR EACH STATEMENT EXECUTE FUNCTION taskq.truncate_traces_v1();
