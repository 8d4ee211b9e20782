-- taskq 0008: what operators steer and watch.

-- Consumption switches: a paused task type or queue keeps its backlog; workers just stop
-- claiming it (within a second: NOTIFY taskq_control, with a poll as the fallback).
CREATE TABLE taskq.pauses (
    kind      text        NOT NULL CHECK (kind IN ('task_type', 'queue')),
    name      text        NOT NULL,
    paused_by text        NOT NULL,
    paused_at timestamptz NOT NULL DEFAULT now(),
    note      text,
    PRIMARY KEY (kind, name)
);

-- Circuit breakers, one row per task type that has failed. Failures count up in the same
-- statement that records them; a success resets the count (and closes a HALF_OPEN breaker).
CREATE TABLE taskq.breakers (
    task_type            text        PRIMARY KEY,
    state                text        NOT NULL DEFAULT 'CLOSED'
                                     CHECK (state IN ('CLOSED', 'OPEN', 'HALF_OPEN')),
    consecutive_failures integer     NOT NULL DEFAULT 0,
    last_failure_at      timestamptz,
    opened_at            timestamptz,
    changed_at           timestamptz NOT NULL DEFAULT now(),
    reason               text,
    probe_worker         text,
    probe_at             timestamptz
);

-- The adaptive protection level shared by every worker: one row.
CREATE TABLE taskq.protection (
    id         integer     PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    level      integer     NOT NULL DEFAULT 0 CHECK (level BETWEEN 0 AND 4),
    reason     text,
    changed_at timestamptz NOT NULL DEFAULT now(),
    changed_by text        NOT NULL DEFAULT 'taskq'
);
INSERT INTO taskq.protection (id) VALUES (1);

-- Per-minute outcome counts by queue and task type, upserted in the same statement that
-- records the outcomes: throughput and failure rates without an attempts log.
CREATE TABLE taskq.task_stats (
    bucket      timestamptz      NOT NULL,
    queue       text             NOT NULL,
    task_type   text             NOT NULL,
    outcome     text             NOT NULL,
    n           bigint           NOT NULL,
    run_seconds double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, queue, task_type, outcome)
);

-- Leadership for work that must have exactly one doer at a time (backlog gauges, the
-- protection evaluator, pruning): a lease row, renewed by its holder, taken over when expired.
CREATE TABLE taskq.leaders (
    name       text        PRIMARY KEY,
    worker_id  text        NOT NULL,
    elected_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
