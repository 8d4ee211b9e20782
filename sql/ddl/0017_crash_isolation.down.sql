DROP FUNCTION taskq.claim_batch_v3(text, text[], integer[], integer[], integer, text, boolean,
                                   boolean, boolean);
DROP FUNCTION taskq.claim_key_v2(text, text, text, boolean, boolean, bigint[], boolean);
DROP FUNCTION taskq.claim_scan_v2(text, text[], text[], text, integer, boolean, bigint[],
                                  boolean);
DROP FUNCTION taskq.claim_lanes_v2(text, text[], text[], integer, real, boolean, boolean,
                                   bigint[], boolean);
DROP INDEX IF EXISTS taskq.tasks_isolate_idx;
ALTER TABLE taskq.tasks DROP COLUMN isolate, DROP COLUMN crash_count;
