-- Periodic tasks. The scheduler in every worker runs, per schedule, one transaction:
-- schedule_upsert (which locks the schedule's row, so concurrent workers take turns), then
-- one schedule_tick per due tick, then schedule_advance. schedule_ticks' primary key on
-- (name, tick) is the last line of defence: a tick is recorded, and enqueued, exactly once.

-- name: schedule_upsert
-- Create the schedule on first sight (ticks count from now, not from the epoch), update its
-- definition from the code otherwise; return where it stands and the database clock.
INSERT INTO taskq.schedules (name, task_type, spec, timezone, catch_up, backfill_limit)
VALUES (%(name)s, %(task_type)s, %(spec)s, %(timezone)s, %(catch_up)s, %(backfill_limit)s)
ON CONFLICT (name) DO UPDATE
    SET task_type = EXCLUDED.task_type,
        spec = EXCLUDED.spec,
        timezone = EXCLUDED.timezone,
        catch_up = EXCLUDED.catch_up,
        backfill_limit = EXCLUDED.backfill_limit
RETURNING since, last_tick, now() AS now;

-- name: schedule_tick
-- Record one tick's outcome. No row back: someone recorded it already.
INSERT INTO taskq.schedule_ticks (name, tick, outcome, task_id, reason)
VALUES (%(name)s, %(tick)s, %(outcome)s, %(task_id)s, %(reason)s)
ON CONFLICT (name, tick) DO NOTHING
RETURNING tick;

-- name: schedule_advance
UPDATE taskq.schedules
SET last_tick = greatest(last_tick, %(last_tick)s::timestamptz),
    last_task_id = coalesce(%(last_task_id)s, last_task_id),
    next_tick = %(next_tick)s,
    missed_total = missed_total + %(missed)s,
    updated_at = now()
WHERE name = %(name)s;

-- name: list_schedules
SELECT s.name, s.task_type, s.spec, s.timezone, s.catch_up, s.backfill_limit, s.since,
       s.last_tick, s.last_task_id, s.next_tick, s.missed_total, t.status AS last_status
FROM taskq.schedules AS s
LEFT JOIN taskq.tasks AS t ON t.id = s.last_task_id
ORDER BY s.name;

-- name: schedule_tick_task
UPDATE taskq.schedule_ticks SET task_id = %(task_id)s WHERE name = %(name)s AND tick = %(tick)s;
