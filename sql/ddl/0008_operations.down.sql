DROP TABLE IF EXISTS taskq.leaders;
DROP TABLE IF EXISTS taskq.task_stats;
DROP TABLE IF EXISTS taskq.protection;
DROP TABLE IF EXISTS taskq.breakers;
DROP TABLE IF EXISTS taskq.pauses;
