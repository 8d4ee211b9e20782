DROP TABLE IF EXISTS taskq.task_executed;
DROP TABLE IF EXISTS taskq.tasks;
