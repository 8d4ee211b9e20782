-- One definition of "count these outcomes": every statement that ends attempts (finish, reap)
-- adds its per-minute counts to taskq.task_stats through this function, in the same
-- statement that records the outcomes. It is called once per (queue, task_type, outcome)
-- group of the statement's rows.
--
-- PL/pgSQL so the upsert's plan is cached for the session (the completer calls it on every
-- flush). SECURITY INVOKER: it writes with the caller's own privileges on task_stats.
CREATE FUNCTION taskq.count_outcome_v1(
    p_queue       text,
    p_task_type   text,
    p_outcome     text,
    p_n           bigint,
    p_run_seconds double precision DEFAULT 0
) RETURNS void
LANGUAGE plpgsql
AS $count_outcome$
BEGIN
    INSERT INTO taskq.task_stats AS s (bucket, queue, task_type, outcome, n, run_seconds)
    VALUES (date_trunc('minute', now()), p_queue, p_task_type, p_outcome, p_n,
            coalesce(p_run_seconds, 0))
    ON CONFLICT (bucket, queue, task_type, outcome) DO UPDATE
        SET n = s.n + EXCLUDED.n, run_seconds = s.run_seconds + EXCLUDED.run_seconds;
END
$count_outcome$;
