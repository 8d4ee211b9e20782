-- The observation panel: a per-minute backlog sample per queue (the leader writes it, pruned
-- with the outcome counters), each worker's resident memory (reported with its heartbeat), and
-- the indexes the task browser pages through.

CREATE TABLE taskq.backlog_samples (
    bucket        timestamptz NOT NULL,
    queue         text        NOT NULL,
    runnable      bigint      NOT NULL,
    scheduled     bigint      NOT NULL,
    retry_waiting bigint      NOT NULL,
    processing    bigint      NOT NULL,
    PRIMARY KEY (bucket, queue)
);

ALTER TABLE taskq.workers ADD COLUMN rss_bytes bigint;

-- The task browser filters by status and pages by id (keyset, newest first), or by trace id.
-- Finished history is most of the table, so these two are the ones that keep browsing an
-- index scan on a table of millions of rows.
CREATE INDEX tasks_status_id_idx ON taskq.tasks (status, id);
CREATE INDEX tasks_trace_idx ON taskq.tasks (trace_id) WHERE trace_id IS NOT NULL;
-- Finding a business key across types, newest first (the browser's biz_id filter): the
-- per-type index (task_type, biz_id) cannot serve a filter on biz_id alone.
CREATE INDEX tasks_biz_browse_idx ON taskq.tasks (biz_id, id) WHERE biz_id IS NOT NULL;
