-- taskq 0016 down: the functions and the audit trigger go; sql/roles.sql of the older version
-- gives the roles their direct writes back (run `taskq migrate --roles` after downgrading).
DROP TRIGGER audit_stamp ON taskq.audit;
DROP FUNCTION taskq.audit_stamp_v1();
DROP FUNCTION taskq.dlq_lock_v1(bigint[], text, text, text, float8, float8, text, text);
DROP FUNCTION taskq.dlq_requeue_v1(bigint[], text, text, text, float8, float8, text, text,
                                   integer, boolean, text, text);
DROP FUNCTION taskq.dlq_discard_v1(bigint[], text, text, text, float8, float8, text, text,
                                   integer, text, text);
DROP FUNCTION taskq.dlq_requeue_edited_v1(bigint, jsonb, boolean, text, text);
DROP FUNCTION taskq.dlq_run_audit_v1(text, text, jsonb, text);
DROP FUNCTION taskq.pause_v1(text, text, text, text);
DROP FUNCTION taskq.resume_v1(text, text, text, text);
DROP FUNCTION taskq.breaker_reset_v1(text, text, text);
DROP FUNCTION taskq.protection_set_v1(integer, text, boolean, text);
DROP FUNCTION taskq.prune_batch_v1(text, float8, integer);
DROP FUNCTION taskq.record_business_key_v1(bigint, uuid);
