-- Retention. Finished rows are deleted in batches (never one giant DELETE: short transactions,
-- bounded WAL and lock time), oldest first, through taskq.prune_batch_v1 (SECURITY DEFINER:
-- nobody deletes tasks directly; each batch that deleted anything leaves one audit row).
-- And the leader's other upkeep of the table: its statistics, where autovacuum does not keep
-- them (analyze_when_stale, at the end).

-- name: prune_success_batch
SELECT taskq.prune_batch_v1('SUCCESS', %(older_than)s::float8, %(batch)s::integer) AS deleted;

-- name: prune_cancelled_batch
SELECT taskq.prune_batch_v1('CANCELLED', %(older_than)s::float8, %(batch)s::integer) AS deleted;

-- name: prune_dead_letter_batch
SELECT taskq.prune_batch_v1('DEAD_LETTER', %(older_than)s::float8, %(batch)s::integer) AS deleted;

-- name: prune_stats
-- Outcome counters are kept 30 days longer than the rows they describe.
DELETE FROM taskq.task_stats
WHERE bucket < now() - make_interval(secs => %(older_than)s::float8) - interval '30 days';

-- name: analyze_when_stale
-- The leader's statistics upkeep (sql/ddl/0033_analyze_when_stale.sql): ANALYZE taskq.tasks
-- when autovacuum does not cover the table and its size moved by half from the planner's
-- count; whether it ran.
SELECT taskq.analyze_when_stale_v1() AS analyzed;
