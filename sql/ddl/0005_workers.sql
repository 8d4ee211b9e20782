-- taskq 0005: worker presence, for rescuing the attempts of workers that died.
-- Each worker process keeps a row here fresh from a heartbeat thread with its own connection
-- (so a CPU-bound handler cannot starve it). An attempt whose worker row is stale by more
-- than that worker's own lease, or missing, belongs to a dead worker.
CREATE TABLE taskq.workers (
    id            text             PRIMARY KEY,
    host          text             NOT NULL,
    pid           integer          NOT NULL,
    queues        jsonb            NOT NULL DEFAULT '{}',
    version       text             NOT NULL,
    lease_seconds double precision NOT NULL CHECK (lease_seconds > 0),
    started_at    timestamptz      NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz      NOT NULL DEFAULT now()
);
