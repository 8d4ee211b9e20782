-- taskq roles: least privilege for the three kinds of client.
--
--   taskq_enqueuer  services that put tasks on the queue (bare INSERT, taskq.enqueue(...), the
--                   Python API). They cannot read other tasks' payloads or errors, change a
--                   status, or delete anything.
--   taskq_worker    `taskq worker` processes (and `taskq reap` by hand): claim and finish
--                   tasks, heartbeat, reap, fire schedules, keep the breakers and the outcome
--                   counts, set the protection level and prune finished rows (--prune-after)
--                   through the audited functions, take exactly-once keys only for the attempt
--                   it holds (record_business_key_v1). No DDL, no DELETE on tasks; it can
--                   neither read nor write the audit trail directly.
--   taskq_operator  people and tools (CLI, dashboard): read everything, enqueue by hand
--                   (INSERT on tasks), and every other write through a SECURITY DEFINER
--                   function that audits it in the same transaction: requeue, discard, edit
--                   and resolve dead letters, pause and resume, reset breakers, set the level,
--                   prune, cancel, switches, flow limits. No UPDATE or DELETE on tasks.
--
-- The audit actor is always the login (session_user): the definer functions write it, and a
-- trigger on taskq.audit stamps it over whatever an INSERT said (the name a tool acts for,
-- e.g. "alice via dashboard" or the OS user, is kept in detail.by).
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
              timeout_seconds, trace_id, unique_key, ordering_key, parent_id, traceparent)
    ON taskq.tasks TO taskq_enqueuer;
DO $flow$
BEGIN
    -- concurrency_key (0013) where the database has it.
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'taskq.tasks'::regclass
               AND attname = 'concurrency_key' AND NOT attisdropped) THEN
        GRANT INSERT (concurrency_key) ON taskq.tasks TO taskq_enqueuer;
    END IF;
    -- Operators change flow limits only through the definer functions, which audit.
    IF to_regprocedure('taskq.limits_reset_v1(text, text, text)') IS NOT NULL THEN
        GRANT EXECUTE ON FUNCTION
            taskq.limits_set_v1(text, text, integer, integer, double precision, text,
                                double precision, boolean, text[], text),
            taskq.limits_reset_v1(text, text, text),
            taskq.queue_limits_set_v1(text, text, real, text)
        TO taskq_operator;
    END IF;
END
$flow$;
-- Kept on purpose: the enqueuer can read id, task_type, unique_key and status of every task.
-- enqueue(unique_key => ...) and unique=True answer with the live task that holds the key (its
-- id, found by key among live statuses) and ON CONFLICT infers the unique index from these
-- columns; a definer look-up would be a second enqueue path with the owner's rights, which the
-- paragraph at the top rules out. It reveals that a task of a type exists and its state, never
-- its payload, business key, errors or context: keep secrets out of unique keys (hash them).
GRANT SELECT (id, task_type, unique_key, status) ON taskq.tasks TO taskq_enqueuer;
-- The routing trigger reads the type registry with the inserting role's rights (a row whose
-- writer named no queue gets its type's queue); it holds only names, queues and options.
DO $registry$
BEGIN
    IF to_regclass('taskq.task_types') IS NOT NULL THEN
        GRANT SELECT ON taskq.task_types TO taskq_enqueuer;
    END IF;
END
$registry$;
-- SECURITY INVOKER: it inserts with the caller's own (column) privileges above.
GRANT EXECUTE ON FUNCTION taskq.enqueue TO taskq_enqueuer, taskq_worker, taskq_operator;
-- The outcome counter of the finish and reap statements (SECURITY INVOKER as well).
GRANT EXECUTE ON FUNCTION taskq.count_outcome_v1 TO taskq_worker, taskq_operator;
-- Bulk enqueue by COPY reserves ids from the identity sequence first (enqueue_many, child
-- tasks in bulk). The worker and the operator may insert any column anyway; the enqueuer may
-- not choose ids, so its enqueue_many takes the INSERT ... SELECT path instead.
GRANT USAGE ON SEQUENCE taskq.tasks_id_seq TO taskq_worker, taskq_operator;

-- Every table of schema taskq, one line each: what the worker may do with it, and what the
-- operator may do besides SELECT (the operator reads every table listed). Why some of them:
--   tasks         operator INSERT only: `taskq enqueue`. Its requeue, discard, edited
--                 requeue, prune and the lock of a dead-letter batch go through the definer
--                 functions (0016), each audited; the worker's retention too (prune_batch_v1).
--   task_executed worker SELECT only: the key is taken through record_business_key_v1, which
--                 checks the caller holds the task's attempt.
--   audit         nothing for either: every audit row is written by a definer function (or a
--                 trigger stamps session_user as the actor); nobody but the owner rewrites or
--                 deletes the trail.
--   workers       `taskq reap` by hand is a worker's pass (it ends attempts, which only the
--                 completer's statements do): run it with a login in taskq_worker.
--   task_stats    operator DELETE: `taskq prune` drops old outcome counters.
-- A table of a newer migration that this database does not have yet is skipped.
-- tests/test_roles.py fails when a table in the schema is missing from this list: add its line
-- here in the same change as its migration.
DO $grants$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT * FROM (VALUES
        -- table            taskq_worker                      taskq_operator (+ SELECT)
        ('tasks',           'SELECT, INSERT, UPDATE',         'INSERT'),
        ('task_executed',   'SELECT',                         ''),
        ('audit',           '',                               ''),
        ('workers',         'SELECT, INSERT, UPDATE, DELETE', ''),
        ('schedules',       'SELECT, INSERT, UPDATE',         ''),
        ('schedule_ticks',  'SELECT, INSERT, UPDATE',         ''),
        ('pauses',          'SELECT',                         ''),
        ('breakers',        'SELECT, INSERT, UPDATE',         ''),
        ('protection',      'SELECT',                         ''),
        ('task_stats',      'SELECT, INSERT, UPDATE, DELETE', 'DELETE'),
        ('leaders',         'SELECT, INSERT, UPDATE, DELETE', ''),
        -- the claim spends tokens and moves the fair-share cursor; workers write the code's
        -- limits at start. Operators change them through limits_set_v1 (audited) only.
        ('flow_limits',     'SELECT, INSERT, UPDATE, DELETE', ''),
        ('queue_limits',    'SELECT',                         ''),
        ('dead_letters',    '',                               ''),
        ('switches',        'SELECT',                         ''),
        ('backlog_samples', 'SELECT, INSERT, UPDATE, DELETE', 'DELETE'),
        ('task_types',      'SELECT, INSERT, UPDATE',         ''),
        ('settings',        'SELECT',                         'UPDATE'),
        -- written only by the tasks table's SECURITY DEFINER triggers (0020)
        ('task_traces',     '',                               ''),
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

-- Task control (0012): operator writes go through SECURITY DEFINER functions that audit with
-- actor = session_user. Service code may cancel its own tasks in its own transaction
-- (app.cancel) and read business switches (app.switch); a handler may cancel its children.
DO $control$
BEGIN
    IF to_regprocedure('taskq.cancel_v1(bigint[], boolean, text, text)') IS NOT NULL THEN
        GRANT EXECUTE ON FUNCTION taskq.cancel_v1(bigint[], boolean, text, text)
            TO taskq_enqueuer, taskq_worker, taskq_operator;
        GRANT EXECUTE ON FUNCTION taskq.dlq_handle_v1(bigint[], text, text, text, text, text)
            TO taskq_operator;
        GRANT EXECUTE ON FUNCTION taskq.switch_set_v1(text, boolean, text, text)
            TO taskq_operator;
        GRANT EXECUTE ON FUNCTION taskq.error_fingerprint_v1(text), taskq.error_signature_v1(text)
            TO taskq_operator;
        GRANT SELECT ON taskq.switches TO taskq_enqueuer;
    END IF;
END
$control$;

-- Least privilege, tightened (0016): the operator's writes, the worker's retention, the level
-- and the exactly-once key go through audited definer functions; the tables above hold no
-- direct UPDATE/DELETE for them any more.
DO $definer$
BEGIN
    IF to_regprocedure('taskq.record_business_key_v1(bigint, uuid)') IS NULL THEN
        RAISE EXCEPTION 'the taskq schema is older than this roles.sql: run taskq migrate first'
            USING ERRCODE = 'undefined_function';
    END IF;
    GRANT EXECUTE ON FUNCTION
        taskq.dlq_lock_v1(bigint[], text, text, text, float8, float8, text, text),
        taskq.dlq_requeue_v1(bigint[], text, text, text, float8, float8, text, text, integer,
                             boolean, text, text),
        taskq.dlq_discard_v1(bigint[], text, text, text, float8, float8, text, text, integer,
                             text, text),
        taskq.dlq_requeue_edited_v1(bigint, jsonb, boolean, text, text),
        taskq.dlq_run_audit_v1(text, text, jsonb, text),
        taskq.pause_v1(text, text, text, text),
        taskq.resume_v1(text, text, text, text),
        taskq.breaker_reset_v1(text, text, text)
    TO taskq_operator;
    GRANT EXECUTE ON FUNCTION
        taskq.protection_set_v1(integer, text, boolean, text),
        taskq.prune_batch_v1(text, float8, integer)
    TO taskq_worker, taskq_operator;
    GRANT EXECUTE ON FUNCTION taskq.record_business_key_v1(bigint, uuid) TO taskq_worker;
END
$definer$;

-- 0018: the breaker reset that also starts a fresh failure-rate window.
DO $breaker_window$
BEGIN
    IF to_regprocedure('taskq.breaker_reset_v2(text, text, text)') IS NULL THEN
        RAISE EXCEPTION 'the taskq schema is older than this roles.sql: run taskq migrate first'
            USING ERRCODE = 'undefined_function';
    END IF;
    GRANT EXECUTE ON FUNCTION taskq.breaker_reset_v2(text, text, text) TO taskq_operator;
END
$breaker_window$;

-- 0033: the statistics upkeep the worker's leader runs (taskq.analyze_when_stale_v1), and the
-- operator may run by hand.
DO $analyze_when_stale$
BEGIN
    IF to_regprocedure('taskq.analyze_when_stale_v1()') IS NULL THEN
        RAISE EXCEPTION 'the taskq schema is older than this roles.sql: run taskq migrate first'
            USING ERRCODE = 'undefined_function';
    END IF;
    GRANT EXECUTE ON FUNCTION taskq.analyze_when_stale_v1() TO taskq_worker, taskq_operator;
END
$analyze_when_stale$;
