DROP FUNCTION IF EXISTS taskq.switch_set_v1(text, boolean, text, text);
DROP FUNCTION IF EXISTS taskq.dlq_handle_v1(bigint[], text, text, text, text, text);
DROP FUNCTION IF EXISTS taskq.cancel_v1(bigint[], boolean, text, text);
DROP TABLE IF EXISTS taskq.switches;
DROP TABLE IF EXISTS taskq.dead_letters;
DROP FUNCTION IF EXISTS taskq.error_fingerprint_v1(text);
DROP FUNCTION IF EXISTS taskq.error_signature_v1(text);
DROP INDEX IF EXISTS taskq.tasks_cancelled_idx;
-- Cancelled rows cannot stay under the old constraint: they leave with the feature.
DELETE FROM taskq.tasks WHERE status = 'CANCELLED';
ALTER TABLE taskq.tasks DROP COLUMN IF EXISTS abort_requested_at;
ALTER TABLE taskq.tasks DROP CONSTRAINT tasks_status_check;
ALTER TABLE taskq.tasks ADD CONSTRAINT tasks_status_check CHECK (
    status IN ('PENDING', 'PROCESSING', 'SUCCESS', 'FAILED', 'DEAD_LETTER'));
