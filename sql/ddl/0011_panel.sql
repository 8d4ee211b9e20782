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
-- No (status, id) index: every claim and every completion would add an entry to it (a status
-- change is never a HOT update), and its dead PROCESSING entries made both statements slower as
-- a drain went on (claim 22 -> 28 us per task over 100,000 tasks, completion 15 -> 19). The
-- browser gets by without it: SUCCESS (most of the table) walks the primary key backwards; the
-- live states have their partial indexes (tasks_runnable_idx, tasks_processing_idx), whose
-- rows are few and sorted by id; DEAD_LETTER, which an incident can fill with many old rows,
-- gets its own index on id below, written only when a task ends there.
CREATE INDEX tasks_dead_letter_browse_idx ON taskq.tasks (id) WHERE status = 'DEAD_LETTER';
-- Trace ids: a hash index, not a btree. Every row has a trace id, and a status change is never a
-- HOT update, so the index takes a new entry on every claim and every completion; a btree put it
-- at a random leaf (a descent, page splits, bottom-up deletion): ~10 us of database CPU per task
-- in a drain, a quarter of the total. A hash index costs about 4 us, and it is all the browser's
-- trace filter needs (equality). (A BRIN bloom index costs nearly nothing per update but leaves
-- recent pages unsummarized until vacuum, and the planner prices it above a sequential scan.)
CREATE INDEX tasks_trace_idx ON taskq.tasks USING hash (trace_id);
-- Finding a business key across types, newest first (the browser's biz_id filter): the
-- per-type index (task_type, biz_id) cannot serve a filter on biz_id alone.
CREATE INDEX tasks_biz_browse_idx ON taskq.tasks (biz_id, id) WHERE biz_id IS NOT NULL;
