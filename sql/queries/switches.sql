-- Business switches: "may SMS be sent at all?", decided by the business and read by handler
-- code (ctx.switch, app.switch). Writes go through taskq.switch_set_v1 (audited, NOTIFY
-- taskq_control so every worker's cache refreshes at once).

-- name: switch_set
SELECT taskq.switch_set_v1(%(name)s::text, %(enabled)s::boolean, %(note)s::text, %(by)s::text)
    AS changed;

-- name: switch_list
SELECT name, enabled, changed_by, changed_at, note
FROM taskq.switches
ORDER BY name;

-- name: switch_get
SELECT enabled FROM taskq.switches WHERE name = %(name)s;
