-- name: limits_list
-- Every type with flow limits, with what runs now, what waits (due and runnable), and the
-- tokens its bucket holds right now (refilled on read; the claim does the same under the lock).
SELECT l.task_type, l.max_running, l.max_running_per_key, l.rate, l.rate_text, l.burst, l.fair,
       l.source, l.changed_by, l.changed_at,
       CASE WHEN l.rate IS NOT NULL THEN
           least(l.burst, l.tokens + l.rate
                 * greatest(0, extract(epoch FROM clock_timestamp() - l.refilled_at)))
       END AS tokens,
       (SELECT count(*) FROM taskq.tasks AS t
        WHERE t.status = 'PROCESSING' AND t.task_type = l.task_type) AS running,
       (SELECT count(*) FROM taskq.tasks AS t
        WHERE t.status IN ('PENDING', 'FAILED') AND t.task_type = l.task_type
          AND t.runnable_at <= now()) AS waiting
FROM taskq.flow_limits AS l
ORDER BY l.task_type;

-- name: queue_limits_list
SELECT q.queue, q.retry_share, q.changed_by, q.changed_at
FROM taskq.queue_limits AS q
ORDER BY q.queue;

-- name: limits_set
-- Through the definer function: the change and its audit row commit together.
SELECT l.task_type, l.max_running, l.max_running_per_key, l.rate, l.rate_text, l.burst, l.fair,
       l.source
FROM taskq.limits_set_v1(%(task_type)s, %(actor)s,
                         p_max_running => %(max_running)s::integer,
                         p_max_running_per_key => %(max_running_per_key)s::integer,
                         p_rate => %(rate)s::float8,
                         p_rate_text => %(rate_text)s::text,
                         p_burst => %(burst)s::float8,
                         p_fair => %(fair)s::boolean,
                         p_clear => %(clear)s::text[],
                         p_note => %(note)s::text) AS l;

-- name: limits_reset
SELECT taskq.limits_reset_v1(%(task_type)s, %(actor)s, %(note)s::text) AS removed;

-- name: queue_limits_set
SELECT taskq.queue_limits_set_v1(%(queue)s, %(actor)s, %(retry_share)s::real, %(note)s::text)
       AS retry_share;
