DROP TRIGGER IF EXISTS tasks_notify_insert ON taskq.tasks;
DROP FUNCTION IF EXISTS taskq.notify_tasks_v1();
