-- taskq 0007: periodic tasks. Each schedule's ticks are recorded here, one row per tick, with a
-- primary key on (name, tick): a tick is enqueued exactly once however many workers run, and
-- a tick nobody ran (workers were down) is recorded as missed, never silently dropped.
CREATE TABLE taskq.schedules (
    name           text        PRIMARY KEY,
    task_type      text        NOT NULL,
    spec           text        NOT NULL,   -- a cron expression, or "every <seconds>s"
    timezone       text        NOT NULL DEFAULT 'UTC',
    catch_up       text        NOT NULL DEFAULT 'skip'
                               CHECK (catch_up IN ('skip', 'run_once', 'backfill')),
    backfill_limit integer,
    since          timestamptz NOT NULL DEFAULT now(),  -- ticks after this count
    last_tick      timestamptz,
    last_task_id   bigint,
    next_tick      timestamptz,
    missed_total   bigint      NOT NULL DEFAULT 0,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE taskq.schedule_ticks (
    name        text        NOT NULL,
    tick        timestamptz NOT NULL,
    outcome     text        NOT NULL CHECK (outcome IN ('enqueued', 'missed')),
    task_id     bigint,
    reason      text,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, tick)
);
