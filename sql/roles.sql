-- taskq roles: least privilege for the three kinds of client.
--
--   taskq_enqueuer  services that put tasks on the queue (bare INSERT, taskq.enqueue(...), the
--                   Python API). They cannot read other tasks' payloads or errors, change a
--                   status, or delete anything.
--   taskq_worker    `taskq worker` processes: claim and finish tasks, heartbeat, reap, fire
--                   schedules, keep the breakers, the protection level and the outcome counts,
--                   prune finished rows (--prune-after). No DDL; the audit trail is
--                   append-only for it (the protection evaluator audits the level changes it
--                   makes), it can neither read, rewrite nor delete it.
--   taskq_operator  people and tools (CLI, dashboard): read everything, requeue and discard
--                   dead letters, enqueue by hand, write the audit trail, flip the switches.
--
-- They are NOLOGIN group roles: grant them to your login roles
--   CREATE ROLE billing_api LOGIN PASSWORD '...' IN ROLE taskq_enqueuer;
--
-- Run by the owner of the taskq schema (it grants on taskq's objects) holding CREATEROLE (it
-- creates the roles), after the schema is at head: `taskq migrate --roles`, or
-- `psql -1 -f roles.sql` (-1: one transaction, as `taskq migrate --roles` runs it).
--
-- Safe to run many times, from many hosts at once, against many databases of one cluster:
-- roles are cluster-wide, so they are created only when missing (and an existing role is left
-- as it is); privileges are per database, so every database gets its own grants. The grants
-- below are the whole truth: each run first revokes what these roles hold in schema taskq, so a
-- privilege removed from this file is removed from the database too.
--
-- Why column grants for the enqueuer, not a SECURITY DEFINER function: the Python API and the
-- bare-INSERT contract with other languages write the table directly, so the table's own
-- privileges must be right anyway; a definer function would add a second path that runs with
-- the owner's rights (and must pin its search_path) while covering only one of the three ways
-- to enqueue. Column privileges keep every path on the caller's own rights, the NOTIFY trigger
-- included.

-- Concurrent runs against one database take turns (concurrent GRANTs on one object fail with
-- "tuple concurrently updated"). The key is the one `taskq migrate` uses; transaction-scoped.
SELECT pg_advisory_xact_lock(499851160433);

-- A GRANT by a role that does not own the table is not an error, only a warning ("no
-- privileges were granted"): refuse up front rather than leave the roles silently without
-- their privileges.
DO $owner$
BEGIN
    IF to_regclass('taskq.tasks') IS NULL THEN
        RAISE EXCEPTION 'the taskq schema is not there: run taskq migrate first'
            USING ERRCODE = 'undefined_table';
    END IF;
    IF NOT pg_has_role(current_user,
                       (SELECT relowner FROM pg_class WHERE oid = 'taskq.tasks'::regclass),
                       'USAGE') THEN
        RAISE EXCEPTION 'role % does not own the taskq schema''s tables', current_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$owner$;

DO $roles$
DECLARE
    role_name text;
BEGIN
    FOREACH role_name IN ARRAY ARRAY['taskq_enqueuer', 'taskq_worker', 'taskq_operator'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role_name) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', role_name);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;  -- a concurrent run against another database created it first
            END;
        END IF;
    END LOOP;
END
$roles$;

REVOKE ALL ON ALL TABLES IN SCHEMA taskq FROM taskq_enqueuer, taskq_worker, taskq_operator;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA taskq FROM taskq_enqueuer, taskq_worker, taskq_operator;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA taskq FROM taskq_enqueuer, taskq_worker, taskq_operator;
GRANT USAGE ON SCHEMA taskq TO taskq_enqueuer, taskq_worker, taskq_operator;

-- The enqueuer writes only the columns a producer sets (status, tokens, timestamps and results
-- keep their defaults: a producer cannot insert a task as SUCCESS or PROCESSING). It reads only
-- what enqueueing itself needs: RETURNING id, and the columns of the unique-key index and its
-- predicate, which ON CONFLICT and the look-up of the live task holding a key read
-- (find_live_tasks, taskq.enqueue(unique_key => ...)). Never payload, last_error or context.
GRANT INSERT (task_type, queue, biz_id, payload, priority, scheduled_at, max_retry_count,
              timeout_seconds, trace_id, unique_key, ordering_key, parent_id)
    ON taskq.tasks TO taskq_enqueuer;
GRANT SELECT (id, task_type, unique_key, status) ON taskq.tasks TO taskq_enqueuer;
-- SECURITY INVOKER: it inserts with the caller's own (column) privileges above.
GRANT EXECUTE ON FUNCTION taskq.enqueue TO taskq_enqueuer, taskq_worker, taskq_operator;
-- Bulk enqueue by COPY reserves ids from the identity sequence first (enqueue_many, child
-- tasks in bulk). The worker and the operator may insert any column anyway; the enqueuer may
-- not choose ids, so its enqueue_many takes the INSERT ... SELECT path instead.
GRANT USAGE ON SEQUENCE taskq.tasks_id_seq TO taskq_worker, taskq_operator;

-- Every table of schema taskq, one line each: what the worker may do with it, and what the
-- operator may do besides SELECT (the operator reads every table listed). Why some of them:
--   tasks         worker DELETE: retention on the leader (`taskq worker --prune-after`); a
--                 worker can already set any status, so deleting adds little. Operator
--                 INSERT, UPDATE, DELETE: `taskq enqueue`, `dlq requeue`, `dlq discard`, `prune`.
--   audit         INSERT only, for both: nobody but the owner rewrites or deletes the trail.
--   workers       operator DELETE, task_stats operator INSERT/UPDATE: `taskq reap` by hand
--                 forgets dead workers and counts what it rescued.
-- A table of a newer migration that this database does not have yet is skipped.
-- tests/test_roles.py fails when a table in the schema is missing from this list: add its line
-- here in the same change as its migration.
DO $grants$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT * FROM (VALUES
        -- table            taskq_worker                      taskq_operator (+ SELECT)
        ('tasks',           'SELECT, INSERT, UPDATE, DELETE', 'INSERT, UPDATE, DELETE'),
        ('task_executed',   'SELECT, INSERT',                 ''),
        ('audit',           'INSERT',                         'INSERT'),
        ('workers',         'SELECT, INSERT, UPDATE, DELETE', 'DELETE'),
        ('schedules',       'SELECT, INSERT, UPDATE',         ''),
        ('schedule_ticks',  'SELECT, INSERT, UPDATE',         ''),
        ('pauses',          'SELECT',                         'INSERT, UPDATE, DELETE'),
        ('breakers',        'SELECT, INSERT, UPDATE',         'UPDATE, DELETE'),
        ('protection',      'SELECT, UPDATE',                 'UPDATE'),
        ('task_stats',      'SELECT, INSERT, UPDATE, DELETE', 'INSERT, UPDATE, DELETE'),
        ('leaders',         'SELECT, INSERT, UPDATE, DELETE', ''),
        ('alembic_version', '',                               '')
    ) AS grants(tbl, worker, operator)
    LOOP
        CONTINUE WHEN to_regclass(format('taskq.%I', g.tbl)) IS NULL;
        EXECUTE format('GRANT SELECT ON taskq.%I TO taskq_operator', g.tbl);
        IF g.worker <> '' THEN
            EXECUTE format('GRANT %s ON taskq.%I TO taskq_worker', g.worker, g.tbl);
        END IF;
        IF g.operator <> '' THEN
            EXECUTE format('GRANT %s ON taskq.%I TO taskq_operator', g.operator, g.tbl);
        END IF;
    END LOOP;
END
$grants$;
