-- 0033 down: nothing analyzes taskq.tasks but autovacuum.
DROP FUNCTION taskq.analyze_when_stale_v1();
