-- taskq 0033: the queue table's statistics kept fresh where autovacuum does not.
--
-- Every statement a worker repeats (the claims, the completions, the reaper's pass, the
-- heartbeat, the gauges, retention) is prepared, and PostgreSQL keeps a session's generic plan
-- until the table's statistics change. Autovacuum's ANALYZE changes them as the table grows
-- (taskq.tasks asks for one every 2 % of its rows changed, 0001). Where autovacuum does not
-- cover the table (off on the server, or autovacuum_enabled = false on the table) nothing
-- does, and a plan made while the table was empty stays a sequential scan as it grows to
-- millions of rows. Plans made on an empty table, then 200,000 rows (PostgreSQL 15): the
-- backlog gauge took 62 ms (1.6 ms after an ANALYZE), the backlog sample 53 ms (1.4), the
-- isolator's look-up 53 ms (1.4), a retention batch 108 ms (2.6). The claims, the completions,
-- the reaper's pass and the heartbeat keep to their indexes by construction (0022, 0032,
-- store.PLANNER_SETTINGS); the rest rely on fresh statistics.
--
-- taskq.analyze_when_stale_v1() runs ANALYZE taskq.tasks when autovacuum does not cover the
-- table and its live rows (the statistics system's count, kept by every insert and delete)
-- moved from the count the planner has (pg_class.reltuples) by more than half of that and
-- 1,000 rows, and returns whether it did. The size, not the churn: plans change with the
-- table's size, and a queue whose size holds still changes by UPDATEs only (a claim and a
-- completion per task); an ANALYZE makes every session plan its statements again (the claim
-- functions: 12-35 ms a session), which a drain at full speed should not pay every half
-- minute for nothing. Growth from empty to millions takes one ANALYZE per doubling. The live
-- count can be off by a session's counts not yet sent when a VACUUM reported (PostgreSQL 15
-- adds them after it: a 30,000-row INSERT then VACUUM ANALYZE in one session showed 60,000
-- live rows): at worst one ANALYZE too many, which sets the count right. The
-- worker's leader calls it every half minute (taskq/worker/worker.py); with autovacuum on it
-- returns false at once. SECURITY DEFINER (search_path pinned): ANALYZE needs the table's
-- owner, and the worker role gets EXECUTE on this function only (sql/roles.sql).
CREATE FUNCTION taskq.analyze_when_stale_v1() RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_options text[];
    v_tuples float8;
    v_live float8;
BEGIN
    SELECT c.reloptions, greatest(c.reltuples, 0) INTO v_options, v_tuples
    FROM pg_class AS c WHERE c.oid = 'taskq.tasks'::regclass;
    IF current_setting('autovacuum')::boolean
       AND coalesce((SELECT o.option_value::boolean FROM pg_options_to_table(v_options) AS o
                     WHERE o.option_name = 'autovacuum_enabled'), true) THEN
        RETURN false;
    END IF;
    SELECT s.n_live_tup INTO v_live
    FROM pg_stat_user_tables AS s WHERE s.relid = 'taskq.tasks'::regclass;
    IF abs(coalesce(v_live, 0) - v_tuples) <= 1000 + 0.5 * v_tuples THEN
        RETURN false;
    END IF;
    ANALYZE taskq.tasks;
    RETURN true;
END
$$;

REVOKE ALL ON FUNCTION taskq.analyze_when_stale_v1() FROM PUBLIC;
