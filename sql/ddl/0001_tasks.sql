-- taskq 0001: the tasks table is the queue.
-- The columns of taskq.tasks marked "public" below are a contract with services in other
-- languages that INSERT directly: never rename them (PRODUCT.md, "The task row").
-- max_retry_count and timeout_seconds may be left NULL by a writer that does not know the
-- handler's settings (a bare INSERT): the first claim fills them from the handler that runs the
-- task (defaults 5 and 1800 s), so every PROCESSING row carries the values it is judged by.
CREATE SCHEMA IF NOT EXISTS taskq;

CREATE TABLE taskq.tasks (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,   -- public
    task_type        text        NOT NULL,                               -- public
    queue            text        NOT NULL DEFAULT 'default',             -- public
    biz_id           text,                                               -- public
    payload          jsonb       NOT NULL DEFAULT '{}',                  -- public
    status           text        NOT NULL DEFAULT 'PENDING',             -- public
    priority         smallint    NOT NULL DEFAULT 0,                     -- public
    scheduled_at     timestamptz NOT NULL DEFAULT now(),                 -- public
    retry_count      integer     NOT NULL DEFAULT 0,                     -- public
    max_retry_count  integer,                                            -- public
    next_retry_time  timestamptz,                                        -- public
    last_error       text,                                               -- public
    timeout_seconds  integer,                                            -- public
    started_at       timestamptz,                                        -- public
    finished_at      timestamptz,                                        -- public
    effective_id     uuid,                                               -- public
    worker_id        text,                                               -- public
    progress         jsonb,                                              -- public
    trace_id         text DEFAULT replace(gen_random_uuid()::text, '-', ''),  -- public
    created_at       timestamptz NOT NULL DEFAULT now(),                 -- public
    updated_at       timestamptz NOT NULL DEFAULT now(),                 -- public
    -- When the row may next be claimed. Derived, so the contract columns stay the only thing a
    -- writer sets, while ONE partial index serves both fresh (PENDING) and retrying (FAILED) rows
    -- without a "stager" that moves rows between states.
    runnable_at      timestamptz GENERATED ALWAYS AS (
        CASE WHEN status = 'FAILED' THEN coalesce(next_retry_time, scheduled_at)
             ELSE scheduled_at END
    ) STORED,
    CONSTRAINT tasks_status_check CHECK (
        status IN ('PENDING', 'PROCESSING', 'SUCCESS', 'FAILED', 'DEAD_LETTER')),
    -- Names are 1-200 characters, no control characters, no surrounding blanks. They are data,
    -- never interpolated into SQL or channel names, but they appear in logs, metrics and the UI.
    -- (length + a one-character class, not one '^[^[:cntrl:]]{1,200}$' regex: the bounded
    -- repetition made these checks cost more than the rest of the INSERT.)
    CONSTRAINT tasks_task_type_check CHECK (
        length(task_type) BETWEEN 1 AND 200 AND task_type !~ '[[:cntrl:]]'
        AND task_type = btrim(task_type)),
    CONSTRAINT tasks_queue_check CHECK (
        length(queue) BETWEEN 1 AND 200 AND queue !~ '[[:cntrl:]]' AND queue = btrim(queue)),
    CONSTRAINT tasks_retry_check CHECK (retry_count >= 0 AND max_retry_count >= 0),
    CONSTRAINT tasks_timeout_check CHECK (timeout_seconds > 0)
) WITH (
    -- The hot rows churn: every claim and completion is an UPDATE that leaves a dead tuple.
    -- Vacuum early and often so dead tuples do not pile up in the runnable index.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 1
);

-- The claim index. Partial on the runnable statuses, so finished rows (SUCCESS, DEAD_LETTER)
-- are not in it at all: the claim cost does not grow with history. Column order matches the
-- claim's ORDER BY inside one queue, so the scan stops after LIMIT rows.
CREATE INDEX tasks_runnable_idx ON taskq.tasks (queue, priority DESC, runnable_at, id)
    WHERE status IN ('PENDING', 'FAILED');

-- The reaper and shutdown look only at attempts in flight.
CREATE INDEX tasks_processing_idx ON taskq.tasks (started_at) WHERE status = 'PROCESSING';

-- Operators look tasks up by business key.
CREATE INDEX tasks_biz_id_idx ON taskq.tasks (task_type, biz_id) WHERE biz_id IS NOT NULL;

-- Dead letters are listed by type and age, and history is pruned by age.
CREATE INDEX tasks_dead_letter_idx ON taskq.tasks (task_type, finished_at)
    WHERE status = 'DEAD_LETTER';
CREATE INDEX tasks_finished_idx ON taskq.tasks (finished_at) WHERE status = 'SUCCESS';

-- Exactly-once business effects: a row here commits in the same transaction as the handler's
-- writes and the SUCCESS update, so a second delivery of the same business key finds it.
CREATE TABLE taskq.task_executed (
    task_type   text        NOT NULL,
    biz_id      text        NOT NULL,
    task_id     bigint      NOT NULL,
    executed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_type, biz_id)
);
