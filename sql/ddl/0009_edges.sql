-- taskq 0009: integrity at the edges of the table, for every writer (Python, SQL, psql).
--
-- The type registry. Workers record, at start, the queue and the options of every task type
-- they run, so a writer that names no queue (a bare INSERT, taskq.enqueue(...) without queue =>,
-- `taskq enqueue`, a Python producer that does not register the type) gets the queue the type
-- is registered to, and its max_retry_count and timeout_seconds, instead of 'default' and
-- "whatever the first claim says". An explicit value always wins. With several workers
-- registering one type differently (a rolling deploy), the last one to start wins.
-- reconciled: some app runs a reconciler for this type; retention then keeps a durable "done"
-- marker (task_executed) for its pruned SUCCESS rows, so reconciliation never re-enqueues
-- finished work (queue and options stay NULL when that app does not run the type itself).
CREATE TABLE taskq.task_types (
    task_type       text        PRIMARY KEY,
    queue           text,
    max_retry_count integer     CHECK (max_retry_count >= 0),
    timeout_seconds integer     CHECK (timeout_seconds > 0),
    reconciled      boolean     NOT NULL DEFAULT false,
    registered_by   text,
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- The queue column loses its default: NULL now means "the writer named no queue", which the
-- trigger below resolves (NOT NULL is checked after BEFORE triggers, so the row still always
-- has one).
ALTER TABLE taskq.tasks ALTER COLUMN queue DROP DEFAULT;

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

-- WHEN: the Python API of an app that registers the type names all three, so its inserts never
-- enter the function (the WHEN test is a few null checks); only writers that leave something
-- out pay for the registry look-up.
CREATE TRIGGER tasks_route_insert
    BEFORE INSERT ON taskq.tasks
    FOR EACH ROW
    WHEN (NEW.queue IS NULL OR NEW.max_retry_count IS NULL OR NEW.timeout_seconds IS NULL)
    EXECUTE FUNCTION taskq.route_task_v1();

-- The SQL API: no queue => means the type's registered queue.
CREATE OR REPLACE FUNCTION taskq.enqueue(
    task_type       text,
    payload         jsonb       DEFAULT '{}',
    queue           text        DEFAULT NULL,  -- NULL: the type's registered queue, else 'default'
    biz_id          text        DEFAULT NULL,
    priority        integer     DEFAULT 0,
    scheduled_at    timestamptz DEFAULT NULL,
    delay           interval    DEFAULT NULL,
    max_retry_count integer     DEFAULT NULL,  -- NULL: the type's registered setting
    timeout_seconds integer     DEFAULT NULL,  -- NULL: the type's registered setting
    trace_id        text        DEFAULT NULL,
    unique_key      text        DEFAULT NULL,
    ordering_key    text        DEFAULT NULL,
    parent_id       bigint      DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
BEGIN
    INSERT INTO taskq.tasks (task_type, payload, queue, biz_id, priority, scheduled_at,
                             max_retry_count, timeout_seconds, trace_id, unique_key,
                             ordering_key, parent_id)
    VALUES (enqueue.task_type,
            coalesce(enqueue.payload, '{}'),
            enqueue.queue,
            enqueue.biz_id,
            enqueue.priority,
            coalesce(enqueue.scheduled_at, now()) + coalesce(enqueue.delay, interval '0'),
            enqueue.max_retry_count,
            enqueue.timeout_seconds,
            coalesce(enqueue.trace_id, replace(gen_random_uuid()::text, '-', '')),
            enqueue.unique_key,
            enqueue.ordering_key,
            enqueue.parent_id)
    ON CONFLICT (task_type, unique_key)
        WHERE unique_key IS NOT NULL AND status IN ('PENDING', 'PROCESSING', 'FAILED')
        DO NOTHING
    RETURNING id INTO new_id;
    IF new_id IS NULL THEN
        SELECT t.id INTO new_id FROM taskq.tasks AS t
        WHERE t.task_type = enqueue.task_type AND t.unique_key = enqueue.unique_key
          AND t.status IN ('PENDING', 'PROCESSING', 'FAILED');
    END IF;
    RETURN new_id;
END
$$;

-- The payload size limit, for every writer. Settings that the database enforces live in one
-- row; change them with UPDATE (owner or operator). The floor of 64 KiB lets the trigger's WHEN
-- skip the look-up for every ordinary payload: only a payload over 64 KiB enters the function.
CREATE TABLE taskq.settings (
    id                integer PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    max_payload_bytes bigint  NOT NULL DEFAULT 16777216 CHECK (max_payload_bytes >= 65536)
);
INSERT INTO taskq.settings (id) VALUES (1);

-- SECURITY DEFINER (search_path pinned): a producer needs no privilege on taskq.settings, and
-- it is called only for payloads over the floor.
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

-- INSERT only, not a CHECK constraint: a CHECK runs on every UPDATE too, so a row written
-- before a lower limit was set would make every claim of its queue fail.
CREATE TRIGGER tasks_payload_size_insert
    BEFORE INSERT ON taskq.tasks
    FOR EACH ROW
    WHEN (pg_column_size(NEW.payload) > 65536)
    EXECUTE FUNCTION taskq.check_payload_size_v1();

-- Reconciliation must not re-enqueue finished work once retention deleted its row. Deleting a
-- SUCCESS row with a business key of a reconciled type (taskq.task_types.reconciled) leaves a
-- durable "done" marker in task_executed, which the reconciler reads (idempotent types have
-- one already, written at SUCCESS). A trigger rather than the prune statement: any deleter
-- (the worker's retention, `taskq prune` as the operator, a DBA) keeps the markers, and no
-- client role needs INSERT on task_executed (a forged row there would make an idempotent task
-- be skipped). Per statement, with the deleted rows as a transition table: one INSERT per
-- prune batch. SECURITY DEFINER (search_path pinned) for that INSERT.
CREATE FUNCTION taskq.keep_done_markers_v1() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO taskq.task_executed (task_type, biz_id, task_id, executed_at)
    SELECT g.task_type, g.biz_id, g.id, coalesce(g.finished_at, now())
    FROM gone AS g
    WHERE g.status = 'SUCCESS' AND g.biz_id IS NOT NULL
      AND EXISTS (SELECT 1 FROM taskq.task_types AS r
                  WHERE r.task_type = g.task_type AND r.reconciled)
    ON CONFLICT (task_type, biz_id) DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_done_markers
    AFTER DELETE ON taskq.tasks
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION taskq.keep_done_markers_v1();
