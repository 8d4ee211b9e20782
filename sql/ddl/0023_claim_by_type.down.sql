-- 0023 down: the lane scans walk the queue's runnable rows again (sql/ddl/0017's body), through
-- the queue-wide indexes of 0001 and 0014.
DROP FUNCTION taskq.claim_scan_v2(text, text[], text[], text, integer, boolean, bigint[], boolean);
ALTER FUNCTION taskq.claim_scan_queue_v1(text, text[], text[], text, integer, boolean, bigint[],
                                         boolean)
    RENAME TO claim_scan_v2;
CREATE INDEX tasks_runnable_idx ON taskq.tasks (queue, priority DESC, runnable_at, id)
    WHERE status IN ('PENDING', 'FAILED');
CREATE INDEX tasks_retry_idx ON taskq.tasks (queue, priority DESC, runnable_at, id)
    WHERE status = 'FAILED';
DROP INDEX taskq.tasks_runnable_by_type_idx;
